"""The base of every error :mod:`lakeshard.dedupe` raises on purpose: catch it to catch them all."""

from __future__ import annotations

from lakeshard.errors import LakeshardError

__all__ = ["DedupeError"]


class DedupeError(LakeshardError):
    """Root of the shard writers' errors."""
