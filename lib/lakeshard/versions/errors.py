"""The base of every error :mod:`lakeshard.versions` raises on purpose: catch it to catch them all."""

from __future__ import annotations

from lakeshard.errors import LakeshardError

__all__ = ["VersionsError"]


class VersionsError(LakeshardError):
    """Root of the versions package's errors; raised itself when a chunk or version was malformed, or is not
    in the table's log."""
