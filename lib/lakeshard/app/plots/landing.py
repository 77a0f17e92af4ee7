"""The landing-zone overview figure (tenant skew, per-minute traffic, quarantine reasons), drawn from a generated
landing zone's ground truth."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lakeshard.synth import Manifest, read_truth_events

__all__ = ["landing_overview_plot", "plot_landing_overview"]


def landing_overview_plot(
    landing: str, manifest: Manifest, quarantine_by_category: Mapping[str, int], path: str | Path
) -> Path:
    """Return the PNG path of the overview: tenant skew, per-minute traffic of burst and top tenants, quarantine.

    Args:
        landing: the generated landing zone (its ``_truth/`` is read).
        manifest: its manifest (:func:`lakeshard.synth.read_manifest`).
        quarantine_by_category: records per reason category (what was quarantined, or the generator's counts).
        path: where to write the PNG.
    """
    import pyarrow.compute as pc

    truth = read_truth_events(landing)
    tenants = sorted(manifest.events_by_tenant, key=lambda t: -manifest.events_by_tenant[t])
    watch = list(dict.fromkeys([b.tenant_id for b in manifest.bursts][:2] + tenants[:2]))
    start_ms = int(pc.min(truth.column("arrival_ms")).as_py())
    per_minute: dict[str, dict[int, int]] = {}
    for tenant in watch:
        arrivals = truth.filter(pc.equal(truth.column("tenant_id"), tenant)).column("arrival_ms").to_pylist()
        series: dict[int, int] = {}
        for ms in arrivals:
            minute = (ms - start_ms) // 60_000
            series[minute] = series.get(minute, 0) + 1
        per_minute[tenant] = series
    return plot_landing_overview(
        manifest.events_by_tenant, per_minute, quarantine_by_category, path,
        title=f"{manifest.unique_events:,} events from {len(manifest.events_by_tenant)} tenants",
    )


def plot_landing_overview(
    events_by_tenant: Mapping[str, int],
    events_per_minute: Mapping[str, Mapping[int, int]],
    quarantine_by_category: Mapping[str, int],
    path: str | Path,
    *,
    title: str = "landing zone",
) -> Path:
    """Return the path of a PNG with three panels: tenant skew, per-minute traffic, quarantine reasons.

    Args:
        events_by_tenant: unique events per tenant (plotted by rank, log-log: a Zipf law is a line).
        events_per_minute: for a few tenants, minute index → events (bursts show as spikes).
        quarantine_by_category: quarantined records per reason category.
        path: where to write the PNG (parent directories are created).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    counts = sorted((c for c in events_by_tenant.values() if c > 0), reverse=True)
    ax: Any = axes[0]
    ax.loglog(range(1, len(counts) + 1), counts, marker=".", linestyle="none")
    ax.set(title="events per tenant (by rank)", xlabel="tenant rank", ylabel="unique events")
    ax = axes[1]
    for tenant, series in events_per_minute.items():
        minutes = sorted(series)
        ax.plot(minutes, [series[m] for m in minutes], label=tenant, linewidth=1)
    ax.set(title="events per minute of arrival", xlabel="minute", ylabel="events")
    if events_per_minute:
        ax.legend(fontsize=8)
    ax = axes[2]
    cats = [c for c, n in sorted(quarantine_by_category.items(), key=lambda kv: -kv[1]) if n > 0]
    ax.barh(cats, [quarantine_by_category[c] for c in cats])
    ax.invert_yaxis()
    ax.set(title="quarantined records by reason", xlabel="records")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
