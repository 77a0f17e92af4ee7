"""Load management (Husky): the autosharder sizes each tenant's shard count from its bytes/s, the sharding
balancer moves tenants off hot shards by changing their salts, exclusions drain lagging shards, and a
Spark-free simulation replays a day of traffic through all three.

Planners are pure (plain data and numpy in, plans out); executors read ``routing_metrics`` and commit
plans to ``tenant_settings`` / ``shard_topology``, which shape only placements allocated from then on.

Example::

    from lakeshard.balancing import autoshard, balance

    autoshard(store, cfg, apply=True)          # shard counts from recent bytes/s
    run = balance(store, cfg, apply=True)      # at most cfg.balancing.max_moves salt moves
    print(run.plan.before.max_over_mean, "->", run.plan.after.max_over_mean)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakeshard._lazy import lazy_exports

if TYPE_CHECKING:
    from lakeshard.balancing.autosharder import (
        Autosharder,
        AutoshardError,
        AutoshardPlan,
        ShardCountChange,
        TenantRates,
        plan_shard_counts,
        shards_needed,
    )
    from lakeshard.balancing.balancer import (
        BalanceError,
        BalancePlan,
        Balancer,
        LoadStats,
        Ring,
        SaltMove,
        TenantLoad,
        load_stats,
    )
    from lakeshard.balancing.errors import (
        BalancingError,
    )
    from lakeshard.balancing.exclusions import (
        ExclusionError,
        plan_exclusion,
    )
    from lakeshard.balancing.executor import (
        AutoshardRun,
        BalanceRun,
        ExclusionRun,
        autoshard,
        balance,
        exclude_shards,
        read_tenant_rates,
        tenant_loads,
        trace_from_metrics,
    )
    from lakeshard.balancing.simulation import (
        BalanceComparison,
        SimulationReport,
        StrategyResult,
        Trace,
        TraceBurst,
        TraceSpec,
        compare_balancing,
        simulate,
        synthetic_trace,
    )

# Spark and Arrow load on first use of a name, not on `import lakeshard.balancing`.
__all__ = [
    "AutoshardError",
    "AutoshardPlan",
    "AutoshardRun",
    "Autosharder",
    "BalanceComparison",
    "BalanceError",
    "BalancePlan",
    "BalanceRun",
    "Balancer",
    "BalancingError",
    "ExclusionError",
    "ExclusionRun",
    "LoadStats",
    "Ring",
    "SaltMove",
    "ShardCountChange",
    "SimulationReport",
    "StrategyResult",
    "TenantLoad",
    "TenantRates",
    "Trace",
    "TraceBurst",
    "TraceSpec",
    "autoshard",
    "balance",
    "compare_balancing",
    "exclude_shards",
    "load_stats",
    "plan_exclusion",
    "plan_shard_counts",
    "read_tenant_rates",
    "shards_needed",
    "simulate",
    "synthetic_trace",
    "tenant_loads",
    "trace_from_metrics",
]

__getattr__, __dir__ = lazy_exports(globals())
