"""The landing-zone overview figure, drawn from a generated landing zone's ground truth."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from lakeshard.report.plots import plot_landing_overview
from lakeshard.synth import Manifest, read_truth_events

__all__ = ["landing_overview_plot"]


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
