"""Figures of bucket completeness: when each ``(tenant, hour)`` bucket was open and when it closed."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from lakeshard.buckets import BucketState, hour_end

__all__ = ["plot_bucket_timeline"]


def plot_bucket_timeline(states: Sequence[BucketState], path: str | Path, *, until: datetime) -> Path:
    """Return the PNG written to ``path``: one row per bucket, open from its hour's start, closed from then on.

    An open bar that reaches ``until`` is a bucket still open at the end of the observation.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(states, key=lambda s: (s.hour, s.tenant_id))
    fig, ax = plt.subplots(figsize=(10, max(2.5, 0.32 * len(rows) + 1.2)))
    for y, s in enumerate(rows):
        start = hour_end(s.hour) - timedelta(hours=1)
        closed_at = s.decided_at if s.state == "closed" else until
        _bar(ax, y, start, closed_at, "#f2b134", "open")
        if s.state == "closed":
            _bar(ax, y, closed_at, until, "#3a8f5c", "closed")
    ax.set_yticks(range(len(rows)), [f"{s.tenant_id} / {s.hour[-5:]}h" for s in rows], fontsize=8)
    ax.invert_yaxis()
    ax.xaxis.set_major_formatter(_dates().DateFormatter("%H:%M"))
    ax.set_xlabel("time (UTC)")
    ax.set_title("Buckets: open from their hour's start (amber) until the completionist closes them (green)")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), loc="lower right")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _dates() -> Any:
    # matplotlib.dates is untyped: keep it behind Any so strict mypy stays clean.
    import matplotlib.dates

    return matplotlib.dates


def _bar(ax: Any, y: int, start: datetime, end: datetime, color: str, label: str) -> None:
    num = _dates().date2num
    if end > start:
        ax.barh(y, num(end) - num(start), left=num(start), color=color, label=label, height=0.7)
