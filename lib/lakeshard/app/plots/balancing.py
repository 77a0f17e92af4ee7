"""Figures of load management: the autosharder following a burst, shard load before and after
balancing, variance over time with and without the balancer, and a shard draining after exclusion."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lakeshard.balancing import BalanceComparison, SimulationReport

__all__ = [
    "ExclusionPanel",
    "balancing_figure",
    "plot_burst_response",
    "plot_exclusion",
    "plot_shard_load",
    "plot_variance",
]


@dataclass(frozen=True)
class ExclusionPanel:
    """A shard excluded at window ``excluded_at`` and included again at ``included_at``, in ``report``."""

    report: SimulationReport
    shard: int
    excluded_at: int
    included_at: int | None = None


def _hours(report: SimulationReport) -> Any:
    return np.arange(report.windows) * report.window_seconds / 3600.0


def plot_burst_response(
    ax: Any,
    report: SimulationReport,
    tenant: str,
    *,
    target_bytes_per_second: float,
    windows: tuple[int, int] | None = None,
) -> None:
    """Draw ``tenant``'s bytes/s and its configured shard count window by window (the tenant must be tracked).

    The shard axis is scaled so that ``n`` shards sit at ``n * target`` on the rate axis: where the traffic
    line is above the shard steps, the tenant sends more than its shards are sized for.

    Args:
        windows: ``(first, last)`` window range to show (default: all).
    """
    lo, hi = windows if windows is not None else (0, report.windows - 1)
    lo, hi = max(0, lo), min(report.windows - 1, hi)
    hours = _hours(report)[lo:hi + 1]
    mib = 2.0**20
    rate = report.tracked_rates[tenant][lo:hi + 1] / mib
    counts = report.tracked_counts[tenant][lo:hi + 1]
    ax.step(hours, rate, where="post", color="tab:purple", label="traffic (bytes/s per window)")
    ax.set(xlabel="hours", ylabel="MiB/s", title=f"autosharder following a burst: {tenant}")
    twin = ax.twinx()
    twin.step(hours, counts, where="post", color="tab:blue", label="shards in placement")
    twin.set_ylabel("shards in placement")
    top = max(float(rate.max()), float(counts.max()) * target_bytes_per_second / mib) * 1.1
    ax.set_ylim(0, top)
    twin.set_ylim(0, top * mib / target_bytes_per_second)
    lines = ax.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="upper right")


def plot_shard_load(ax: Any, comparison: BalanceComparison) -> None:
    """Draw the bytes of every shard before and after one balancer run, hottest-first, with the mean."""
    before, after = comparison.shard_bytes_before, comparison.shard_bytes_after
    mean = float(before.mean()) or 1.0
    shards = np.arange(len(before))
    first = comparison.result("balancer, 1 run")
    ax.plot(shards, np.sort(before)[::-1] / mean, color="tab:red", label="hash only")
    ax.plot(shards, np.sort(after)[::-1] / mean, color="tab:green", label=f"after 1 run ({first.moves} moves)")
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.axhline(1.25, color="gray", linewidth=0.8, linestyle=":", label="max/mean 1.25")
    ax.set(xlabel="shards, hottest first", ylabel="load / mean",
           title=f"per-shard load, {comparison.tenants:,} tenants on {comparison.total_shards} shards")
    ax.legend(fontsize=8)


def plot_variance(ax: Any, reports: Mapping[str, SimulationReport]) -> None:
    """Draw variance / mean² of per-shard load window by window for each named replay (log scale)."""
    for name, report in reports.items():
        ax.plot(_hours(report), report.relative_variance, label=f"{name} (moves: {int(report.moves.sum()):,})",
                linewidth=1)
    ax.set_yscale("log")
    ax.set(xlabel="hours", ylabel="variance / mean^2", title="imbalance over time")
    ax.legend(fontsize=8)


def plot_exclusion(ax: Any, panel: ExclusionPanel) -> None:
    """Draw an excluded shard's bytes per window against the mean shard, with the exclusion marked."""
    report = panel.report
    hours = _hours(report)
    ax.plot(hours, report.shard_bytes[:, panel.shard] / 2**20, color="tab:red", label=f"shard {panel.shard}")
    ax.plot(hours, report.shard_bytes.mean(axis=1) / 2**20, color="gray", linewidth=1, label="mean shard")
    ws = report.window_seconds / 3600.0
    ax.axvline(panel.excluded_at * ws, color="black", linestyle="--", linewidth=0.8, label="excluded")
    if panel.included_at is not None:
        ax.axvline(panel.included_at * ws, color="black", linestyle=":", linewidth=0.8, label="included again")
    ax.set(xlabel="hours", ylabel="MiB per window", title=f"exclusion drains shard {panel.shard}")
    ax.legend(fontsize=8)


def balancing_figure(
    path: str | Path,
    *,
    burst: tuple[SimulationReport, str, float, tuple[int, int] | None] | None = None,
    comparison: BalanceComparison | None = None,
    variance: Mapping[str, SimulationReport] | None = None,
    exclusion: ExclusionPanel | None = None,
    title: str | None = None,
) -> Path:
    """Return the path of a PNG with one panel per given part, side by side (at least one must be given).

    Args:
        burst: (report, tracked tenant, target bytes/s per shard, window range or None) for
            :func:`plot_burst_response`.
        comparison: for :func:`plot_shard_load`.
        variance: named replays for :func:`plot_variance`.
        exclusion: for :func:`plot_exclusion`.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: Sequence[Any] = [p for p in (burst, comparison, variance, exclusion) if p is not None]
    if not panels:
        raise ValueError("balancing_figure needs at least one panel")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    cols = min(2, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7.5 * cols, 4.2 * rows), squeeze=False)
    cells = iter(axes.flat)
    if burst is not None:
        plot_burst_response(next(cells), burst[0], burst[1], target_bytes_per_second=burst[2], windows=burst[3])
    if comparison is not None:
        plot_shard_load(next(cells), comparison)
    if variance is not None:
        plot_variance(next(cells), variance)
    if exclusion is not None:
        plot_exclusion(next(cells), exclusion)
    for ax in cells:
        ax.set_visible(False)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
