"""The shard-load figure: bytes per shard and where the top tenants were placed over time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lakeshard.report import ShardLoad

__all__ = ["shard_load_plot"]


def shard_load_plot(load: ShardLoad, path: str | Path) -> Path:
    """Return the PNG path of two panels: bytes per shard, and the top tenants' shards window by window."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.5))
    ax: Any = axes[0]
    shards = list(range(load.total_shards))
    ax.bar(shards, [load.bytes_by_shard.get(s, 0) / 1e6 for s in shards])
    mean = sum(load.bytes_by_shard.values()) / max(1, load.total_shards) / 1e6
    ax.axhline(mean, color="black", linestyle="--", linewidth=1, label=f"mean ({mean:.1f} MB)")
    ax.set(title=f"bytes per shard (max/mean {load.max_over_mean:.2f})", xlabel="shard", ylabel="MB")
    ax.legend()
    ax = axes[1]
    for i, (tenant, placements) in enumerate(load.top_tenant_placements.items()):
        xs = [w for w, shards_ in placements for _ in shards_]
        ys = [s + (i - len(load.top_tenant_placements) / 2) * 0.12 for _, shards_ in placements for s in shards_]
        ax.scatter(xs, ys, s=8, label=tenant)
    ax.set(title="placements of the top tenants (one dot per window and shard)", xlabel="window start (UTC)",
           ylabel="shard")
    ax.legend(fontsize=8)
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
