"""The errors of lakeshard's housekeeping (:mod:`lakeshard.maintenance`)."""

from __future__ import annotations

from lakeshard.errors import LakeshardError

__all__ = ["MaintenanceError", "RefillRefused"]


class MaintenanceError(LakeshardError):
    """A housekeeping operation cannot run on this lakehouse as asked."""


class RefillRefused(MaintenanceError):
    """A bucket cannot be refilled: it is closed, or the lakehouse lacks a table a refill reads (the message says
    which)."""
