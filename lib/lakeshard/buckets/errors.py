"""The base of every error :mod:`lakeshard.buckets` raises on purpose: catch it to catch them all."""

from __future__ import annotations

from lakeshard.errors import LakeshardError

__all__ = ["BucketsError"]


class BucketsError(LakeshardError):
    """A bucket request was malformed, or the lakehouse lacks what the completionist reads."""
