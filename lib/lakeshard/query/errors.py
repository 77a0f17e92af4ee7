"""The base of every error :mod:`lakeshard.query` raises on purpose: catch it to catch them all."""

from __future__ import annotations

from lakeshard.errors import LakeshardError

__all__ = ["QueryError"]


class QueryError(LakeshardError):
    """A query is malformed: an unknown column, an empty IN list, a reversed time range, a read of
    ``format("lakeshard")`` without a table."""
