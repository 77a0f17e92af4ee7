"""Exactly-once writers: routed events → ``events``, deduplicated against IDs kept in the lakehouse."""

from __future__ import annotations

from lakeshard.dedupe.writer import EVENTS, EVENTS_SCHEMA, ID_INDEX, ID_SCHEMA, ShardWriter, WriteReport

__all__ = ["EVENTS", "EVENTS_SCHEMA", "ID_INDEX", "ID_SCHEMA", "ShardWriter", "WriteReport"]
