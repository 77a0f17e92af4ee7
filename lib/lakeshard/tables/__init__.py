"""The catalog of a lakehouse: every table's name, schema, partitioning and properties, every app transaction
id format, and the bucket hour format, defined once.

Every table sits at ``<lakehouse>/<name>`` (:meth:`lakeshard.config.LakeshardConfig.table_uri`). Its Spark
schema and table properties are in :mod:`lakeshard.tables.schemas`, re-exported here on first use. The code
that owns a table (creates it, commits to it) and the code that only reads it or names it in a pipeline both
import from here, so no package imports another just to spell a table's name, schema or app id.

Names, partitioning, app ids and the hour format are plain Python; the schemas load pyspark only when one is
asked for, so the CLI wiring and the pure planners import this package for free.

Example::

    from lakeshard.tables import EVENTS, hour_of, writer_app_id

    uri = cfg.table_uri(EVENTS)
    store.transaction_version(uri, writer_app_id(3))   # the routed version shard 3 has consumed
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from lakeshard._lazy import lazy_exports
from lakeshard.utc import as_utc

if TYPE_CHECKING:
    from lakeshard.tables.schemas import (
        BUCKETS_SCHEMA,
        CHUNK_LOCKS_SCHEMA,
        EVENT_COLUMNS,
        EVENT_SCHEMA,
        EVENTS_SCHEMA,
        EXPECTATION_QUARANTINE_SCHEMA,
        EXPECTATION_SCHEMA,
        FRAGMENTS_PROPERTIES,
        FRAGMENTS_SCHEMA,
        FSCK_REPAIRS_SCHEMA,
        ID_INDEX_KEYED_SCHEMA,
        ID_INDEX_PROPERTIES,
        ID_INDEX_SCHEMA,
        LANDING_BATCHES_SCHEMA,
        PIPELINE_EVENTS_SCHEMA,
        PLACEMENT_SCHEMA,
        QUARANTINE_RAW_LIMIT_BYTES,
        QUARANTINE_SCHEMA,
        ROUTED_PROPERTIES,
        ROUTED_SCHEMA,
        ROUTING_METRICS_SCHEMA,
        SHARD_TOPOLOGY_SCHEMA,
        TENANT_SETTINGS_SCHEMA,
        USER_TABLE_SHAPES,
        TableShape,
    )

__all__ = [
    "ALLOCATOR_APP_ID",
    "BUCKETS",
    "BUCKETS_SCHEMA",
    "CHUNK_LOCKS",
    "CHUNK_LOCKS_SCHEMA",
    "COMPACTOR_APP_ID",
    "COMPLETIONIST_APP_ID",
    "EVENTS",
    "EVENTS_DISTINCT_COLUMNS",
    "EVENTS_PARTITIONING",
    "EVENTS_SCHEMA",
    "EVENTS_SORT_COLUMNS",
    "EVENT_COLUMNS",
    "EVENT_KEY",
    "EVENT_KEY_HASH",
    "EVENT_SCHEMA",
    "EXPECTATION_QUARANTINE",
    "EXPECTATION_QUARANTINE_PARTITIONING",
    "EXPECTATION_QUARANTINE_SCHEMA",
    "EXPECTATION_SCHEMA",
    "FENCE_APP_ID",
    "FRAGMENTS",
    "FRAGMENTS_PARTITIONING",
    "FRAGMENTS_PROPERTIES",
    "FRAGMENTS_SCHEMA",
    "FSCK_REPAIRS",
    "FSCK_REPAIRS_SCHEMA",
    "FUSED_APP_ID",
    "FUSED_HANDOFF",
    "HOUR_FORMAT",
    "HOUR_PATTERN",
    "HOUR_SPELLING",
    "ID_INDEX",
    "ID_INDEX_KEYED_SCHEMA",
    "ID_INDEX_PARTITIONING",
    "ID_INDEX_PROPERTIES",
    "ID_INDEX_SCHEMA",
    "LANDING_BATCHES",
    "LANDING_BATCHES_SCHEMA",
    "PIPELINE_EVENTS",
    "PIPELINE_EVENTS_SCHEMA",
    "PLACEMENTS",
    "PLACEMENTS_REFILL_APP_ID",
    "PLACEMENT_SCHEMA",
    "QUARANTINE",
    "QUARANTINE_RAW_LIMIT_BYTES",
    "QUARANTINE_SCHEMA",
    "ROUTED",
    "ROUTED_PARTITIONING",
    "ROUTED_PROPERTIES",
    "ROUTED_SCHEMA",
    "ROUTER_APP_ID",
    "ROUTING_METRICS",
    "ROUTING_METRICS_SCHEMA",
    "SHARD_TOPOLOGY",
    "SHARD_TOPOLOGY_SCHEMA",
    "SPARK_HOUR_FORMAT",
    "TABLES",
    "TENANT_SETTINGS",
    "TENANT_SETTINGS_SCHEMA",
    "USER_TABLES",
    "USER_TABLE_SHAPES",
    "TableShape",
    "dead_letter_app_id",
    "decisions_refill_app_id",
    "fragments_migrated_app_id",
    "hour_of",
    "id_refill_app_id",
    "lock_app_id",
    "parse_hour",
    "refill_app_id",
    "replace_app_id",
    "writer_app_id",
]

# --- Tables (name -> who owns it) -------------------------------------------------------------------------------

ROUTED = "routed"  # lakeshard.routing.router: landing events with their placement window and shard
QUARANTINE = "quarantine"  # router and shard writers: records that broke the format or could not be written
LANDING_BATCHES = "landing_batches"  # lakeshard.routing.router: which bytes of which landing files each batch holds
ROUTING_METRICS = "routing_metrics"  # lakeshard.routing.router: events and bytes per window, tenant and shard
PLACEMENTS = "placements"  # lakeshard.routing.tables: immutable, time-bounded shard placements
TENANT_SETTINGS = "tenant_settings"  # lakeshard.routing.tables: shard count and salt per tenant
SHARD_TOPOLOGY = "shard_topology"  # lakeshard.routing.tables: total shard count and excluded shards
EVENTS = "events"  # lakeshard.dedupe.writer: each event exactly once; one tenant and one hour per file
ID_INDEX = "event_ids"  # lakeshard.dedupe.writer: IDs of committed events, for deduplication
BUCKETS = "buckets"  # lakeshard.buckets.completionist: state of each (tenant, hour) bucket of events
CHUNK_LOCKS = "chunk_locks"  # lakeshard.versions.locks: replace locks per (tenant, hour) chunk
PIPELINE_EVENTS = "pipeline_events"  # lakeshard.pipelines.eventlog: one row per flow event of a run
EXPECTATION_QUARANTINE = "expectation_quarantine"  # lakeshard.pipelines.context: rows an expectation held back
# lakeshard.compaction.fragment_table: level, key range and pruning regexes of each file compaction wrote
FRAGMENTS = "fragments"
# lakeshard.maintenance.fsck: data files removed from a table's log as unreadable, and why
FSCK_REPAIRS = "fsck_repairs"

TABLES = (ROUTED, QUARANTINE, LANDING_BATCHES, ROUTING_METRICS, PLACEMENTS, TENANT_SETTINGS, SHARD_TOPOLOGY,
          EVENTS, ID_INDEX, BUCKETS, CHUNK_LOCKS, PIPELINE_EVENTS, EXPECTATION_QUARANTINE, FRAGMENTS, FSCK_REPAIRS)
# The tables a user queries by name (lakeshard.catalog registers them); the rest is bookkeeping.
USER_TABLES = (EVENTS, QUARANTINE, BUCKETS, PIPELINE_EVENTS)

# --- The event's identity ----------------------------------------------------------------------------------------

# What makes two events the same event (docs/design.md §2): the record format's required fields, the columns
# exactly once holds ``events`` to, and what the ID index hashes. In this order: the hash chains its inputs.
EVENT_KEY: tuple[str, str, str] = ("tenant_id", "event_id", "ts")
# The key's 128-bit hash, two long columns: what ``event_ids`` holds per event and a fused batch's rows carry.
EVENT_KEY_HASH: tuple[str, str] = ("key_hi", "key_lo")

# --- Partitioning (tables not listed here are unpartitioned) --------------------------------------------------

ROUTED_PARTITIONING = ("shard",)
EVENTS_PARTITIONING = ("tenant_id", "hour")  # a file never holds two tenants nor two hours
ID_INDEX_PARTITIONING = ("shard", "interval")  # interval: the event's UTC hour, in HOUR_FORMAT
EXPECTATION_QUARANTINE_PARTITIONING = ("flow",)
# data_table: the name of the compacted table the row describes a file of; then that file's bucket
# By hour, not by bucket: a partition per (tenant, hour) left a file per bucket that maintenance could not merge.
FRAGMENTS_PARTITIONING = ("data_table", "hour")

# The order rows of an ``events`` file are written in (Husky's typical log schema), within a (tenant, hour);
# lakeshard.compaction.sort_schema builds its EVENTS_SORT_SCHEMA (and the pruning regexes) from it.
EVENTS_SORT_COLUMNS = ("service", "status", "env", "ts")
# The columns of ``events`` whose values are nearly all distinct within a file: written without a dictionary. A
# file holds one tenant, so these are the key's columns other than the partition's.
EVENTS_DISTINCT_COLUMNS = tuple(c for c in EVENT_KEY if c not in EVENTS_PARTITIONING)

# --- App transaction ids: whose progress a Delta ``txn`` action carries -----------------------------------------

ROUTER_APP_ID = "router"  # on routed, quarantine, landing_batches, routing_metrics: the batch routed
FUSED_APP_ID = "fused"  # on events, event_ids: the batch plan delivered in memory (the fused hand-off)
FUSED_HANDOFF = "fused"  # landing_batches.handoff of a batch delivered in memory
ALLOCATOR_APP_ID = "allocator"  # on placements: the placements version the allocator read, plus one
COMPLETIONIST_APP_ID = "completionist"  # on buckets: the buckets version the completionist read, plus one
FENCE_APP_ID = "completionist/fence"  # on events: the completionist's fence against racing writers
# on placements: how many placements files fsck removed whose placements ``lakeshard refill --placements`` restored
PLACEMENTS_REFILL_APP_ID = "refill-placements"
COMPACTOR_APP_ID = "compactor"  # on events: the version the last compaction that finished its work planned at


def writer_app_id(shard: int) -> str:
    """Return the app transaction id that carries a shard writer's progress."""
    return f"writer/{shard}"


def dead_letter_app_id(shard: int) -> str:
    """Return the app transaction id, on ``quarantine``, of the routed versions a shard writer dead-lettered."""
    return f"dead-letter/{shard}"


def fragments_migrated_app_id(data_table: str) -> str:
    """Return the app transaction id, on ``fragments``, marking that a table's commit-info metadata was copied in."""
    return f"fragments-migrated/{data_table}"


def refill_app_id(batch: int, shard: int) -> str:
    """Return the app transaction id, on ``routed``, of a batch's rows for one shard routed again by ``lakeshard
    refill`` (its version: how many of those rows' files fsck removed)."""
    return f"refill/{batch}/{shard}"


def decisions_refill_app_id(table: str) -> str:
    """Return the app transaction id, on ``buckets``, ``tenant_settings`` or ``shard_topology``, of the rows of its
    removed files rebuilt by ``lakeshard refill --decisions`` (its version: how many of its files fsck removed)."""
    return f"refill-decisions/{table}"


def id_refill_app_id(shard: int, interval: str) -> str:
    """Return the app transaction id, on ``event_ids``, of a partition's IDs rebuilt from ``events`` by ``lakeshard
    refill --ids`` (its version: how many of the partition's files fsck removed)."""
    return f"refill-ids/{shard}/{interval}"


def lock_app_id(hour: str, tenant_id: str) -> str:
    """Return the app transaction id whose version is a chunk lock's generation (hour first: it has no ``/``)."""
    return f"lock/{hour}/{tenant_id}"


def replace_app_id(hour: str, tenant_id: str) -> str:
    """Return the app transaction id of the fencing token a chunk's replacement commits carry on the data table."""
    return f"replace/{hour}/{tenant_id}"


# --- The bucket hour: a UTC hour spelled "YYYY-MM-DDTHH" (the ``hour`` and ``interval`` columns) ---------------

HOUR_FORMAT = "%Y-%m-%dT%H"  # datetime.strftime / strptime
HOUR_SPELLING = "YYYY-MM-DDTHH"  # how messages spell it to people
HOUR_PATTERN = re.compile(r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3])$")  # a valid hour, exactly
SPARK_HOUR_FORMAT = "yyyy-MM-dd'T'HH"  # Spark's date_format


def hour_of(ts: datetime) -> str:
    """Return the UTC hour of ``ts`` as ``YYYY-MM-DDTHH`` (naive datetimes are taken as UTC)."""
    ts = as_utc(ts)
    return ts.strftime(HOUR_FORMAT)


def parse_hour(hour: str) -> datetime:
    """Return the first instant (UTC) of the hour ``YYYY-MM-DDTHH``.

    Raises:
        ValueError: ``hour`` is not spelled ``YYYY-MM-DDTHH``.
    """
    return datetime.strptime(hour, HOUR_FORMAT).replace(tzinfo=UTC)


# The schemas load pyspark: on first use only.
__getattr__, __dir__ = lazy_exports(globals())
