"""Reports people read or look at: text tables for the terminal, matplotlib figures saved as PNG."""

from __future__ import annotations

from lakeshard.report.plots import plot_landing_overview
from lakeshard.report.tables import format_table

__all__ = ["format_table", "plot_landing_overview"]
