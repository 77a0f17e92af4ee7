"""The base of every error :mod:`lakeshard.landing` raises on purpose: catch it to catch them all."""

from __future__ import annotations

from lakeshard.errors import LakeshardError

__all__ = ["LandingReadError"]


class LandingReadError(LakeshardError):
    """The landing zone cannot be listed: it does not exist, or its location is not understood."""
