"""The base of every error :mod:`lakeshard.balancing` raises on purpose: catch it to catch them all."""

from __future__ import annotations

from lakeshard.errors import LakeshardError

__all__ = ["BalancingError"]


class BalancingError(LakeshardError):
    """Root of load management's errors (autosharder, balancer, exclusions)."""
