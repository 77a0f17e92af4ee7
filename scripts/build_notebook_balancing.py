"""Writes notebooks/03_balance_shards.ipynb from its cells here (run: .venv/bin/python scripts/build_notebook_balancing.py)."""

from pathlib import Path

import nbformat as nbf

OUT = Path(__file__).resolve().parent.parent / "notebooks" / "03_balance_shards.ipynb"

nb = nbf.v4.new_notebook()
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nb.cells = [
    nbf.v4.new_markdown_cell("""# 03 — Balance shards: autosharder, balancer, exclusions

Replays traffic window by window through shard placements, the **autosharder** (each tenant's shard count
from its bytes/s: up within one window of a burst, down only after sustained calm) and the **balancer**
(salt moves off the hottest shard, at most `max_moves` a run), without Spark. Then shows:

1. a tenant's shard count following a 10–100× burst up and back down;
2. per-shard load before and after one balancer run, against re-hashing every tenant;
3. the variance of per-shard load over time, with and without the balancer;
4. a shard draining within one window of being excluded, and refilling when included again.

The same planners run on a lakehouse with `lakeshard autoshard`, `lakeshard balance` and `lakeshard exclude`.

**Parameters** (next cell; widgets on Databricks):

| name | meaning |
| --- | --- |
| `tenants` | tenants in the synthetic trace (Zipf-skewed volumes) |
| `total_shards` | shards on the ring |
| `hours` | length of the trace, in 5-minute windows |
| `max_moves` | the balancer's cap on tenants moved per run |
| `seed` | random seed of the trace |
| `lakehouse` | if set, replay this lakehouse's `routing_metrics` instead of a synthetic trace (needs Spark) |
| `out` | directory for the figure |
"""),
    nbf.v4.new_code_cell("""# Parameters (Databricks widgets when run there)
import tempfile

from lakeshard.runtime.params import notebook_params

p = notebook_params({"tenants": 2_000, "total_shards": 64, "hours": 8, "max_moves": 50, "seed": 7,
                     "lakehouse": "", "out": tempfile.mkdtemp(prefix="lakeshard-balance-")})"""),
    nbf.v4.new_code_cell("""from lakeshard.balancing import TraceSpec, synthetic_trace
from lakeshard.config import BalancingConfig, load_config

mib = 2**20
# Each shard's fair share is 4 MiB/s; a tenant gets one shard per MiB/s (a quarter of a shard), so no tenant
# fills a shard alone and the balancer has pieces to pack.
cfg = BalancingConfig(target_bytes_per_second=1 * mib, max_shards=p["total_shards"] // 2, max_moves=p["max_moves"])
if p["lakehouse"]:
    from lakeshard.balancing import trace_from_metrics
    from lakeshard.lake import open_store
    from lakeshard.runtime import get_spark

    lake_cfg = load_config(overrides={"lakehouse": p["lakehouse"]})
    trace = trace_from_metrics(open_store(get_spark(lake_cfg), lake_cfg), lake_cfg)
else:
    trace = synthetic_trace(TraceSpec(tenants=p["tenants"], windows=int(p["hours"] * 12), seed=p["seed"],
                                      total_bytes_per_second=p["total_shards"] * 4 * mib, burst_tenants=4,
                                      burst_ranks=(10, 200)))
print(f"{len(trace.tenant_ids):,} tenants, {trace.windows} windows, bursts: "
      + ", ".join(f"{b.tenant_id} x{b.factor} in windows {b.first}-{b.last}" for b in trace.bursts))"""),
    nbf.v4.new_code_cell("""from lakeshard.balancing import simulate
from lakeshard.report import format_table

burst = trace.biggest_burst(not_before=1) if trace.bursts else None
track = [burst.tenant_id] if burst else []
with_balancer = simulate(trace, total_shards=p["total_shards"], cfg=cfg, track=track)
without = simulate(trace, total_shards=p["total_shards"], cfg=cfg, balancer=False)
keys = ["relative_variance_median", "max_over_mean_median", "max_over_mean_p95", "moves_total",
        "count_changes_total", "windows_per_second"]
print(format_table(["replay", *keys], [[name, *[r.summary()[k] for k in keys]]
                                       for name, r in [("with balancer", with_balancer), ("without", without)]]))"""),
    nbf.v4.new_code_cell("""from lakeshard.balancing import compare_balancing

comparison = compare_balancing(trace.tenant_ids, trace.base_rates, total_shards=p["total_shards"], cfg=cfg)
print(format_table(["strategy", "tenants moved", "variance/mean^2", "max/mean", "variance removed"],
                   [[r.name, r.moves, round(r.stats.relative_variance, 4), round(r.stats.max_over_mean, 3),
                     f"{r.variance_removed:.0%}"] for r in comparison.results]))"""),
    nbf.v4.new_code_cell("""from pathlib import Path

from IPython.display import Image

from lakeshard.balancing.plots import ExclusionPanel, balancing_figure

middle = trace.windows // 2
hot = int(without.shard_bytes[middle - 1].argmax())
drained = simulate(trace, total_shards=p["total_shards"], cfg=cfg,
                   exclusions={middle: (hot,), middle + trace.windows // 4: ()})
png = balancing_figure(
    Path(p["out"]) / "balancing.png",
    burst=(with_balancer, burst.tenant_id, cfg.target_bytes_per_second, (burst.first - 6, burst.last + 18))
    if burst else None,
    comparison=comparison,
    variance={"with balancer": with_balancer, "without balancer": without},
    exclusion=ExclusionPanel(drained, hot, middle, middle + trace.windows // 4),
)
assert drained.shard_bytes[middle:middle + trace.windows // 4, hot].sum() == 0  # drained within one window
Image(filename=str(png))"""),
]
nbf.write(nb, OUT)
print(f"wrote {OUT}")
