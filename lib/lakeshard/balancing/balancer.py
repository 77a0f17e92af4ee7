"""The sharding balancer (Husky): new salts that even out the bytes each shard receives.

A tenant's placement is its first shard — a consistent hash of ``tenant_id + salt`` — and the next
``count - 1`` shards clockwise, skipping excluded ones. Hash-picked first shards and overlapping runs of
neighbours leave some shards hotter than others; changing a tenant's salt moves its whole run elsewhere.

The balancer measures imbalance as the population variance of per-shard load (bytes). While the variance
over the squared mean is above ``variance_threshold`` it takes the hottest shard, simulates moving every
tenant whose placement includes it to each of its candidate salts, and applies the single move that
lowers the variance most; it stops after ``max_moves`` moves, when the threshold is met, or when no
move from the hottest shard lowers the variance (so a run never makes things worse).

Everything here is pure and vectorised with numpy; a move is evaluated in O(1) from prefix sums, so a run
over 10,000 tenants and 256 shards takes milliseconds. New salts take effect at each tenant's next
placement window (the executor commits them to ``tenant_settings``).

The load model: each tenant's bytes (mean per window over the recent windows) spread evenly over the
shards its *next* placement would get under its current settings — the router picks a shard by the hash
of the event ID, so a tenant's bytes split evenly over its shards up to sampling noise.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from lakeshard.balancing.errors import BalancingError
from lakeshard.config import BalancingConfig
from lakeshard.routing import ShardTopology, TenantSetting, tenant_key

__all__ = [
    "BalanceError",
    "BalancePlan",
    "Balancer",
    "LoadStats",
    "Ring",
    "SaltMove",
    "TenantLoad",
    "candidate_first_shards",
    "first_shards",
    "greedy_salt_moves",
    "load_stats",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_JUMP_MULTIPLIER = np.uint64(2862933555777941757)


class BalanceError(BalancingError):
    """The balancer was given inconsistent input (shapes, shard counts, configuration)."""


def first_shards(keys: npt.NDArray[np.uint64], total_shards: int) -> IntArray:
    """Return the jump consistent hash of each 64-bit key over ``total_shards``, bit for bit as :func:`jump_hash`."""
    if total_shards < 1:
        raise BalanceError(f"total_shards must be at least 1, got {total_shards}")
    key = np.array(keys, dtype=np.uint64)
    b = np.full(key.shape, -1, dtype=np.int64)
    j = np.zeros(key.shape, dtype=np.int64)
    active = j < total_shards
    while active.any():
        b = np.where(active, j, b)
        k = key[active] * _JUMP_MULTIPLIER + np.uint64(1)  # uint64 arithmetic wraps, as the & MASK64 does
        key[active] = k
        # Same IEEE operations in the same order as jump_hash: the quotient, then times (b + 1), truncated.
        quotient = float(1 << 31) / ((k >> np.uint64(33)).astype(np.float64) + 1.0)
        j[active] = ((b[active] + 1).astype(np.float64) * quotient).astype(np.int64)
        active = j < total_shards
    return b


def candidate_first_shards(tenant_ids: Sequence[str], salts: Iterable[int], total_shards: int) -> IntArray:
    """Return a ``(tenants, salts)`` array: the first shard of each tenant under each salt."""
    salt_list = list(salts)
    keys = np.array([tenant_key(t, s) for t in tenant_ids for s in salt_list], dtype=np.uint64)
    return first_shards(keys, total_shards).reshape(len(tenant_ids), len(salt_list))


class Ring:
    """The shards new placements go to, in ring order, and where each first shard lands on it.

    A placement of ``n`` shards starting at first shard ``f`` is the run of ``n`` consecutive *available*
    shards starting at the first available shard at or after ``f`` (wrapping) — exactly what
    :func:`lakeshard.routing.placement.placement_shards` returns. Positions here index available shards.
    """

    def __init__(self, total_shards: int, excluded: Iterable[int] = ()) -> None:
        if total_shards < 1:
            raise BalanceError(f"total_shards must be at least 1, got {total_shards}")
        skip = {s for s in excluded if 0 <= s < total_shards}
        self.total_shards = total_shards
        self.excluded = tuple(sorted(skip))
        self.shards: IntArray = np.array([s for s in range(total_shards) if s not in skip], dtype=np.int64)
        self.size = len(self.shards)
        if self.size == 0:
            raise BalanceError(f"every one of the {total_shards} shards is excluded")
        self._position = np.searchsorted(self.shards, np.arange(total_shards)) % self.size

    @classmethod
    def of(cls, topology: ShardTopology) -> Ring:
        """Return the ring of a shard topology."""
        return cls(topology.total_shards, topology.excluded)

    def position(self, first: IntArray) -> IntArray:
        """Return the ring position a placement starting at first shard ``first`` begins at."""
        return np.asarray(self._position[np.asarray(first, dtype=np.int64)], dtype=np.int64)

    def counts(self, shard_count: IntArray) -> IntArray:
        """Return shard counts capped to the available shards (as the allocator caps them)."""
        return np.clip(np.asarray(shard_count, dtype=np.int64), 1, self.size)

    def run(self, position: int, count: int) -> tuple[int, ...]:
        """Return the shard ids of the placement run starting at ring ``position`` with ``count`` shards."""
        return tuple(int(s) for s in self.shards[(position + np.arange(count)) % self.size])

    def loads(self, weights: FloatArray, position: IntArray, count: IntArray) -> FloatArray:
        """Return the load of each available shard: every tenant's weight split evenly over its run."""
        n = self.size
        count = self.counts(count)
        share = np.asarray(weights, dtype=np.float64) / count
        # Difference array over two laps of the ring, folded back: runs that wrap need no special case.
        diff = (np.bincount(position, share, minlength=2 * n + 1)
                - np.bincount(position + count, share, minlength=2 * n + 1))
        lap = np.cumsum(diff)[: 2 * n]
        return np.asarray(lap[:n] + lap[n:], dtype=np.float64)

    def by_shard(self, ring_loads: FloatArray) -> FloatArray:
        """Return ring loads laid out by shard id (``total_shards`` long; excluded shards get 0)."""
        out = np.zeros(self.total_shards)
        out[self.shards] = ring_loads
        return out

    def covers(self, position: IntArray, count: IntArray, ring_index: int) -> BoolArray:
        """Return which runs include the available shard at ``ring_index``."""
        return np.asarray(((ring_index - position) % self.size) < self.counts(count), dtype=np.bool_)


@dataclass(frozen=True)
class LoadStats:
    """How uneven a set of per-shard loads is."""

    variance: float  # population variance over the available shards
    relative_variance: float  # variance / mean^2 (the squared coefficient of variation)
    max_over_mean: float
    mean: float
    max: float


def load_stats(loads: FloatArray) -> LoadStats:
    """Return the population variance, variance over mean², max/mean, mean and max of ``loads``."""
    values = np.asarray(loads, dtype=np.float64)
    if values.size == 0:
        return LoadStats(0.0, 0.0, 0.0, 0.0, 0.0)
    mean = float(values.mean())
    var = float(values.var())
    peak = float(values.max())
    square = mean**2
    return LoadStats(var, var / square if square > 0 else 0.0, peak / mean if mean > 0 else 0.0, mean, peak)


@dataclass(frozen=True)
class _Move:
    tenant: int
    old_salt: int
    new_salt: int
    old_position: int
    new_position: int
    hottest: int  # ring index of the hottest shard when the move was chosen
    variance_after: float


def _arc_sum(prefix: FloatArray, position: IntArray, count: IntArray) -> FloatArray:
    return np.asarray(prefix[position + count] - prefix[position], dtype=np.float64)


def _add_run(loads: FloatArray, position: int, count: int, value: float) -> None:
    n = len(loads)
    end = position + count
    loads[position:min(end, n)] += value
    if end > n:
        loads[: end - n] += value


def greedy_salt_moves(
    weights: FloatArray,
    first: IntArray,
    count: IntArray,
    salt: IntArray,
    ring: Ring,
    candidates: IntArray,
    candidate_salts: IntArray,
    *,
    max_moves: int,
    variance_threshold: float,
) -> tuple[list[_Move], FloatArray, str]:
    """Return the moves of one balancer run, the ring loads after them, and why the run stopped.

    The vectorised core of :class:`Balancer` (also driven directly by the simulation).

    Args:
        weights: ``(tenants,)`` bytes per tenant.
        first: ``(tenants,)`` current first shard of each tenant.
        count: ``(tenants,)`` shard count of each tenant's next placement.
        salt: ``(tenants,)`` current salt.
        ring: the shards available to new placements.
        candidates: ``(tenants, K)`` first shard of each tenant under each candidate salt.
        candidate_salts: ``(K,)`` the candidate salts.
        max_moves: at most this many tenants move (each at most once per run).
        variance_threshold: stop once variance / mean² is at or below this.
    """
    weights = np.asarray(weights, dtype=np.float64)
    tenants = len(weights)
    if not (len(first) == len(count) == len(salt) == candidates.shape[0] == tenants) or \
            candidates.shape[1] != len(candidate_salts):
        raise BalanceError(f"balancer inputs disagree: {tenants} weights, {len(first)} first shards, {len(count)} "
                           f"counts, {len(salt)} salts, candidates {candidates.shape}, {len(candidate_salts)} salts")
    n = ring.size
    position = ring.position(first)
    counts = ring.counts(count)
    loads = ring.loads(weights, position, counts)
    moved = np.zeros(tenants, dtype=bool)
    moves: list[_Move] = []
    cand_position = ring.position(candidates) if candidates.size else candidates
    total = float(loads.sum())
    mean = total / n
    stopped = "no load" if total <= 0 else ""
    while not stopped:
        if float(loads.var()) <= variance_threshold * mean**2:
            stopped = "variance below threshold"
            break
        if len(moves) >= max_moves:
            stopped = "move cap reached"
            break
        hottest = int(np.argmax(loads))
        on_hot = np.flatnonzero(ring.covers(position, counts, hottest) & ~moved & (weights > 0))
        if on_hot.size == 0 or candidates.shape[1] == 0:
            stopped = "no tenant on the hottest shard can move"
            break
        prefix = np.concatenate(([0.0], np.cumsum(np.concatenate((loads, loads)))))
        c = (weights[on_hot] / counts[on_hot])[:, None]
        k = counts[on_hot][:, None]
        old = position[on_hot][:, None]
        new = cand_position[on_hot]
        # Moving a run of k shards carrying c each from `old` to `new` changes the sum of squared loads by
        # 2c(S_new - S_old) + 2c^2(k - overlap); the total is unchanged, so this is n times the variance change.
        gap = (new - old) % n
        overlap = np.maximum(0, k - gap) + np.maximum(0, k - (n - gap))
        delta = 2 * c * (_arc_sum(prefix, new, k) - _arc_sum(prefix, old, k)) + 2 * c * c * (k - overlap)
        best = int(np.argmin(delta))
        row, col = divmod(best, delta.shape[1])
        # A tolerance far above rounding error: accept only moves that certainly lower the variance.
        if not delta[row, col] < -1e-9 * float(np.dot(loads, loads)):
            stopped = "no move from the hottest shard lowers the variance"
            break
        t = int(on_hot[row])
        share, size, target = float(c[row, 0]), int(k[row, 0]), int(new[row, col])
        _add_run(loads, int(position[t]), size, -share)
        _add_run(loads, target, size, share)
        moves.append(_Move(t, int(salt[t]), int(candidate_salts[col]), int(position[t]), target, hottest,
                           float(loads.var())))
        position[t] = target
        moved[t] = True
    # Recomputed from scratch: the running loads carry the rounding of every incremental update.
    return moves, ring.loads(weights, position, counts), stopped


@dataclass(frozen=True)
class TenantLoad:
    """A tenant's recent bytes (the cost measure) and the settings its next placement would use."""

    tenant_id: str
    bytes: float
    shard_count: int
    salt: int = 0


@dataclass(frozen=True)
class SaltMove:
    """One tenant moved by a new salt: its placement run before and after, and the variance after it."""

    tenant_id: str
    bytes: float
    old_salt: int
    new_salt: int
    old_shards: tuple[int, ...]
    new_shards: tuple[int, ...]
    hottest_shard: int  # the shard the move was made to cool
    variance_after: float


@dataclass(frozen=True)
class BalancePlan:
    """One balancer run: the salt moves, the settings to commit, and per-shard load before and after."""

    moves: tuple[SaltMove, ...]
    settings: tuple[TenantSetting, ...]
    topology: ShardTopology
    shard_bytes_before: tuple[float, ...]  # by shard id; excluded shards are 0
    shard_bytes_after: tuple[float, ...]
    before: LoadStats
    after: LoadStats
    stopped: str
    variance_threshold: float = 0.0
    tenants: int = 0

    @property
    def skipped(self) -> str:
        """Return why the plan moves no tenant ("" when it moves some)."""
        if self.moves:
            return ""
        b = self.before
        return (f"{self.stopped}: variance/mean^2 {b.relative_variance:.4f} (threshold {self.variance_threshold}), "
                f"max/mean shard load {b.max_over_mean:.2f} over {self.tenants} tenants on "
                f"{self.topology.total_shards} shards")

    @property
    def variance_removed(self) -> float:
        """Return the share of the variance the moves remove (0 when there was none)."""
        return 1.0 - self.after.variance / self.before.variance if self.before.variance > 0 else 0.0


class Balancer:
    """Plans salt moves that lower the variance of per-shard load (pure: no tables, no Spark).

    Candidate salts are ``0 .. candidate_salts - 1``: a fixed, bounded set per tenant, so a run costs the
    same every time, salts stay small, and a tenant can move back to a position it had before.

    Example::

        balancer = Balancer(cfg.balancing)
        plan = balancer.plan([TenantLoad("acme", 9e9, shard_count=4, salt=0), ...], ShardTopology(256))
        print(plan.before.max_over_mean, "->", plan.after.max_over_mean, len(plan.moves), "moves")
    """

    def __init__(self, cfg: BalancingConfig) -> None:
        if cfg.max_moves < 0 or cfg.candidate_salts < 1 or cfg.variance_threshold < 0:
            raise BalanceError("balancing configuration: max_moves must be >= 0, candidate_salts >= 1 and "
                               f"variance_threshold >= 0, found {cfg.max_moves}, {cfg.candidate_salts} and "
                               f"{cfg.variance_threshold}")
        self.cfg = cfg
        self.candidate_salts: IntArray = np.arange(cfg.candidate_salts, dtype=np.int64)

    def plan(self, loads: Sequence[TenantLoad], topology: ShardTopology) -> BalancePlan:
        """Return the salt moves of one run over ``loads`` on ``topology`` (at most ``max_moves``)."""
        ring = Ring.of(topology)
        tenants = [t.tenant_id for t in loads]
        if len(set(tenants)) != len(tenants):
            raise BalanceError("each tenant must appear once in the balancer's input")
        bad = [t for t in loads if t.shard_count < 1 or t.bytes < 0 or not np.isfinite(t.bytes)]
        if bad:
            raise BalanceError(f"tenant loads need shard_count >= 1 and finite bytes >= 0: {bad[:3]}")
        weights = np.array([t.bytes for t in loads], dtype=np.float64)
        count = np.array([t.shard_count for t in loads], dtype=np.int64)
        salt = np.array([t.salt for t in loads], dtype=np.int64)
        candidates = candidate_first_shards(tenants, self.candidate_salts.tolist(), ring.total_shards)
        first = np.array([
            candidates[i, t.salt] if 0 <= t.salt < len(self.candidate_salts)
            else candidate_first_shards([t.tenant_id], [t.salt], ring.total_shards)[0, 0]
            for i, t in enumerate(loads)], dtype=np.int64)
        before = ring.loads(weights, ring.position(first), count)
        moves, after, stopped = greedy_salt_moves(
            weights, first, count, salt, ring, candidates, self.candidate_salts,
            max_moves=self.cfg.max_moves, variance_threshold=self.cfg.variance_threshold,
        )
        counts = ring.counts(count)
        out_moves = tuple(
            SaltMove(tenants[m.tenant], float(weights[m.tenant]), m.old_salt, m.new_salt,
                     ring.run(m.old_position, int(counts[m.tenant])), ring.run(m.new_position, int(counts[m.tenant])),
                     int(ring.shards[m.hottest]), m.variance_after)
            for m in moves
        )
        settings = tuple(TenantSetting(tenants[m.tenant], loads[m.tenant].shard_count, m.new_salt) for m in moves)
        return BalancePlan(
            moves=out_moves, settings=settings, topology=ShardTopology(ring.total_shards, ring.excluded),
            shard_bytes_before=tuple(ring.by_shard(before).tolist()),
            shard_bytes_after=tuple(ring.by_shard(after).tolist()),
            before=load_stats(before), after=load_stats(after), stopped=stopped,
            variance_threshold=self.cfg.variance_threshold, tenants=len(loads),
        )
