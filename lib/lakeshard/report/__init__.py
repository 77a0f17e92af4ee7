"""Reports people read: text tables for the terminal and the numbers the figures of :mod:`lakeshard.app.plots`
are drawn from."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakeshard._lazy import lazy_exports
from lakeshard.report.tables import format_table

if TYPE_CHECKING:
    from lakeshard.report.routing import ShardLoad, shard_load

# The shard load reads tables through lakeshard.lake (pyarrow, pyspark): loaded on first use.
__all__ = ["ShardLoad", "format_table", "shard_load"]

__getattr__, __dir__ = lazy_exports(globals())
