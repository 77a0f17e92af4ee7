"""The autosharder's pure planner: up within one window, down only after sustained low traffic, bounds,
missing and stale metrics, and never a change to a live placement."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeshard.balancing.autosharder import (
    Autosharder,
    TenantRates,
    plan_shard_counts,
)
from lakeshard.config import BalancingConfig
from lakeshard.errors import ConfigError
from lakeshard.routing.allocator import plan_placements
from lakeshard.routing.hashing import HASH_XXHASH64
from lakeshard.routing.placement import Placement
from lakeshard.routing.tables import ShardTopology, TenantSetting

CFG = BalancingConfig(target_bytes_per_second=1000.0, min_shards=1, max_shards=16, scale_down_below=0.5,
                      scale_down_windows=3, cooldown_seconds=900, metrics_max_age_seconds=600)
WS = 300
T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)


def _rates(values: dict[str, list[float]]) -> TenantRates:
    width = len(next(iter(values.values())))
    windows = tuple(T0 + timedelta(seconds=WS * i) for i in range(width))
    return TenantRates(windows, WS, {t: tuple(v) for t, v in values.items()})


def _now(rates: TenantRates, lag: float = 10.0) -> datetime:
    end = rates.newest_end
    assert end is not None
    return end + timedelta(seconds=lag)


def test_a_burst_gets_its_shards_from_the_next_window() -> None:
    rates = _rates({"acme": [800, 900, 950, 42_000]})
    plan = Autosharder(CFG).plan(rates, {"acme": TenantSetting("acme", 1, 3)}, {}, now=_now(rates))
    [change] = plan.changes
    assert (change.old, change.new, change.reason) == (1, 16, "burst")  # 42x needs 42 shards; bounded by 16
    assert plan.settings == (TenantSetting("acme", 16, 3),)  # the salt is kept


def test_scales_down_only_after_sustained_low_traffic_and_the_cooldown() -> None:
    auto = Autosharder(CFG)
    settings = {"acme": TenantSetting("acme", 8)}
    # Capacity 8 x 1000 B/s; below half of it (4000) for 3 windows in a row, cooldown passed: down to need(peak).
    low = _rates({"acme": [9000, 3000, 2500, 1200]})
    [change] = auto.plan(low, settings, {}, now=_now(low)).changes
    assert (change.old, change.new, change.reason, change.peak) == (8, 3, "sustained low traffic", 3000)
    # One window at 4500 (above half the capacity) among the last three: no change — the hysteresis band.
    blip = _rates({"acme": [3000, 4500, 2500, 1200]})
    assert auto.plan(blip, settings, {}, now=_now(blip)).changes == ()
    # Count changed 10 minutes ago: the cooldown (15 min) holds the count.
    recent = {"acme": _now(low) - timedelta(minutes=10)}
    assert auto.plan(low, settings, recent, now=_now(low)).changes == ()
    # Too few windows to know the traffic stayed low: no change.
    short = _rates({"acme": [100, 100]})
    assert auto.plan(short, settings, {}, now=_now(short)).changes == ()


def test_missing_or_stale_metrics_change_nothing() -> None:
    auto = Autosharder(CFG)
    settings = {"acme": TenantSetting("acme", 8), "zeta": TenantSetting("zeta", 4)}
    rates = _rates({"acme": [10.0, 10.0, 10.0]})  # zeta has no metrics at all
    plan = auto.plan(rates, settings, {}, now=_now(rates))
    assert [c.tenant_id for c in plan.changes] == ["acme"] and not plan.stale
    stale = auto.plan(rates, settings, {}, now=_now(rates, lag=CFG.metrics_max_age_seconds + 1))
    assert stale.stale and stale.changes == () and stale.settings == ()
    empty = auto.plan(TenantRates((), WS, {}), settings, {}, now=T0)
    assert empty.stale and empty.changes == ()
    # A window without a value (NaN) is no evidence of low traffic.
    counts = plan_shard_counts(np.array([[100.0, math.nan, 100.0]]), np.array([8]), np.array([math.inf]), CFG)
    assert counts.tolist() == [8]


def test_counts_set_outside_the_bounds_come_back_inside() -> None:
    rates = _rates({"big": [100.0] * 3, "small": [100.0] * 3})
    settings = {"big": TenantSetting("big", 40), "small": TenantSetting("small", 1)}
    cfg = dataclasses.replace(CFG, min_shards=2)
    plan = Autosharder(cfg).plan(rates, settings, {}, now=_now(rates))
    assert {(c.tenant_id, c.new, c.reason) for c in plan.changes} == {("big", 2, "sustained low traffic"),
                                                                     ("small", 2, "bounds")}


def test_bad_configuration_is_one_clear_error() -> None:
    # Refused when the settings are built, before any autosharder sees them.
    with pytest.raises(ConfigError, match=r"balancing.min_shards = 2 is above balancing.max_shards = 1"):
        Autosharder(dataclasses.replace(CFG, min_shards=2, max_shards=1))


configs = st.builds(
    BalancingConfig,
    target_bytes_per_second=st.floats(1.0, 1e6),
    min_shards=st.integers(1, 4),
    max_shards=st.integers(4, 64),
    scale_down_below=st.floats(0.05, 0.95),
    scale_down_windows=st.integers(1, 6),
    cooldown_seconds=st.integers(0, 3600),
)


@settings(max_examples=200)
@given(configs, st.data())
def test_counts_stay_within_bounds_and_follow_the_rules(cfg: BalancingConfig, data: st.DataObject) -> None:
    tenants = data.draw(st.integers(1, 12))
    width = data.draw(st.integers(1, 8))
    rate = st.one_of(st.just(math.nan), st.floats(0.0, 1e8))
    rates = np.array(data.draw(st.lists(st.lists(rate, min_size=width, max_size=width),
                                        min_size=tenants, max_size=tenants)))
    current = np.array(data.draw(st.lists(st.integers(1, 100), min_size=tenants, max_size=tenants)))
    age = np.array(data.draw(st.lists(st.floats(0.0, 1e5), min_size=tenants, max_size=tenants)))
    new = plan_shard_counts(rates, current, age, cfg)
    for i in range(tenants):
        if math.isnan(rates[i, -1]):
            assert new[i] == current[i]  # no metrics: unchanged, whatever the bounds say
            continue
        assert cfg.min_shards <= new[i] <= cfg.max_shards
        if current[i] < new[i] and cfg.min_shards <= current[i]:
            # Up only as far as the newest rate needs.
            need = math.ceil(rates[i, -1] / cfg.target_bytes_per_second)
            assert new[i] == max(cfg.min_shards, min(cfg.max_shards, need))
        if new[i] < current[i] <= cfg.max_shards:
            recent = rates[i, -cfg.scale_down_windows:]
            assert width >= cfg.scale_down_windows and age[i] >= cfg.cooldown_seconds
            assert not np.isnan(recent).any()
            assert recent.max() < cfg.scale_down_below * current[i] * cfg.target_bytes_per_second


@settings(max_examples=100)
@given(st.lists(st.lists(st.floats(0.0, 50_000.0), min_size=3, max_size=3), min_size=1, max_size=12))
def test_new_counts_shape_only_windows_that_start_later(steps: list[list[float]]) -> None:
    # The allocator makes a window's placement once, when the window is first needed, and only reads it
    # afterwards; the autosharder only writes settings. Composed window by window: every placement keeps
    # the count in force when its window began, though the autosharder changes counts during that window.
    # (tests/balancing/test_executor.py checks the same on real Delta tables with the ShardAllocator.)
    tenants = ["acme", "beta", "zeta"]
    topology = ShardTopology(16, (4,))
    auto = Autosharder(CFG)
    settings: dict[str, TenantSetting] = {}
    book: dict[tuple[str, datetime], Placement] = {}
    in_force: dict[tuple[str, datetime], int] = {}
    history: list[list[float]] = []
    for w, step in enumerate(steps):
        start = T0 + timedelta(seconds=WS * w)
        before = dict(book)
        missing = [(t, start) for t in tenants if (t, start) not in book]
        for p in plan_placements(missing, settings, topology, default_shard_count=1, window_seconds=WS, now=start,
                                   hash_version=HASH_XXHASH64):
            book[(p.tenant_id, p.window_start)] = p
            setting = settings.get(p.tenant_id, TenantSetting(p.tenant_id, 1))
            in_force[(p.tenant_id, p.window_start)] = setting.shard_count
        assert {k: book[k] for k in before} == before  # placing a new window touched no earlier placement
        history.append(step)
        rates = TenantRates(tuple(T0 + timedelta(seconds=WS * i) for i in range(len(history))), WS,
                            {t: tuple(h[j] for h in history) for j, t in enumerate(tenants)})
        plan = auto.plan(rates, settings, {}, now=start + timedelta(seconds=WS))
        assert all(CFG.min_shards <= s.shard_count <= CFG.max_shards for s in plan.settings)
        settings.update({s.tenant_id: s for s in plan.settings})
    for key, p in book.items():
        assert len(p.shards) == min(in_force[key], 15)
