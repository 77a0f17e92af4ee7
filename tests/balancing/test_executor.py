"""The executors on real Delta tables: route a synthetic landing zone, autoshard and balance from
``routing_metrics``, and check the settings table, the next window's placements, and that every existing
placement is unchanged; then exclude a shard, watch new traffic drain from it, and include it again."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakeshard.balancing.executor import (
    autoshard,
    balance,
    exclude_shards,
    last_count_changes,
    read_tenant_rates,
    trace_from_metrics,
)
from lakeshard.config import LakeshardConfig
from lakeshard.lake import TableStore
from lakeshard.routing.allocator import ShardAllocator
from lakeshard.routing.placement import first_shard, placement_shards
from lakeshard.routing.router import Router
from lakeshard.routing.tables import PLACEMENTS, RoutingTables, TenantSetting
from lakeshard.synth import SynthSpec, generate_landing
from lakeshard.tables import ROUTED, ROUTING_METRICS
from lakeshard.tables.schemas import ROUTING_METRICS_SCHEMA

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WS = 300


def _copy(routed: Path, tmp_path: Path) -> Path:
    shutil.copytree(routed, tmp_path / "lh")
    return tmp_path / "lh"


def _placements(store: TableStore, cfg: LakeshardConfig) -> list[tuple[object, ...]]:
    df = store.read(cfg.table_uri(PLACEMENTS)).selectExpr(
        "tenant_id", "unix_micros(window_start) AS w", "shards", "salt", "unix_micros(created_at) AS c")
    return sorted(tuple(r) for r in df.collect())


def _newest_end(store: TableStore, cfg: LakeshardConfig) -> datetime:
    row = store.read(cfg.table_uri(ROUTING_METRICS)).agg(F.max(F.unix_micros("window_start"))).first()
    assert row is not None
    return datetime.fromtimestamp(row[0] / 1e6, tz=UTC) + timedelta(seconds=WS)


def test_autoshard_then_balance_change_only_future_placements(
    store: TableStore, routed: Path, tmp_path: Path, lakehouse_config: Callable[..., LakeshardConfig]
) -> None:
    lh = _copy(routed, tmp_path)
    probe = lakehouse_config(lh)
    now = _newest_end(store, probe) + timedelta(seconds=5)
    rates = read_tenant_rates(store, probe, now=now, windows=1)
    top = max(rates.rates, key=lambda t: rates.rates[t][-1])
    # A target that gives the busiest tenant three shards in the next window.
    target = rates.rates[top][-1] / 2.5
    cfg = lakehouse_config(lh, target_bytes_per_second=target, max_shards=4, variance_threshold=0.0, max_moves=3)
    before = _placements(store, cfg)

    run = autoshard(store, cfg, now=now, apply=True)
    assert run.version is not None and not run.plan.stale
    change = {c.tenant_id: c for c in run.plan.changes}[top]
    assert (change.old, change.new, change.reason) == (1, 3, "burst")
    tables = RoutingTables(store, cfg)
    assert tables.tenant_settings([top])[top] == TenantSetting(top, 3, 0)
    reasons = {r["reason"] for r in store.read(tables.settings_uri).collect()}
    assert reasons == {"autosharder: " + f"{run.plan.ups} up, {run.plan.downs} down"}
    assert last_count_changes(store, cfg, [top]).keys() == {top}
    assert _placements(store, cfg) == before  # committing settings touched no placement

    allocator = ShardAllocator(store, cfg)
    old_windows = sorted({datetime.fromtimestamp(w / 1e6, tz=UTC) for (t, w, *_rest) in before if t == top})
    # The live and past windows keep their one-shard placement.
    assert all(len(p.shards) == 1 for p in allocator.resolve([(top, w) for w in old_windows]).values())
    next_window = now - timedelta(seconds=5)
    assert len(allocator.get_placement(top, next_window).shards) == 3

    moved = balance(store, cfg, now=now, apply=True)
    assert moved.version is not None and 1 <= len(moved.plan.moves) <= 3
    assert moved.plan.after.variance < moved.plan.before.variance
    settings = tables.tenant_settings()
    later = next_window + timedelta(seconds=WS)
    placed = ShardAllocator(store, cfg).resolve([(m.tenant_id, later) for m in moved.plan.moves])
    counts = {s.tenant_id: s.shard_count for s in run.plan.settings}
    for m in moved.plan.moves:
        count = settings[m.tenant_id].shard_count
        assert settings[m.tenant_id].salt == m.new_salt
        assert count == counts.get(m.tenant_id, 1)  # the balancer kept the autosharder's count
        p = placed[(m.tenant_id, later)]
        assert p.salt == m.new_salt and p.shards == m.new_shards
        assert p.shards == placement_shards(first_shard(m.tenant_id, m.new_salt, 8), count, 8)
    # Everything placed before either commit is still exactly as it was.
    after = {(t, w): rest for (t, w, *rest) in _placements(store, cfg)}
    assert all(after[(t, w)] == rest for (t, w, *rest) in before)

    stale = autoshard(store, cfg, now=now + timedelta(days=1), apply=True)
    assert stale.plan.stale and stale.version is None


def test_an_excluded_shard_drains_from_the_next_window_and_comes_back(
    spark: SparkSession, store: TableStore, routed: Path, tmp_path: Path,
    lakehouse_config: Callable[..., LakeshardConfig], traffic_spec: Callable[[datetime, int], SynthSpec],
) -> None:
    lh = _copy(routed, tmp_path)
    cfg = lakehouse_config(lh)
    routed_uri = cfg.table_uri(ROUTED)
    by_shard = store.read(routed_uri).groupBy("shard").agg(F.sum("size_bytes").alias("b")).collect()
    hot = max(by_shard, key=lambda r: r["b"])["shard"]
    before = _placements(store, cfg)

    run = exclude_shards(store, cfg, exclude=[hot], reason="shard lags")
    assert run.after.excluded == (hot,) and run.version is not None
    assert exclude_shards(store, cfg, exclude=[hot]).version is None  # already excluded: no commit
    later = T0 + timedelta(minutes=20)
    generate_landing(tmp_path / "landing-b", traffic_spec(later, 6))
    Router(spark, store, cfg, max_batch_files=1000).run(str(tmp_path / "landing-b"))
    fresh = store.read(routed_uri).where(F.col("window_start") >= F.lit(later - timedelta(minutes=5)))
    assert fresh.count() > 0
    assert fresh.where(F.col("shard") == hot).count() == 0  # drained from the first new window on
    now_placed = {(t, w): rest for (t, w, *rest) in _placements(store, cfg)}
    assert all(now_placed[(t, w)] == rest for (t, w, *rest) in before)  # existing placements kept
    assert any(hot in shards for (_t, _w, shards, *_r) in before)  # old placements still name it

    back = exclude_shards(store, cfg, include=[hot])
    assert back.after.excluded == () and back.version is not None
    # Included again: placements of the next new window may use it once more (the router follows placements).
    again = T0 + timedelta(minutes=40)
    tenants = sorted({t for (t, *_r) in before})
    placed = ShardAllocator(store, cfg).resolve([(t, again) for t in tenants])
    assert any(hot in p.shards for p in placed.values())

    trace = trace_from_metrics(store, cfg)
    assert trace.windows >= 6 and len(trace.tenant_ids) == 10
    assert trace.bytes.sum() == store.read(cfg.table_uri(ROUTING_METRICS)).agg(F.sum("bytes")).first()[0]


def test_tenant_rates_read_only_recent_metrics_files_and_match_a_whole_read(
    spark: SparkSession, store: TableStore, tmp_path: Path, lakehouse_config: Callable[..., LakeshardConfig]
) -> None:
    cfg = lakehouse_config(tmp_path / "lh")
    uri, ws = cfg.table_uri(ROUTING_METRICS), cfg.routing.window_seconds
    store.create(uri, ROUTING_METRICS_SCHEMA)
    # A file per routed batch: a long history, a gap, two recent windows, and one window after `now`.
    steps = [*range(0, 40, 2), 200, 203, 260]
    for i, step in enumerate(steps):
        start = T0 + timedelta(seconds=ws * step)
        rows = [(start, f"t{k}", k % 4, 10, 1000 * (k + 1) + step, i, start) for k in range(3 + step % 2)]
        store.append(uri, spark.createDataFrame(rows, ROUTING_METRICS_SCHEMA).coalesce(1))
    now = T0 + timedelta(seconds=ws * 250)
    for windows in (1, 3, 8):
        rates = read_tenant_rates(store, cfg, now=now, windows=windows)
        wanted = sorted(s for s in steps if s <= 250)[-windows:]
        assert rates.windows == tuple(T0 + timedelta(seconds=ws * s) for s in wanted)
        for k in range(4):
            expected = tuple((1000 * (k + 1) + s) / ws if k < 3 + s % 2 else 0.0 for s in wanted)
            assert rates.rates.get(f"t{k}", (0.0,) * windows) == pytest.approx(expected)
