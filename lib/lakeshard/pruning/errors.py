"""The base of every error :mod:`lakeshard.pruning` raises on purpose: catch it to catch them all."""

from __future__ import annotations

from lakeshard.errors import LakeshardError

__all__ = ["PruningError"]


class PruningError(LakeshardError):
    """Pruning metadata is malformed or a bound is impossible; the message says which value and why."""
