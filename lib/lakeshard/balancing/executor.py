"""Executors: read the router's metrics and the routing state from the lakehouse, run the pure planners,
and commit their plans to ``tenant_settings`` / ``shard_topology`` through :class:`RoutingTables`.

Nothing here changes a placement: settings and topology only shape placements allocated from now on, so
a tenant's live window keeps its shards and every re-sent event still lands where its first copy did.

Two executors writing settings at once (say an autoshard job and a balance job) could each overwrite
the other's field with the value it read; to keep that window small, each re-reads the settings of the
tenants it changes right before committing and changes only its own field (count or salt). A lost
update costs one balancing step, never correctness: placements stay immutable and consistent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import numpy as np

from lakeshard.balancing.autosharder import Autosharder, AutoshardPlan, TenantRates
from lakeshard.balancing.balancer import BalancePlan, Balancer, TenantLoad
from lakeshard.balancing.exclusions import plan_exclusion
from lakeshard.balancing.simulation import Trace
from lakeshard.config import LakeshardConfig
from lakeshard.lake import TableStore, naming_damaged_files
from lakeshard.routing import RoutingTables, ShardTopology, TenantSetting
from lakeshard.tables import ROUTING_METRICS
from lakeshard.utc import as_utc, from_micros, micros

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "AutoshardRun",
    "BalanceRun",
    "ExclusionRun",
    "autoshard",
    "balance",
    "exclude_shards",
    "last_count_changes",
    "read_tenant_rates",
    "tenant_loads",
    "trace_from_metrics",
]

# A window still in progress is measured over the time it has run, but at least this long, so one
# early batch cannot look like a huge rate.
_MIN_ELAPSED_SECONDS = 60


@dataclass(frozen=True)
class AutoshardRun:
    """An autosharder plan and, when applied, the ``tenant_settings`` version that committed it."""

    plan: AutoshardPlan
    version: int | None


@dataclass(frozen=True)
class BalanceRun:
    """A balancer plan and, when applied, the ``tenant_settings`` version that committed it."""

    plan: BalancePlan
    version: int | None


@dataclass(frozen=True)
class ExclusionRun:
    """The shard topology before and after an exclusion change, and the commit version (None: no change)."""

    before: ShardTopology
    after: ShardTopology
    version: int | None


def read_tenant_rates(store: TableStore, cfg: LakeshardConfig, *, now: datetime, windows: int) -> TenantRates:
    """Return each tenant's bytes/s in the newest ``windows`` placement windows of ``routing_metrics`` up to ``now``.

    Windows are the ones the metrics cover (a tenant missing from a covered window sent nothing in it);
    a window still running at ``now`` is measured over its elapsed time.
    """
    from pyspark.sql import functions as F

    ws = cfg.routing.window_seconds
    uri = cfg.table_uri(ROUTING_METRICS)
    if windows < 1 or not store.exists(uri):
        return TenantRates((), ws, {})
    start_us = F.unix_micros("window_start")
    with naming_damaged_files(uri, store.files(uri)):  # a damaged metrics file: one line naming it, no Java trace
        metrics, starts = _newest_windows(store, uri, now=now, windows=windows, window_seconds=ws)
        if not starts:
            return TenantRates((), ws, {})
        rows = (metrics.where(start_us.isin(starts)).groupBy("tenant_id", start_us.alias("w"))
                .agg(F.sum("bytes").alias("b")).collect())
    now_us = micros(now)
    seconds = [min(ws, max(_MIN_ELAPSED_SECONDS, (now_us - s) / 1e6)) for s in starts]
    index = {s: i for i, s in enumerate(starts)}
    table: dict[str, list[float]] = {}
    for r in rows:
        i = index[int(r["w"])]
        table.setdefault(r["tenant_id"], [0.0] * len(starts))[i] = float(r["b"] or 0) / seconds[i]
    return TenantRates(tuple(from_micros(s) for s in starts), ws, {t: tuple(v) for t, v in table.items()})


def _newest_windows(store: TableStore, uri: str, *, now: datetime, windows: int, window_seconds: int
                    ) -> tuple[DataFrame, list[int]]:
    """Return the ``routing_metrics`` rows up to ``now`` of the files that can hold its newest ``windows`` window
    starts, and those starts (epoch microseconds, oldest first).

    The table gains a file per routed batch for as long as the lakehouse lives: the files are chosen by their
    ``window_start`` statistics, looking back twice as far each time the recent ones hold too few windows.
    """
    from pyspark.sql import functions as F

    start_us = F.unix_micros("window_start")
    files = store.files(uri)
    # Files whose windows all start after `now` hold nothing wanted; those without statistics are always read.
    ranges = [(f, r) for f in files if (r := f.time_range("window_start")) is None or r[0] <= now]
    reach = windows + 2
    while True:
        floor = now - timedelta(seconds=window_seconds * reach)
        chosen = [f for f, r in ranges if r is None or r[1] >= floor]
        every = len(chosen) == len(ranges)
        metrics = (store.read_files(uri, chosen) if chosen else store.read(uri).limit(0)).where(start_us <= micros(now))
        starts = sorted(int(r["w"]) for r in metrics.select(start_us.alias("w")).distinct()
                        .orderBy(F.desc("w")).limit(windows).collect())
        # Exact once the files read hold `windows` starts at or after the floor: any other file ends before it.
        if every or (len(starts) == windows and starts[0] >= micros(floor)):
            return metrics, starts
        reach *= 2


def last_count_changes(store: TableStore, cfg: LakeshardConfig, tenants: Iterable[str]) -> dict[str, datetime]:
    """Return when each tenant's shard count last changed in ``tenant_settings`` (tenants never changed are absent).

    A salt change (the balancer's) is not a count change, so it does not restart the autosharder's cooldown.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    wanted = sorted(set(tenants))
    if not wanted:
        return {}
    tables = RoutingTables(store, cfg)
    tables.ensure()
    # One row per change, read in this process: a Spark job's fixed cost dwarfs these rows.
    rows = store.read_table_arrow(tables.settings_uri, ["tenant_id", "shard_count", "updated_at"])
    rows = rows.filter(pc.is_in(rows.column("tenant_id"), pa.array(wanted, rows.schema.field("tenant_id").type)))
    ordered = rows.sort_by([("tenant_id", "ascending"), ("updated_at", "ascending")])
    out: dict[str, datetime] = {}
    tenant, previous = None, cfg.routing.default_shard_count
    for t, count, at in zip(*(ordered.column(c).to_pylist() for c in ("tenant_id", "shard_count", "updated_at")),
                            strict=True):
        if t != tenant:
            tenant, previous = t, cfg.routing.default_shard_count
        if count != previous:
            out[t] = as_utc(at)
        previous = count
    return out


def autoshard(
    store: TableStore, cfg: LakeshardConfig, *, now: datetime | None = None, apply: bool = False
) -> AutoshardRun:
    """Return the autosharder's plan from the lakehouse's metrics, committed to ``tenant_settings`` if ``apply``.

    Args:
        now: the clock (default: the current time); pass a past time to plan against historical metrics.
        apply: commit the new shard counts (effective at each tenant's next placement window).

    Example::

        run = autoshard(store, cfg, apply=True)
        print(run.plan.ups, "up,", run.plan.downs, "down; committed as version", run.version)
    """
    now = now or datetime.now(UTC)
    rates = read_tenant_rates(store, cfg, now=now, windows=cfg.balancing.scale_down_windows)
    tables = RoutingTables(store, cfg)
    tenants = list(rates.rates)
    plan = Autosharder(cfg.balancing, default_shard_count=cfg.routing.default_shard_count).plan(
        rates, tables.tenant_settings(tenants), last_count_changes(store, cfg, tenants), now=now)
    if not apply or not plan.settings:
        return AutoshardRun(plan, None)
    fresh = tables.tenant_settings([s.tenant_id for s in plan.settings])
    merged = [TenantSetting(s.tenant_id, s.shard_count, fresh[s.tenant_id].salt if s.tenant_id in fresh else s.salt)
              for s in plan.settings]
    version = tables.set_tenant_settings(merged, reason=f"autosharder: {plan.ups} up, {plan.downs} down")
    return AutoshardRun(plan, version)


def tenant_loads(store: TableStore, cfg: LakeshardConfig, *, now: datetime) -> list[TenantLoad]:
    """Return every tenant with recent metrics: its mean bytes per window and its current count and salt."""
    rates = read_tenant_rates(store, cfg, now=now, windows=max(1, cfg.balancing.lookback_windows))
    settings = RoutingTables(store, cfg).tenant_settings(list(rates.rates))
    out = []
    for tenant, values in sorted(rates.rates.items()):
        s = settings.get(tenant) or TenantSetting(tenant, cfg.routing.default_shard_count, 0)
        out.append(TenantLoad(tenant, float(np.mean(values)) * rates.window_seconds, s.shard_count, s.salt))
    return out


def balance(
    store: TableStore,
    cfg: LakeshardConfig,
    *,
    now: datetime | None = None,
    apply: bool = False,
) -> BalanceRun:
    """Return the balancer's plan over the lakehouse's recent metrics, committed to ``tenant_settings`` if ``apply``.

    The shard topology (total and excluded shards) is the current one: new salts take effect at each
    moved tenant's next placement window, which will be made on that topology.

    Example::

        run = balance(store, cfg, apply=True)
        print(f"{len(run.plan.moves)} moves, max/mean {run.plan.before.max_over_mean:.2f} -> "
              f"{run.plan.after.max_over_mean:.2f}")
    """
    now = now or datetime.now(UTC)
    tables = RoutingTables(store, cfg)
    plan = Balancer(cfg.balancing).plan(tenant_loads(store, cfg, now=now), tables.topology())
    if not apply or not plan.settings:
        return BalanceRun(plan, None)
    fresh = tables.tenant_settings([s.tenant_id for s in plan.settings])
    merged = [TenantSetting(s.tenant_id, fresh[s.tenant_id].shard_count if s.tenant_id in fresh else s.shard_count,
                            s.salt) for s in plan.settings]
    reason = (f"balancer: {len(plan.moves)} moves, variance/mean^2 {plan.before.relative_variance:.4f} -> "
              f"{plan.after.relative_variance:.4f}")
    return BalanceRun(plan, tables.set_tenant_settings(merged, reason=reason))


def exclude_shards(
    store: TableStore,
    cfg: LakeshardConfig,
    *,
    exclude: Sequence[int] = (),
    include: Sequence[int] = (),
    reason: str | None = None,
) -> ExclusionRun:
    """Return the topology change that excludes ``exclude`` and re-includes ``include``, committed at once.

    New placements skip excluded shards from their next window on; nothing is committed when the
    topology would not change.

    Raises:
        ExclusionError: a shard is out of range, named twice, or every shard would be excluded.
    """
    tables = RoutingTables(store, cfg)
    before = tables.topology()
    after = plan_exclusion(before, exclude=exclude, include=include)
    if after == before:
        return ExclusionRun(before, after, None)
    why = reason or f"operator: exclude {sorted(set(exclude))}, include {sorted(set(include))}"
    return ExclusionRun(before, after, tables.set_topology(after, reason=why))


def trace_from_metrics(store: TableStore, cfg: LakeshardConfig) -> Trace:
    """Return the ``routing_metrics`` table as a trace for :func:`~lakeshard.balancing.simulation.simulate`.

    Windows run from the first to the last window in the metrics, every window included (a window without
    metrics is all zeros); tenants are sorted by id.
    """
    from pyspark.sql import functions as F

    ws = cfg.routing.window_seconds
    uri = cfg.table_uri(ROUTING_METRICS)
    rows = []
    if store.exists(uri):
        with naming_damaged_files(uri, store.files(uri)):
            rows = (store.read(uri).groupBy("tenant_id", F.unix_micros("window_start").alias("w"))
                    .agg(F.sum("bytes").alias("b")).collect())
    if not rows:
        return Trace((), datetime(1970, 1, 1, tzinfo=UTC), ws, np.zeros((0, 0)), np.zeros(0))
    tenants = sorted({r["tenant_id"] for r in rows})
    column = {t: i for i, t in enumerate(tenants)}
    first = min(int(r["w"]) for r in rows)
    step = ws * 1_000_000
    windows = (max(int(r["w"]) for r in rows) - first) // step + 1
    matrix = np.zeros((windows, len(tenants)))
    for r in rows:
        matrix[(int(r["w"]) - first) // step, column[r["tenant_id"]]] += float(r["b"] or 0)
    start = from_micros(first)
    return Trace(tuple(tenants), start, ws, matrix, matrix.mean(axis=0) / ws)
