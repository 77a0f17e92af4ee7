"""The base of every error :mod:`lakeshard.compaction` raises on purpose: catch it to catch them all."""

from __future__ import annotations

from lakeshard.errors import LakeshardError

__all__ = ["CompactionError"]


class CompactionError(LakeshardError):
    """Root of compaction's errors; raised itself when a table cannot be compacted as asked (wrong partitioning,
    unknown bucket, bad settings)."""
