"""The Spark-free replay: a day for 10,000 tenants on 256 shards in seconds, the autosharder following a
burst up and back down, the balancer lowering variance over time, and an exclusion draining a shard."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from lakeshard.balancing.balancer import BalanceError
from lakeshard.balancing.exclusions import ExclusionError, plan_exclusion
from lakeshard.balancing.simulation import TraceSpec, simulate, synthetic_trace
from lakeshard.config import BalancingConfig
from lakeshard.routing.tables import ShardTopology

SMALL = TraceSpec(tenants=1_500, windows=96, total_bytes_per_second=64 * 4 * 2**20, burst_tenants=3,
                  burst_ranks=(30, 300), seed=3)
CFG = BalancingConfig(target_bytes_per_second=2**20, max_shards=32, scale_down_windows=6, cooldown_seconds=1800)


def test_a_day_of_10000_tenants_on_256_shards_replays_in_seconds() -> None:
    trace = synthetic_trace(TraceSpec())  # 288 five-minute windows
    cfg = BalancingConfig(target_bytes_per_second=2**30 / 256 / 4, max_shards=128)
    report = simulate(trace, total_shards=256, cfg=cfg)
    assert report.windows == 288 and report.shard_bytes.shape == (288, 256)
    assert report.seconds < 30  # typically 1-3 s; generous for a loaded CI machine
    assert np.allclose(report.shard_bytes.sum(axis=1), trace.bytes.sum(axis=1))  # every byte lands on a shard
    s = report.summary()
    assert s["moves_max_per_run"] <= cfg.max_moves
    assert s["max_over_mean_median"] < 1.35
    assert 1 <= s["max_shards_per_tenant"] <= 128


def test_the_shard_count_follows_a_burst_up_within_a_window_and_down_after_sustained_calm() -> None:
    trace = synthetic_trace(SMALL)
    burst = next(b for b in trace.bursts if b.first > 0)
    report = simulate(trace, total_shards=64, cfg=CFG, track=[burst.tenant_id])
    counts = report.tracked_counts[burst.tenant_id]
    usual = counts[burst.first]  # the burst's first window still has the placement made before it
    assert counts[burst.first + 1] > usual  # up by the next window
    peak_rate = report.tracked_rates[burst.tenant_id][burst.first:burst.last + 1].max()
    assert counts[burst.first + 1:burst.last + 2].max() >= min(CFG.max_shards, np.ceil(peak_rate / 2**20) * 0.9)
    # Down slowly: not before scale_down_windows calm windows after the burst, but back down by the end.
    calm = burst.last + CFG.scale_down_windows
    assert counts[burst.last + 1:calm].min() > usual
    assert counts[-1] <= usual + 1
    assert counts.max() <= CFG.max_shards


def test_the_balancer_keeps_variance_lower_than_hashing_alone() -> None:
    trace = synthetic_trace(SMALL)
    on = simulate(trace, total_shards=64, cfg=CFG)
    off = simulate(trace, total_shards=64, cfg=CFG, balancer=False)
    assert off.moves.sum() == 0 and on.moves.max() <= CFG.max_moves
    assert np.median(on.relative_variance[6:]) < 0.5 * np.median(off.relative_variance[6:])
    assert np.median(on.max_over_mean[6:]) < np.median(off.max_over_mean[6:])
    assert np.array_equal(on.count_changes, off.count_changes)  # the autosharder does not care about salts


def test_an_excluded_shard_drains_within_one_window_and_refills_when_included() -> None:
    trace = synthetic_trace(dataclasses.replace(SMALL, windows=30))
    hot = int(simulate(trace, total_shards=64, cfg=CFG).shard_bytes[9].argmax())
    report = simulate(trace, total_shards=64, cfg=CFG, exclusions={10: (hot,), 20: ()})
    load = report.shard_bytes[:, hot]
    assert load[9] > 0 and (load[10:20] == 0).all() and load[20] > 0
    # Its traffic went to the other shards: nothing is lost.
    assert np.allclose(report.shard_bytes.sum(axis=1), trace.bytes.sum(axis=1))


def test_plan_exclusion_validates_and_is_idempotent() -> None:
    topology = ShardTopology(8, (3,))
    assert plan_exclusion(topology, exclude=[5]) == ShardTopology(8, (3, 5))
    assert plan_exclusion(topology, include=[3]) == ShardTopology(8, ())
    assert plan_exclusion(topology, exclude=[3]) == topology
    with pytest.raises(ExclusionError, match=r"shards \[8\] are outside the ring of 8 shards"):
        plan_exclusion(topology, exclude=[8])
    with pytest.raises(ExclusionError, match="both excluded and included"):
        plan_exclusion(topology, exclude=[1], include=[1])
    with pytest.raises(ExclusionError, match="would leave none of the 8 shards"):
        plan_exclusion(topology, exclude=range(8))


def test_tracking_an_unknown_tenant_is_a_clear_error() -> None:
    trace = synthetic_trace(dataclasses.replace(SMALL, windows=2))
    with pytest.raises(BalanceError, match="tenant 'nobody' is not in the trace"):
        simulate(trace, total_shards=64, cfg=CFG, track=["nobody"])
