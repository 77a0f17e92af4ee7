"""Reports people read: text tables for the terminal and the numbers the figures of :mod:`lakeshard.app.plots`
are drawn from."""

from __future__ import annotations

from lakeshard.report.routing import ShardLoad, shard_load
from lakeshard.report.tables import format_table

__all__ = ["ShardLoad", "format_table", "shard_load"]
