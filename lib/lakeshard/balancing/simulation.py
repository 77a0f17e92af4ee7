"""Load management without Spark: replay a traffic trace window by window through placements, the
autosharder and the balancer, and report how even the shards stay.

Everything is numpy over ``(windows, tenants)`` byte matrices, using the same vectorised planners the
executors use (:func:`~lakeshard.balancing.autosharder.plan_shard_counts`,
:func:`~lakeshard.balancing.balancer.greedy_salt_moves`) and the same placement rule as the allocator
(first shard by consistent hash of ``tenant_id + salt``, then the next shards clockwise, skipping
excluded ones). A day of 5-minute windows for 10,000 tenants on 256 shards runs in a few seconds.

Within a window a tenant's bytes are split evenly over its placement (the router spreads events by the
hash of their IDs, so the real split differs only by sampling noise). Each window:

1. placements for the window come from the settings and topology in force when it starts;
2. the routed bytes per shard are recorded;
3. the autosharder sees the window's rates and sets counts for the *next* window;
4. the balancer (every ``balance_every`` windows) moves salts for the *next* window.

Example::

    trace = synthetic_trace(TraceSpec(tenants=2_000, windows=96))
    report = simulate(trace, total_shards=64, cfg=BalancingConfig(target_bytes_per_second=2**20))
    report.summary()["max_over_mean_p95"]
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from lakeshard.balancing.autosharder import check_autoshard_config, plan_shard_counts, shards_needed
from lakeshard.balancing.balancer import (
    BalanceError,
    LoadStats,
    Ring,
    candidate_first_shards,
    greedy_salt_moves,
    load_stats,
)
from lakeshard.config import BalancingConfig

__all__ = [
    "BalanceComparison",
    "SimulationReport",
    "StrategyResult",
    "Trace",
    "TraceBurst",
    "TraceSpec",
    "compare_balancing",
    "simulate",
    "synthetic_trace",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class TraceSpec:
    """The shape of a synthetic per-window traffic trace (the same Zipf law as :mod:`lakeshard.synth`)."""

    tenants: int = 10_000
    windows: int = 288
    window_seconds: int = 300
    zipf_s: float = 1.1
    """The tenant of rank r sends bytes in proportion to r ** -zipf_s."""
    total_bytes_per_second: float = 1024.0**3
    """All tenants together, before bursts and the daily swing."""
    burst_tenants: int = 8
    burst_factor: tuple[float, float] = (10.0, 100.0)
    """A burst multiplies its tenant's rate by a log-uniform factor in this range..."""
    burst_windows: tuple[int, int] = (3, 12)
    """...for this many windows (inclusive range)."""
    burst_ranks: tuple[int, int] = (20, 2_000)
    """Bursts hit tenants of these volume ranks: big enough that more shards are the answer."""
    daily_swing: float = 0.3
    """Traffic varies by ± this share over the day (a sine with its peak mid-trace)."""
    noise: float = 0.15
    """Lognormal sigma of each tenant's bytes per window around its rate."""
    seed: int = 7
    start: datetime = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class TraceBurst:
    """Tenant ``tenant_id`` sends ``factor`` times its usual rate in windows ``[first, last]``."""

    tenant_id: str
    first: int
    last: int
    factor: float


@dataclass(frozen=True, eq=False)
class Trace:
    """Bytes per tenant per window: the autosharder's and the balancer's input, replayable.

    Attributes:
        tenant_ids: one id per column of ``bytes``.
        start: start of window 0.
        window_seconds: length of each window.
        bytes: ``(windows, tenants)`` bytes routed per tenant and window.
        base_rates: ``(tenants,)`` each tenant's usual bytes/s (before bursts, swing and noise).
        bursts: the bursts the trace contains.
    """

    tenant_ids: tuple[str, ...]
    start: datetime
    window_seconds: int
    bytes: FloatArray
    base_rates: FloatArray
    bursts: tuple[TraceBurst, ...] = ()

    @property
    def windows(self) -> int:
        """Return the number of windows."""
        return int(self.bytes.shape[0])

    def window_start(self, index: int) -> datetime:
        """Return the start of window ``index``."""
        return self.start + timedelta(seconds=index * self.window_seconds)

    def biggest_burst(self, *, not_before: int = 1) -> TraceBurst:
        """Return the burst with the highest peak rate (usual rate x factor) starting at ``not_before`` or later.

        Raises:
            BalanceError: the trace has no such burst.
        """
        later = [b for b in self.bursts if b.first >= not_before]
        if not later:
            raise BalanceError(f"the trace has no burst starting at window {not_before} or later")
        return max(later, key=lambda b: float(self.base_rates[self.tenant_index(b.tenant_id)]) * b.factor)

    def tenant_index(self, tenant_id: str) -> int:
        """Return the column of ``tenant_id``.

        Raises:
            BalanceError: the tenant is not in the trace.
        """
        try:
            return self.tenant_ids.index(tenant_id)
        except ValueError:
            raise BalanceError(f"tenant {tenant_id!r} is not in the trace ({len(self.tenant_ids)} tenants)") from None


def synthetic_trace(spec: TraceSpec | None = None) -> Trace:
    """Return a seeded trace: Zipf-skewed tenants, a daily swing, per-window noise and 10-100x bursts."""
    spec = spec or TraceSpec()
    if spec.tenants < 1 or spec.windows < 1 or spec.window_seconds < 1:
        raise BalanceError(f"a trace needs at least one tenant, window and second, found {spec}")
    rng = np.random.default_rng(spec.seed)
    ids = tuple(f"tenant-{i:05d}" for i in range(spec.tenants))
    ranks = rng.permutation(spec.tenants).astype(np.float64) + 1.0
    weights = ranks**-spec.zipf_s
    base = weights / weights.sum() * spec.total_bytes_per_second
    phase = np.arange(spec.windows) / max(spec.windows, 1)
    swing = 1.0 - spec.daily_swing * np.cos(2 * math.pi * phase)
    noise = rng.lognormal(-spec.noise**2 / 2, spec.noise, size=(spec.windows, spec.tenants))
    matrix = (base * spec.window_seconds)[None, :] * swing[:, None] * noise
    low, high = spec.burst_ranks
    by_rank = np.argsort(ranks)
    pool = by_rank[max(0, low - 1):min(spec.tenants, high)]
    chosen: IntArray = rng.choice(pool, size=min(spec.burst_tenants, len(pool)), replace=False)
    bursts = []
    for t in chosen.tolist():
        length = int(rng.integers(spec.burst_windows[0], spec.burst_windows[1] + 1))
        first = int(rng.integers(0, max(1, spec.windows - length)))
        factor = float(np.exp(rng.uniform(math.log(spec.burst_factor[0]), math.log(spec.burst_factor[1]))))
        last = min(spec.windows - 1, first + length - 1)
        matrix[first:last + 1, t] *= factor
        bursts.append(TraceBurst(ids[t], first, last, round(factor, 2)))
    bursts.sort(key=lambda b: b.first)
    return Trace(ids, spec.start, spec.window_seconds, matrix, base, tuple(bursts))


@dataclass(frozen=True, eq=False)
class SimulationReport:
    """What happened in every window of a simulated replay.

    Attributes:
        shard_bytes: ``(windows, total_shards)`` bytes routed to each shard (excluded shards get 0).
        variance, relative_variance, max_over_mean: per window, over the shards available that window.
        moves: salt moves the balancer decided at the end of each window.
        count_changes: shard-count changes the autosharder decided at the end of each window.
        mean_shards_per_tenant, max_shards_per_tenant: over tenants with traffic in the window.
        tracked_counts: tenant → shard count of its placement in each window.
        tracked_rates: tenant → bytes/s in each window.
        seconds: wall time of the replay.
    """

    total_shards: int
    window_seconds: int
    shard_bytes: FloatArray
    variance: FloatArray
    relative_variance: FloatArray
    max_over_mean: FloatArray
    moves: IntArray
    count_changes: IntArray
    mean_shards_per_tenant: FloatArray
    max_shards_per_tenant: IntArray
    tracked_counts: dict[str, IntArray] = field(default_factory=dict)
    tracked_rates: dict[str, FloatArray] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def windows(self) -> int:
        """Return the number of simulated windows."""
        return len(self.variance)

    @property
    def windows_per_second(self) -> float:
        """Return simulated windows per second of wall time."""
        return self.windows / self.seconds if self.seconds > 0 else math.inf

    def summary(self) -> dict[str, Any]:
        """Return the headline numbers: variance and max/mean (median, p95, worst), moves, shards per tenant."""
        return {
            "windows": self.windows,
            "seconds": round(self.seconds, 3),
            "windows_per_second": round(self.windows_per_second, 1),
            "relative_variance_median": float(np.median(self.relative_variance)),
            "relative_variance_p95": float(np.percentile(self.relative_variance, 95)),
            "max_over_mean_median": float(np.median(self.max_over_mean)),
            "max_over_mean_p95": float(np.percentile(self.max_over_mean, 95)),
            "max_over_mean_worst": float(self.max_over_mean.max()),
            "moves_total": int(self.moves.sum()),
            "moves_max_per_run": int(self.moves.max()) if self.windows else 0,
            "count_changes_total": int(self.count_changes.sum()),
            "mean_shards_per_tenant": float(self.mean_shards_per_tenant.mean()),
            "max_shards_per_tenant": int(self.max_shards_per_tenant.max()) if self.windows else 0,
        }


def simulate(
    trace: Trace,
    *,
    total_shards: int = 256,
    cfg: BalancingConfig | None = None,
    autosharder: bool = True,
    balancer: bool = True,
    balance_every: int = 1,
    warm_start: bool = True,
    default_shard_count: int = 1,
    exclusions: Mapping[int, Sequence[int]] | None = None,
    track: Sequence[str] = (),
    candidates: IntArray | None = None,
) -> SimulationReport:
    """Return the per-window report of replaying ``trace`` through placements, autosharder and balancer.

    Args:
        trace: bytes per tenant and window.
        total_shards: shards on the ring.
        cfg: autosharder and balancer settings (default :class:`BalancingConfig`).
        autosharder: let the autosharder change shard counts (else counts stay as they start).
        balancer: run the balancer every ``balance_every`` windows.
        warm_start: start every tenant at the count its first window needs, as if the autosharder had been
            running all along; otherwise at ``default_shard_count``.
        exclusions: window index → shards excluded from that window on (an empty tuple re-includes all).
        track: tenants whose shard count and rate to record window by window.
        candidates: precomputed ``(tenants, candidate_salts)`` first shards (reused across runs to save time).
    """
    cfg = cfg or BalancingConfig()
    check_autoshard_config(cfg)
    if balance_every < 1:
        raise BalanceError(f"balance_every must be >= 1, found {balance_every}")
    started = time.perf_counter()
    tenants, windows, ws = len(trace.tenant_ids), trace.windows, trace.window_seconds
    salts = np.arange(cfg.candidate_salts, dtype=np.int64)
    if candidates is None:
        candidates = candidate_first_shards(trace.tenant_ids, salts.tolist(), total_shards)
    if candidates.shape != (tenants, len(salts)):
        raise BalanceError(f"candidates must be ({tenants}, {len(salts)}), found {candidates.shape}")
    changes = {int(k): tuple(v) for k, v in (exclusions or {}).items()}
    rows = np.arange(tenants)
    salt = np.zeros(tenants, dtype=np.int64)
    if warm_start:
        count = shards_needed(trace.bytes[0] / ws, cfg)
    else:
        count = np.full(tenants, default_shard_count, dtype=np.int64)
    last_change = np.full(tenants, -np.inf)  # window index of each tenant's last count change
    excluded: tuple[int, ...] = changes.get(0, ())
    ring = Ring(total_shards, excluded)
    tracked = {t: trace.tenant_index(t) for t in track}

    shard_bytes = np.zeros((windows, total_shards))
    variance = np.zeros(windows)
    relative = np.zeros(windows)
    max_mean = np.zeros(windows)
    moves = np.zeros(windows, dtype=np.int64)
    count_changes = np.zeros(windows, dtype=np.int64)
    mean_spt = np.zeros(windows)
    max_spt = np.zeros(windows, dtype=np.int64)
    tracked_counts = {t: np.zeros(windows, dtype=np.int64) for t in tracked}
    tracked_rates = {t: trace.bytes[:, i] / ws for t, i in tracked.items()}
    lookback = max(1, cfg.lookback_windows)
    history = max(cfg.scale_down_windows, 1)

    for w in range(windows):
        if w in changes and changes[w] != excluded:
            excluded = changes[w]
            ring = Ring(total_shards, excluded)
        used = ring.counts(count)
        loads = ring.loads(trace.bytes[w], ring.position(candidates[rows, salt]), used)
        shard_bytes[w] = ring.by_shard(loads)
        stats = load_stats(loads)
        variance[w], relative[w], max_mean[w] = stats.variance, stats.relative_variance, stats.max_over_mean
        active = trace.bytes[w] > 0
        mean_spt[w] = float(used[active].mean()) if active.any() else 0.0
        max_spt[w] = int(used.max())
        for t, i in tracked.items():
            tracked_counts[t][w] = used[i]

        if autosharder:
            rates = (trace.bytes[max(0, w - history + 1):w + 1] / ws).T
            new = plan_shard_counts(rates, count, (w - last_change) * ws, cfg)
            changed = new != count
            count_changes[w] = int(changed.sum())
            last_change[changed] = w
            count = new
        if balancer and w % balance_every == 0:
            next_ring = Ring(total_shards, changes[w + 1]) if w + 1 in changes else ring
            weights = trace.bytes[max(0, w - lookback + 1):w + 1].mean(axis=0)
            made, _, _ = greedy_salt_moves(
                weights, candidates[rows, salt], count, salt, next_ring, candidates, salts,
                max_moves=cfg.max_moves, variance_threshold=cfg.variance_threshold,
            )
            for m in made:
                salt[m.tenant] = m.new_salt
            moves[w] = len(made)

    return SimulationReport(
        total_shards=total_shards, window_seconds=ws, shard_bytes=shard_bytes, variance=variance,
        relative_variance=relative, max_over_mean=max_mean, moves=moves, count_changes=count_changes,
        mean_shards_per_tenant=mean_spt, max_shards_per_tenant=max_spt, tracked_counts=tracked_counts,
        tracked_rates=tracked_rates, seconds=time.perf_counter() - started,
    )


@dataclass(frozen=True)
class StrategyResult:
    """One way of placing the same tenants: how many tenants it moved and how even the shards end up."""

    name: str
    moves: int
    runs: int
    stats: LoadStats
    variance_removed: float  # share of the hash-only placement's variance that is gone


@dataclass(frozen=True, eq=False)
class BalanceComparison:
    """The balancer against hash-only placement and a re-hash-everything baseline, on one workload."""

    total_shards: int
    tenants: int
    results: tuple[StrategyResult, ...]
    shard_bytes_before: FloatArray  # by shard id, hash-only placement (after autosharding)
    shard_bytes_after: FloatArray  # by shard id, after the balancer's first run

    def result(self, name: str) -> StrategyResult:
        """Return the result named ``name``.

        Raises:
            BalanceError: there is none.
        """
        for r in self.results:
            if r.name == name:
                return r
        raise BalanceError(f"no strategy named {name!r}; known: {[r.name for r in self.results]}")


def compare_balancing(
    tenant_ids: Sequence[str],
    rates: FloatArray,
    *,
    total_shards: int = 256,
    cfg: BalancingConfig | None = None,
    autoshard: bool = True,
    runs: int = 5,
    rehash_trials: int = 4,
    candidates: IntArray | None = None,
) -> BalanceComparison:
    """Return how the balancer and a naive re-hash of every tenant compare on one steady workload.

    Results (all on the same rates):

    * ``hash only`` — every tenant at salt 0: where consistent hashing alone puts it;
    * ``balancer, 1 run`` — one balancer run (at most ``max_moves`` moves);
    * ``balancer, until threshold`` — repeated runs (at most ``runs``) until the variance threshold is met;
    * ``re-hash everything`` — every tenant gets a new salt (the best of ``rehash_trials`` global salts):
      what an operator without a balancer would do, moving nearly every tenant.

    Args:
        tenant_ids: the tenants.
        rates: ``(tenants,)`` bytes/s.
        autoshard: size shard counts with the autosharder's rule first (``ceil(rate / target)`` within the
            bounds); without it every tenant has one shard, and a tenant bigger than a shard's fair share
            makes balancing hopeless — the comparison then shows exactly that.
    """
    cfg = cfg or BalancingConfig()
    rates = np.asarray(rates, dtype=np.float64)
    tenants = len(tenant_ids)
    salts = np.arange(max(cfg.candidate_salts, rehash_trials + 1), dtype=np.int64)
    if candidates is None or candidates.shape[1] < len(salts):
        candidates = candidate_first_shards(tenant_ids, salts.tolist(), total_shards)
    ring = Ring(total_shards)
    count = shards_needed(rates, cfg) if autoshard else np.ones(tenants, dtype=np.int64)
    first = candidates[:, 0].copy()
    start = ring.loads(rates, ring.position(first), count)
    base = load_stats(start)

    def result(name: str, loads: FloatArray, moved: int, n_runs: int) -> StrategyResult:
        stats = load_stats(loads)
        removed = 1.0 - stats.variance / base.variance if base.variance > 0 else 0.0
        return StrategyResult(name, moved, n_runs, stats, removed)

    out = [result("hash only", start, 0, 0)]
    salt = np.zeros(tenants, dtype=np.int64)
    moved = np.zeros(tenants, dtype=bool)
    cand = candidates[:, : cfg.candidate_salts]
    after_first = start
    loads = start
    done = 0
    for run in range(runs):
        made, loads, _ = greedy_salt_moves(
            rates, cand[np.arange(tenants), salt], count, salt, ring, cand, salts[: cfg.candidate_salts],
            max_moves=cfg.max_moves, variance_threshold=cfg.variance_threshold,
        )
        for m in made:
            salt[m.tenant] = m.new_salt
            moved[m.tenant] = True
        done = run + 1
        if run == 0:
            after_first = loads
            out.append(result("balancer, 1 run", loads, int(moved.sum()), 1))
        if not made:
            break
    out.append(result("balancer, until threshold", loads, int(moved.sum()), done))
    best: StrategyResult | None = None
    for trial in range(1, rehash_trials + 1):
        shifted = candidates[:, trial]
        r = result("re-hash everything", ring.loads(rates, ring.position(shifted), count),
                   int((ring.position(shifted) != ring.position(first)).sum()), 1)
        if best is None or r.stats.variance < best.stats.variance:
            best = r
    if best is not None:
        out.append(best)
    return BalanceComparison(total_shards, tenants, tuple(out), ring.by_shard(start), ring.by_shard(after_first))
