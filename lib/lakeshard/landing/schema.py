"""Spark schemas of what the landing reader gives back: valid events and quarantined records.

``EVENT_SCHEMA`` is the shape every later stage (routing, writers, the events table) starts from;
``QUARANTINE_SCHEMA`` is the dead-letter table's row (docs/design.md §2, invariant 2 "nothing lost").
Timestamps are Spark ``TimestampType`` (an instant, microsecond precision, shown in the session time
zone, which lakeshard sets to UTC).
"""

from __future__ import annotations

from pyspark.sql.types import (
    BooleanType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

__all__ = ["EVENT_SCHEMA", "QUARANTINE_RAW_LIMIT_BYTES", "QUARANTINE_SCHEMA"]

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
