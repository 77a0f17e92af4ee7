"""Every table's Spark schema and table properties, next to the names in :mod:`lakeshard.tables`.

The code that creates and writes a table imports its schema from here; ``lakeshard.tables`` re-exports these
names lazily (this module loads pyspark), so ``from lakeshard.tables import EVENTS, EVENTS_SCHEMA`` works.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from lakeshard.lake import NO_STATS
from lakeshard.tables import BUCKETS, EVENTS, EVENTS_PARTITIONING, PIPELINE_EVENTS, QUARANTINE

__all__ = [
    "BUCKETS_SCHEMA",
    "CHUNK_LOCKS_SCHEMA",
    "EVENTS_SCHEMA",
    "EVENT_COLUMNS",
    "EVENT_SCHEMA",
    "EXPECTATION_QUARANTINE_SCHEMA",
    "EXPECTATION_SCHEMA",
    "FRAGMENTS_PROPERTIES",
    "FRAGMENTS_SCHEMA",
    "FSCK_REPAIRS_SCHEMA",
    "ID_INDEX_KEYED_SCHEMA",
    "ID_INDEX_PROPERTIES",
    "ID_INDEX_SCHEMA",
    "LANDING_BATCHES_SCHEMA",
    "PIPELINE_EVENTS_SCHEMA",
    "PLACEMENT_SCHEMA",
    "QUARANTINE_RAW_LIMIT_BYTES",
    "QUARANTINE_SCHEMA",
    "ROUTED_PROPERTIES",
    "ROUTED_SCHEMA",
    "ROUTING_METRICS_SCHEMA",
    "SHARD_TOPOLOGY_SCHEMA",
    "TENANT_SETTINGS_SCHEMA",
    "USER_TABLE_SHAPES",
    "TableShape",
]

# --- What the landing reader gives back: valid events and quarantined records ----------------------------------
# ``EVENT_SCHEMA`` is the shape every later stage (routing, writers, the events table) starts from;
# ``QUARANTINE_SCHEMA`` is the dead-letter table's row (docs/design.md §2, invariant 2 "nothing lost").
# Timestamps are Spark ``TimestampType`` (an instant, microsecond precision, shown in the session time zone,
# which lakeshard sets to UTC).

QUARANTINE_RAW_LIMIT_BYTES = 64 * 1024
"""A quarantined record's ``raw`` keeps at most this many bytes of the line (``raw_truncated`` says so)."""

EVENT_SCHEMA = StructType(
    [
        StructField("tenant_id", StringType(), nullable=False),
        StructField("event_id", StringType(), nullable=False),
        StructField("ts", TimestampType(), nullable=False),  # normalised to UTC
        StructField("service", StringType()),
        StructField("status", StringType()),
        StructField("env", StringType()),
        StructField("host", StringType()),
        StructField("message", StringType()),
        # The record's attributes plus its unknown top-level fields (non-strings JSON-encoded).
        StructField("attributes", MapType(StringType(), StringType())),
        StructField("size_bytes", IntegerType()),  # bytes of the raw line, without its newline
        StructField("source_file", StringType()),  # the landing file's URI
        StructField("line_number", LongType()),  # 1-based, in the decompressed file
    ]
)
"""One valid landing record; ``(tenant_id, event_id, ts)`` identifies the event (duplicates included)."""

QUARANTINE_SCHEMA = StructType(
    [
        # The line as text (invalid UTF-8 replaced by U+FFFD), cut to QUARANTINE_RAW_LIMIT_BYTES.
        StructField("raw", StringType()),
        StructField("raw_truncated", BooleanType()),
        StructField("size_bytes", IntegerType()),  # bytes of the whole raw line, even when raw is cut
        StructField("reason", StringType(), nullable=False),  # "<category>: <detail>"
        StructField("category", StringType(), nullable=False),  # one of lakeshard.landing.reasons.CATEGORIES
        StructField("source_file", StringType()),
        StructField("line_number", LongType()),
        StructField("quarantined_at", TimestampType()),  # the reader's clock (now_ms) for the whole batch
        # The bytes [start_byte, end_byte) of the landing file a row stands for when it is not one line: a damaged
        # gzip file's unreadable rest (compressed offsets), a planned range whose bytes changed, a range that could
        # not be read. Null for a line's rejection (line_number says where) and for rows not from a landing file.
        StructField("start_byte", LongType()),
        StructField("end_byte", LongType()),
    ]
)
"""One landing record that broke the format, with the reason; nothing is dropped silently."""

# Tables read only by partition, never by column statistics: their files carry no per-column stats.
ROUTED_PROPERTIES: Mapping[str, str] = NO_STATS
ID_INDEX_PROPERTIES: Mapping[str, str] = NO_STATS
FRAGMENTS_PROPERTIES: Mapping[str, str] = NO_STATS

_LANDING_LINEAGE = {"source_file", "line_number"}  # landing columns ``events`` does not keep
# The landing record's columns an event keeps (all but the lineage), in the record's order.
EVENT_COLUMNS: tuple[str, ...] = tuple(f.name for f in EVENT_SCHEMA.fields if f.name not in _LANDING_LINEAGE)

ROUTED_SCHEMA = StructType([
    *EVENT_SCHEMA.fields,
    StructField("window_start", TimestampType(), False),  # the placement window the event was routed by
    StructField("shard", IntegerType(), False),
    # The router batch that routed the row (its plan in landing_batches); null in rows routed before the column.
    StructField("batch", LongType(), True),
])

LANDING_BATCHES_SCHEMA = StructType([
    StructField("batch", LongType(), False),
    StructField("path", StringType(), False),
    StructField("size_bytes", LongType(), False),
    StructField("mtime", TimestampType(), False),
    StructField("planned_at", TimestampType(), False),  # also the clock the batch's parse validates by
    # The byte range [start_byte, end_byte) of the file the batch routes, the physical line numbers at its two
    # ends, a checksum of its bytes and one of the ANCHOR_BYTES before its end, and the file's identity (its
    # resolved path when it is a link). All null in plans made before byte ranges: the whole file, by path.
    StructField("start_byte", LongType(), True),
    StructField("end_byte", LongType(), True),
    StructField("first_line", LongType(), True),
    StructField("next_line", LongType(), True),
    StructField("checksum", StringType(), True),
    StructField("anchor", StringType(), True),
    StructField("file_id", StringType(), True),
    # How the batch reaches ``events``: "fused" (handed to the writers in memory by the process that planned it),
    # or null (through ``routed``). Every process finishing the batch delivers it that way.
    StructField("handoff", StringType(), True),
])

ROUTING_METRICS_SCHEMA = StructType([
    StructField("window_start", TimestampType(), False),
    StructField("tenant_id", StringType(), False),
    StructField("shard", IntegerType(), False),
    StructField("events", LongType(), False),
    StructField("bytes", LongType(), False),
    StructField("batch", LongType(), False),
    StructField("routed_at", TimestampType(), False),
])

PLACEMENT_SCHEMA = StructType([
    StructField("tenant_id", StringType(), False),
    StructField("window_start", TimestampType(), False),
    StructField("window_end", TimestampType(), False),
    StructField("shards", ArrayType(IntegerType(), False), False),
    StructField("salt", IntegerType(), False),
    StructField("total_shards", IntegerType(), False),
    StructField("excluded", ArrayType(IntegerType(), False), False),
    StructField("created_at", TimestampType(), False),
    StructField("allocation", LongType(), False),  # the placements-table version the allocator read
    # The event hash the placement routes by (lakeshard.routing.hashing). Null in rows written before the
    # column existed: those placements were routed by mmh3, version 1, and keep it.
    StructField("hash_version", IntegerType(), True),
])

TENANT_SETTINGS_SCHEMA = StructType([
    StructField("tenant_id", StringType(), False),
    StructField("shard_count", IntegerType(), False),
    StructField("salt", IntegerType(), False),
    StructField("updated_at", TimestampType(), False),
    StructField("reason", StringType(), True),
])

SHARD_TOPOLOGY_SCHEMA = StructType([
    StructField("effective_at", TimestampType(), False),
    StructField("total_shards", IntegerType(), False),
    StructField("excluded", ArrayType(IntegerType(), False), False),
    StructField("reason", StringType(), True),
])

EVENTS_SCHEMA = StructType([
    *[f for f in EVENT_SCHEMA.fields if f.name not in _LANDING_LINEAGE],
    StructField("shard", IntegerType(), False),
    StructField("routed_version", LongType(), False),  # the routed version whose consumption committed it
    # The bucket written to, "YYYY-MM-DDTHH": the UTC hour of ts, or for a late event whose own hour was
    # closed, its tenant's open bucket (lakeshard.buckets). A file never spans two.
    StructField("hour", StringType(), False),
    StructField("late", BooleanType(), True),  # written to an open bucket because its own hour was closed
])

# Only what dedupe reads: the 128-bit key hash, by shard and hour. The exact keys are in ``events`` (an ID is
# written only with its event, and rebuilt from it), so a copy here would more than double the index's bytes for
# no check.
ID_INDEX_SCHEMA = StructType([
    StructField("shard", IntegerType(), False),
    StructField("interval", StringType(), False),
    StructField("routed_version", LongType(), False),  # the routed version whose consumption committed the event
    StructField("key_hi", LongType(), False),  # 128-bit hash of (tenant_id, event_id, ts): what the cache holds
    StructField("key_lo", LongType(), False),
])

# The shape of an ID index made with the exact keys beside their hash: writers keep writing such an index in its
# own shape (they follow the table's schema), so a lakehouse made so needs no migration.
ID_INDEX_KEYED_SCHEMA = StructType([
    *ID_INDEX_SCHEMA.fields[:2],
    StructField("tenant_id", StringType(), False),
    StructField("event_id", StringType(), False),
    StructField("ts", EVENT_SCHEMA["ts"].dataType, False),
    *ID_INDEX_SCHEMA.fields[2:],
])

BUCKETS_SCHEMA = StructType([
    StructField("tenant_id", StringType(), False),
    StructField("hour", StringType(), False),
    # "open" (first seen), "closing" (checked and being fenced: writers treat it as closed) or "closed" (final)
    StructField("state", StringType(), False),
    StructField("decided_at", TimestampType(), False),
    StructField("reason", StringType(), False),
    StructField("rows", LongType(), True),
    StructField("distinct_keys", LongType(), True),
    StructField("checksum", StringType(), True),
    StructField("newest_file_at", TimestampType(), True),
    StructField("events_version", LongType(), True),  # the events version the closing check read
])

CHUNK_LOCKS_SCHEMA = StructType([
    StructField("tenant_id", StringType(), False),
    StructField("hour", StringType(), False),
    StructField("generation", LongType(), False),  # = the lock app transaction's version of this row's commit
    StructField("holder", StringType(), False),
    StructField("state", StringType(), False),  # "held" or "released"
    StructField("acquired_at", TimestampType(), False),
    StructField("expires_at", TimestampType(), False),
    StructField("recorded_at", TimestampType(), False),
])

EXPECTATION_SCHEMA = StructType([
    StructField("name", StringType(), False),
    StructField("kind", StringType(), False),
    StructField("condition", StringType(), False),
    StructField("passed", LongType(), False),
    StructField("failed", LongType(), False),
])

PIPELINE_EVENTS_SCHEMA = StructType([
    StructField("run_id", StringType(), False),
    StructField("pipeline", StringType(), False),
    StructField("flow", StringType(), False),
    StructField("event", StringType(), False),  # one of lakeshard.pipelines.eventlog.EVENT_KINDS
    StructField("timestamp", TimestampType(), False),
    StructField("full_refresh", BooleanType(), False),
    StructField("rows_in", LongType()),
    StructField("rows_out", LongType()),
    StructField("duplicates_dropped", LongType()),
    StructField("quarantined", LongType()),
    StructField("dropped", LongType()),
    StructField("expectations", ArrayType(EXPECTATION_SCHEMA)),
    StructField("duration_seconds", DoubleType()),
    StructField("error", StringType()),
    # Input table versions the flow saw at its end (what makes the next run "up to date"), and flow details.
    StructField("input_versions", MapType(StringType(), LongType())),
    StructField("details", MapType(StringType(), StringType())),
])

EXPECTATION_QUARANTINE_SCHEMA = StructType([
    StructField("flow", StringType(), False),
    StructField("rule", StringType(), False),
    StructField("condition", StringType(), False),
    StructField("run_id", StringType(), False),
    StructField("row", StringType(), False),  # the failing row as JSON, whatever the flow's schema
    StructField("quarantined_at", TimestampType(), False),
    StructField("rows", LongType(), False),  # always 1: lets a sum() read like the event log's counts
])

# One row per data file compaction wrote (lakeshard.compaction.fragment_table), written before the swap commit
# that adds the file: a row whose file is not live is ignored by readers.
FRAGMENTS_SCHEMA = StructType([
    StructField("data_table", StringType(), False),  # the compacted table's name (the last segment of its URI)
    StructField("tenant_id", StringType(), False),
    StructField("hour", StringType(), False),
    StructField("path", StringType(), False),  # relative to the data table's root, decoded (as on disk)
    StructField("level", IntegerType(), False),
    StructField("rows", LongType(), False),
    StructField("outlier", BooleanType(), False),
    StructField("meta", StringType(), False),  # FragmentMeta.to_json() as JSON: key range and per-column regexes
    StructField("written_at", TimestampType(), False),
])

# One row per data file ``lakeshard fsck --repair`` removed from a table's log: what it held per the log, and why.
FSCK_REPAIRS_SCHEMA = StructType([
    StructField("table_name", StringType(), False),  # the table's name in the lakehouse (``events``, ...)
    StructField("path", StringType(), False),  # as the log held it, relative to the table
    StructField("partition_values", StringType(), False),  # JSON object of the file's partition values
    StructField("tenant_id", StringType(), True),  # when the table is partitioned by it
    StructField("hour", StringType(), True),
    StructField("rows", LongType(), True),  # the log's numRecords for the file: the rows lost until refilled
    StructField("problem", StringType(), False),
    StructField("removed_at", TimestampType(), False),
])


@dataclass(frozen=True)
class TableShape:
    """What a table is created with: its schema, partition columns, properties and description."""

    schema: StructType
    partition_by: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    description: str = ""


# The user-facing tables (lakeshard.tables.USER_TABLES) as their owners create them; lakeshard.catalog creates the
# same empty tables where a catalog must name them before the pipeline has written them.
USER_TABLE_SHAPES: Mapping[str, TableShape] = {
    EVENTS: TableShape(EVENTS_SCHEMA, EVENTS_PARTITIONING,
                       description="each event exactly once; one tenant and one hour per file"),
    QUARANTINE: TableShape(QUARANTINE_SCHEMA,
                           description="records that broke the format or could not be written, with the reason"),
    BUCKETS: TableShape(BUCKETS_SCHEMA, description="state of each (tenant, hour) bucket of events"),
    PIPELINE_EVENTS: TableShape(PIPELINE_EVENTS_SCHEMA, description="lakeshard pipeline event log: one row per flow "
                                "start and end, with counts, expectations, durations and errors"),
}
