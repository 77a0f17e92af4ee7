"""Reports people read: text tables for the terminal and the numbers the figures of :mod:`lakeshard.app.plots`
are drawn from."""

from __future__ import annotations

from lakeshard.report.tables import format_table

__all__ = ["format_table"]
