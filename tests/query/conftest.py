"""The read path is tested on the small compacted events tables compaction's tests build: their fixture and
helpers, shared rather than copied."""

from __future__ import annotations

from compaction.conftest import HOURS, AppendEvents, checksum, events_table, small_settings

__all__ = ["HOURS", "AppendEvents", "checksum", "events_table", "small_settings"]
