"""The autosharder (Husky): how many shards each tenant's future placements get, from its bytes per second.

Pure planning, no I/O: recent per-tenant rates, the current settings and a clock go in; shard-count
changes come out. The executor (:mod:`lakeshard.balancing.executor`) commits them to ``tenant_settings``,
where they take effect at each tenant's next placement window — a live placement never changes.

The rules, per tenant, with ``need(rate) = ceil(rate / target_bytes_per_second)`` bounded by
``[min_shards, max_shards]``:

* **up fast** — the newest window's rate needs more shards than configured: raise to ``need(rate)`` now,
  so the placement of the window after a burst's first window already has them;
* **down slowly** — the peak rate stayed below ``scale_down_below`` of the current capacity
  (``count * target``) for ``scale_down_windows`` windows in a row *and* the last count change is at least
  ``cooldown_seconds`` old: lower to ``need(peak)``. The gap between the two thresholds is the hysteresis
  that keeps a tenant hovering near a boundary from flapping;
* **unchanged** when the tenant has no metrics, or when the newest metrics are older than
  ``metrics_max_age_seconds`` (a broken metrics feed must not shrink everyone to one shard).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import numpy.typing as npt

from lakeshard.balancing.errors import BalancingError
from lakeshard.config import BalancingConfig
from lakeshard.routing import TenantSetting

__all__ = [
    "AutoshardError",
    "AutoshardPlan",
    "Autosharder",
    "ShardCountChange",
    "TenantRates",
    "check_autoshard_config",
    "plan_shard_counts",
    "shards_needed",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class AutoshardError(BalancingError):
    """The autosharder was configured or fed inconsistently (bounds, window lengths, rates)."""


def check_autoshard_config(cfg: BalancingConfig) -> None:
    """Return nothing when ``cfg``'s autosharder settings are usable; raise :class:`AutoshardError` otherwise."""
    problems = []
    if not cfg.target_bytes_per_second > 0:
        problems.append(f"target_bytes_per_second must be > 0, found {cfg.target_bytes_per_second}")
    if cfg.min_shards < 1:
        problems.append(f"min_shards must be >= 1, found {cfg.min_shards}")
    if cfg.max_shards < cfg.min_shards:
        problems.append(f"max_shards ({cfg.max_shards}) must be >= min_shards ({cfg.min_shards})")
    if not 0 < cfg.scale_down_below < 1:
        problems.append(f"scale_down_below must be in (0, 1), found {cfg.scale_down_below}")
    if cfg.scale_down_windows < 1:
        problems.append(f"scale_down_windows must be >= 1, found {cfg.scale_down_windows}")
    if cfg.cooldown_seconds < 0 or cfg.metrics_max_age_seconds < 0:
        problems.append("cooldown_seconds and metrics_max_age_seconds must be >= 0, found "
                        f"{cfg.cooldown_seconds} and {cfg.metrics_max_age_seconds}")
    if problems:
        raise AutoshardError("balancing configuration: " + "; ".join(problems))


def shards_needed(rate: FloatArray, cfg: BalancingConfig) -> IntArray:
    """Return ``ceil(rate / target)`` per element, bounded by ``[min_shards, max_shards]``."""
    need = np.ceil(np.nan_to_num(rate, nan=0.0) / cfg.target_bytes_per_second)
    return np.clip(need, cfg.min_shards, cfg.max_shards).astype(np.int64)


def plan_shard_counts(
    rates: FloatArray,
    current: IntArray,
    seconds_since_change: FloatArray,
    cfg: BalancingConfig,
) -> IntArray:
    """Return the new shard count of each tenant (vectorised core of :class:`Autosharder`).

    Args:
        rates: ``(tenants, windows)`` bytes per second, oldest window first; a row whose newest value is
            NaN has no metrics and keeps its count.
        current: ``(tenants,)`` configured shard counts.
        seconds_since_change: ``(tenants,)`` age of each tenant's last count change (``inf`` if never).
        cfg: the bounds, target and hysteresis.
    """
    rates = np.asarray(rates, dtype=np.float64)
    if rates.ndim != 2 or rates.shape[0] != len(current) or rates.shape[0] != len(seconds_since_change):
        raise AutoshardError(f"rates must be (tenants, windows) matching current ({len(current)}) and "
                             f"seconds_since_change ({len(seconds_since_change)}), found shape {rates.shape}")
    current = np.asarray(current, dtype=np.int64)
    if rates.shape[1] == 0:
        return current.copy()
    latest = rates[:, -1]
    known = ~np.isnan(latest)
    need_now = shards_needed(latest, cfg)
    up = known & (need_now > current)
    new = np.where(up, need_now, current)
    n = cfg.scale_down_windows
    if rates.shape[1] >= n:
        recent = rates[:, -n:]
        # A window without a value is not evidence of low traffic: it blocks scaling down.
        complete = ~np.isnan(recent).any(axis=1)
        peak = np.where(complete, np.where(np.isnan(recent), 0.0, recent).max(axis=1), np.inf)
        low = peak < cfg.scale_down_below * current * cfg.target_bytes_per_second
        cooled = np.asarray(seconds_since_change, dtype=np.float64) >= cfg.cooldown_seconds
        down = known & complete & low & cooled & ~up
        new = np.where(down, np.minimum(shards_needed(np.where(complete, peak, 0.0), cfg), current), new)
    # Bring counts set outside today's bounds back inside them, but only for tenants with metrics.
    return np.where(known, np.clip(new, cfg.min_shards, cfg.max_shards), current).astype(np.int64)


@dataclass(frozen=True)
class TenantRates:
    """Each tenant's bytes per second in the most recent observed windows.

    Attributes:
        windows: start of each observed window, ascending.
        window_seconds: the windows' length.
        rates: tenant → one rate per window (same order as ``windows``); a tenant absent from a window
            that the metrics do cover sent nothing in it (rate 0), and a tenant absent from every window
            has no metrics at all.
    """

    windows: tuple[datetime, ...]
    window_seconds: int
    rates: Mapping[str, tuple[float, ...]]

    @property
    def newest_end(self) -> datetime | None:
        """Return the end of the newest observed window, or None when there is none."""
        return self.windows[-1] + timedelta(seconds=self.window_seconds) if self.windows else None


@dataclass(frozen=True)
class ShardCountChange:
    """One tenant's shard count going from ``old`` to ``new``, and the rates that decided it."""

    tenant_id: str
    old: int
    new: int
    rate: float  # bytes/s in the newest window
    peak: float  # highest bytes/s over the scale-down windows (the newest rate when fewer are known)
    reason: str  # "burst", "sustained low traffic" or "bounds"


@dataclass(frozen=True)
class AutoshardPlan:
    """What the autosharder would change, and why it changed nothing when metrics were stale."""

    changes: tuple[ShardCountChange, ...]
    settings: tuple[TenantSetting, ...]  # the full new settings (new count, salt kept) to commit
    tenants_with_metrics: int
    metrics_end: datetime | None
    stale: bool
    now: datetime
    # The busiest tenant's newest bytes/s and the bytes/s one shard takes: why no count changed.
    busiest: tuple[str, float] | None = None
    target_bytes_per_second: float = 0.0
    max_age_seconds: int = 0

    @property
    def skipped(self) -> str:
        """Return why the plan changes no tenant's shard count ("" when it changes some)."""
        if self.changes:
            return ""
        if self.tenants_with_metrics == 0:
            return "no tenant has routing metrics yet"
        if self.stale:
            newest = self.metrics_end.isoformat() if self.metrics_end else "none"
            return (f"metrics are stale: the newest window ended {newest}, more than {self.max_age_seconds} s "
                    f"before {self.now.isoformat()}")
        top = f" (busiest: {self.busiest[0]} at {self.busiest[1]:,.0f} bytes/s)" if self.busiest else ""
        return (f"every tenant's bytes/s fits its shard count at {self.target_bytes_per_second:,.0f} bytes/s per "
                f"shard{top}, or its last change is within the cooldown")

    @property
    def ups(self) -> int:
        """Return how many tenants get more shards."""
        return sum(1 for c in self.changes if c.new > c.old)

    @property
    def downs(self) -> int:
        """Return how many tenants get fewer shards."""
        return sum(1 for c in self.changes if c.new < c.old)


class Autosharder:
    """Plans per-tenant shard counts from recent bytes per second (pure: no tables, no Spark).

    Example::

        autosharder = Autosharder(cfg.balancing, default_shard_count=cfg.routing.default_shard_count)
        plan = autosharder.plan(rates, settings, last_change, now=datetime.now(UTC))
        for c in plan.changes:
            print(c.tenant_id, c.old, "->", c.new, c.reason)
    """

    def __init__(self, cfg: BalancingConfig, *, default_shard_count: int = 1) -> None:
        check_autoshard_config(cfg)
        self.cfg = cfg
        self.default_shard_count = default_shard_count

    def plan(
        self,
        rates: TenantRates,
        settings: Mapping[str, TenantSetting],
        last_change: Mapping[str, datetime],
        *,
        now: datetime,
    ) -> AutoshardPlan:
        """Return the shard-count changes for the tenants in ``rates`` (none at all when metrics are stale).

        Args:
            rates: recent bytes/s per tenant (see :class:`TenantRates`).
            settings: current settings; a tenant without one has ``default_shard_count`` shards and salt 0.
            last_change: when each tenant's shard count last changed (absent: never).
            now: the clock, for staleness and cooldown.
        """
        end = rates.newest_end
        stale = end is None or (now - end).total_seconds() > self.cfg.metrics_max_age_seconds
        tenants: Sequence[str] = sorted(rates.rates)
        target, max_age = self.cfg.target_bytes_per_second, self.cfg.metrics_max_age_seconds
        if stale or not tenants:
            return AutoshardPlan((), (), len(tenants), end, stale, now, target_bytes_per_second=target,
                                 max_age_seconds=max_age)
        width = len(rates.windows)
        matrix = np.full((len(tenants), width), np.nan)
        for i, t in enumerate(tenants):
            row = rates.rates[t]
            if len(row) != width:
                raise AutoshardError(f"tenant {t!r} has {len(row)} rates for {width} windows")
            matrix[i] = row
        current = np.array([self._setting(settings, t).shard_count for t in tenants], dtype=np.int64)
        age = np.array([(now - last_change[t]).total_seconds() if t in last_change else math.inf for t in tenants])
        new = plan_shard_counts(matrix, current, age, self.cfg)
        changes = []
        out = []
        recent = matrix[:, -min(width, self.cfg.scale_down_windows):]
        for i in np.flatnonzero(new != current).tolist():
            t, old, count = tenants[i], int(current[i]), int(new[i])
            lo, hi = self.cfg.min_shards, self.cfg.max_shards
            if (old > hi and count == hi) or (old < lo and count == lo):
                reason = "bounds"
            else:
                reason = "burst" if count > old else "sustained low traffic"
            changes.append(ShardCountChange(t, old, count, float(matrix[i, -1]), float(np.nanmax(recent[i])), reason))
            out.append(TenantSetting(t, count, self._setting(settings, t).salt))
        newest = np.nan_to_num(matrix[:, -1], nan=0.0)
        top = int(np.argmax(newest))
        return AutoshardPlan(tuple(changes), tuple(out), len(tenants), end, False, now,
                             busiest=(tenants[top], float(newest[top])), target_bytes_per_second=target,
                             max_age_seconds=max_age)

    def _setting(self, settings: Mapping[str, TenantSetting], tenant: str) -> TenantSetting:
        return settings.get(tenant) or TenantSetting(tenant, self.default_shard_count, 0)
