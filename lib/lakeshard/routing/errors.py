"""The base of every error :mod:`lakeshard.routing` raises on purpose: catch it to catch them all."""

from __future__ import annotations

from lakeshard.errors import LakeshardError

__all__ = ["RoutingError"]


class RoutingError(LakeshardError):
    """A placement cannot be made as asked (too few shards, bad window length, unknown tenant)."""
