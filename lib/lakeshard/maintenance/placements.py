"""``lakeshard refill --placements``: the placements of a ``placements`` file fsck removed, found again from the
shards their events went to.

A placement is immutable: a copy of an event arriving late goes to the shard the first copy went to, whose ID index
holds its key, and is dropped there. With its placement removed, the allocator would place the window again by the
tenant's settings of the day; if the autosharder, the balancer or an exclusion changed them since, the copy lands on
another shard and is written a second time. The placement itself is gone, but every event routed by it carries
the shard it chose (``events.shard``, ``routed.shard``), and ``routing_metrics`` lists the shards each batch used
per tenant and window. A refill looks, for every ``(tenant, window)`` those tables hold and ``placements`` does not,
for the placement that chose exactly those shards:

1. candidates: what the tenant's placements could have been built from, each put through
   :func:`~lakeshard.routing.allocator.plan_placements` as the allocator would: every shard count and salt
   ``tenant_settings`` ever held for the tenant, the defaults (``routing.default_shard_count``, salt 0), the
   count, salt and ring of the tenant's placements still in the table, on every ring ``shard_topology`` ever
   held (and the configured one), under every event hash a placement of the table uses (and the configured one);
2. a candidate fits a window when ``shard_for`` gives, for every event of the window, the shard the event
   carries, and its shards hold every shard the metrics recorded for the window;
3. a window whose fitting candidates all give the same shards (and hash, unless they are one shard, which takes
   every event under any hash) gets that placement back; a window none fits is tried again with every shard count
   up to ``balancing.max_shards`` (or the largest recorded), within the ring, with the salts and rings of step 1;
   a window that several different placements fit, or none, is named and left alone: a guess could send a late
   copy to a shard that has not seen it.

A window the allocator placed again after the repair (its row made later than the repair commit) is not restored:
its new placement is checked against the window's events, and named when it sends some to other shards than they
went to (the events it routed since have their copies' shards fixed by it, so neither placement is right for all).

The restored placements are committed in one commit that carries the allocator's app transaction (the version it
read, plus one, as an allocation does: an allocator that read the same version loses the race and reads them) and
``refill-placements`` at the number of ``placements`` files fsck removed, so a replay of the commit is skipped.
A restored row's ``created_at`` is the time the removed file was committed (when the log still holds it; else the
window's start): the moment the original was committed, just after the allocator made it.

Example::

    refills = plan_placement_refills(store, cfg)
    refill_placements(store, cfg, refills)
    for tenant_id, window_start, why in refills.unresolved:
        print(tenant_id, window_start, why)
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeshard.errors import LakeshardError
from lakeshard.lake import AppTransaction
from lakeshard.maintenance.fsck import repair_commits
from lakeshard.routing import HASH_MMH3
from lakeshard.tables import (
    ALLOCATOR_APP_ID,
    EVENT_KEY,
    EVENTS,
    FSCK_REPAIRS,
    PLACEMENTS,
    PLACEMENTS_REFILL_APP_ID,
    ROUTED,
    ROUTING_METRICS,
    SHARD_TOPOLOGY,
    TENANT_SETTINGS,
)
from lakeshard.utc import from_micros, micros

if TYPE_CHECKING:
    from lakeshard.config import LakeshardConfig
    from lakeshard.lake import CommitResult, FileInfo, TableStore
    from lakeshard.routing import Placement, ShardTopology, TenantSetting

__all__ = ["PlacementRefills", "plan_placement_refills", "refill_placements"]

_UTC_US = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class PlacementRefills:
    """What refilling the removed ``placements`` files takes: the placements found again (one per window), the
    windows left as they are (tenant, window start, why), the ``placements`` version they were planned at, and
    ``version``, the number of ``placements`` files fsck removed (the refill app transaction's version)."""

    restored: tuple[Placement, ...]
    unresolved: tuple[tuple[str, datetime, str], ...]
    read_version: int
    version: int

    @property
    def app_transactions(self) -> list[AppTransaction]:
        """Return the app transactions the refill's commit carries: the allocator's and the refill's."""
        return [AppTransaction(ALLOCATOR_APP_ID, self.read_version + 1),
                AppTransaction(PLACEMENTS_REFILL_APP_ID, self.version)]


def plan_placement_refills(store: TableStore, cfg: LakeshardConfig) -> PlacementRefills:
    """Return the placement of every ``(tenant, window)`` that ``events``, ``routed`` or ``routing_metrics`` holds
    and ``placements`` does not, found from the shards its events went to (the module doc says how), and the
    windows for which no single placement fits."""
    from lakeshard.routing import placements_from_arrow

    uri = cfg.table_uri(PLACEMENTS)
    repairs = _repairs(store, cfg)
    if not store.exists(uri) or not repairs:
        return PlacementRefills((), (), store.version(uri) if store.exists(uri) else -1, 0)
    read_version = store.version(uri)
    removed, repaired = _removed_files(store, uri, set(repairs))
    held = store.read_table_arrow(uri, version=read_version)
    size = cfg.routing.window_seconds * 1_000_000
    span = _span(removed, len(repairs), size)
    again = _placed_again(held, repaired, span)
    observed, shards_used = _observed(store, cfg, held.filter(pc.invert(again)), span, size)
    placed_again = {(p.tenant_id, micros(p.window_start)): p for p in placements_from_arrow(held.filter(again))}
    restored, unresolved = [], []
    settings, rings = _settings_history(store, cfg), _rings(store, cfg, held)
    versions = held.column("hash_version").to_pylist() if "hash_version" in held.column_names else [None]
    hashes = {cfg.routing.event_hash_version, *(HASH_MMH3 if v is None else int(v) for v in versions)}
    for tenant in sorted({t for t, _ in shards_used}):
        windows = sorted(w for t, w in shards_used if t == tenant)
        mine = held.filter(pc.equal(held.column("tenant_id"), tenant))
        counts = {(int(c), int(s)) for c, s in zip(pc.list_value_length(mine.column("shards")).to_pylist(),
                                                      mine.column("salt").to_pylist(), strict=True)}
        counts |= {(s.shard_count, s.salt) for s in settings.get(tenant, [])}
        counts.add((cfg.routing.default_shard_count, 0))
        fit = _Fitter(tenant, observed.get(tenant), hashes, cfg.routing.event_hash_version, rings, size)
        for window in windows:
            used = shards_used[tenant, window]
            if (tenant, window) in placed_again:  # the allocator placed it again after the repair: check, not restore
                newer = placed_again[tenant, window]
                if not fit.fits(window, used, newer):
                    unresolved.append((tenant, newer.window_start, (
                        f"the allocator placed it again after the repair, on shards {list(newer.shards)}, which do not "
                        f"send its {fit.count(window):,} events to the shards they went to ({sorted(used)}): a late "
                        "copy of one of them can be written twice; nothing is changed")))
                continue
            found = fit.placements(window, used, counts)
            how = "the tenant's settings, placements and rings"
            if not found:
                salts = {s for _, s in counts}
                widest = min(max(r.total_shards for r in rings), max(cfg.balancing.max_shards, *(c for c, _ in counts)))
                found = fit.placements(window, used, {(c, s) for c in range(1, widest + 1) for s in salts})
                how = f"every shard count up to {widest} with the tenant's salts {sorted(salts)}"
            start = from_micros(window)
            events = fit.count(window)
            if len(found) == 1:
                created = _created_at(removed, window) or start
                restored.append(_as_restored(next(iter(found.values())), created))
            elif not found:
                unresolved.append((tenant, start, f"no placement built from {how} sends its {events:,} events to "
                                                  f"the shards they went to ({sorted(used)})"))
            else:
                options = "; ".join(f"shards {list(s)}" + (f" by hash {v}" if v else "") for s, v in sorted(found)[:4])
                more = "; ..." if len(found) > 4 else ""
                unresolved.append((tenant, start, f"{len(found)} different placements send its {events:,} events "
                                                  f"to the shards they went to ({options}{more})"))
    return PlacementRefills(tuple(restored), tuple(unresolved), read_version, len(repairs))


def refill_placements(store: TableStore, cfg: LakeshardConfig, refills: PlacementRefills) -> CommitResult | None:
    """Return the commit adding ``refills``' placements to ``placements`` (one commit; None when there is none).

    The commit is prepared at the version the plan read: an allocator or another refill that committed since makes
    it a :class:`~lakeshard.errors.CommitConflict` (plan again), and a replay of it is skipped.
    """
    from lakeshard.routing import placements_arrow

    if not refills.restored:
        return None
    meta = {"refill_placements": {"windows": len(refills.restored), "unresolved": len(refills.unresolved)}}
    return store.append_arrow(cfg.table_uri(PLACEMENTS),
                              placements_arrow(refills.restored, allocation=refills.read_version),
                              app_transactions=refills.app_transactions, metadata=meta,
                              read_version=refills.read_version)


class _Fitter:
    """The events one tenant's removed windows hold (event id and shard), and the candidate placements that send
    every one of them to its shard."""

    def __init__(self, tenant: str, observed: pa.Table | None, hashes: set[int], preferred: int,
                 rings: list[ShardTopology], size: int) -> None:
        from lakeshard.routing import event_hashes

        # The configured hash first: a one-shard placement found under several hashes is recorded under it.
        self.tenant, self.rings, self.size = tenant, rings, size
        self.versions = sorted(hashes, key=lambda v: (v != preferred, v))
        self._cache: dict[tuple[ShardTopology, int, int, int], Placement] = {}
        self.by_window: dict[int, tuple[np.ndarray, dict[int, np.ndarray]]] = {}
        if observed is None or not observed.num_rows:
            return
        windows = observed.column("_window_us").to_numpy()
        shards = observed.column("shard").to_numpy().astype(np.int64)
        hashed = {v: event_hashes(observed.column("event_id"), v).to_numpy(zero_copy_only=False) for v in hashes}
        for window in np.unique(windows):
            rows = windows == window
            self.by_window[int(window)] = (shards[rows], {v: h[rows] for v, h in hashed.items()})

    def count(self, window: int) -> int:
        """Return how many events of ``window`` the fit is checked against."""
        return len(self.by_window[window][0]) if window in self.by_window else 0

    def placements(self, window: int, used: set[int], counts: set[tuple[int, int]]
                   ) -> dict[tuple[tuple[int, ...], int], Placement]:
        """Return the distinct placements (by shards and hash) built from ``counts`` (shard count, salt) on the
        rings that send every event of ``window`` to its shard and use every shard in ``used``."""
        from dataclasses import replace

        start = from_micros(window)
        shards, hashed = self.by_window.get(window, (np.zeros(0, np.int64), {}))  # no event: the metrics only
        found: dict[tuple[tuple[int, ...], int], Placement] = {}
        for ring in self.rings:
            for count, salt in sorted(counts):
                for version in self.versions:
                    p = self._built(ring, count, salt, version)
                    # One shard takes every event under any hash: such placements differ by nothing but the label.
                    key = (p.shards, version if len(p.shards) > 1 else 0)
                    if key in found or not used <= set(p.shards):
                        continue
                    if len(shards):
                        chosen = np.asarray(p.shards, np.int64)[np.mod(hashed[version], len(p.shards))]
                        if not np.array_equal(chosen, shards):
                            continue
                    found[key] = replace(p, window_start=start, window_end=start + (p.window_end - p.window_start))
        return found

    def fits(self, window: int, used: set[int], p: Placement) -> bool:
        """Return whether placement ``p`` (one of the table's, so its hash is among those hashed) sends every event
        of ``window`` to its shard and uses every shard in ``used``."""
        shards, hashed = self.by_window.get(window, (np.zeros(0, np.int64), {}))
        if not used <= set(p.shards):
            return False
        if not len(shards) or len(p.shards) == 1:
            return True
        chosen = np.asarray(p.shards, np.int64)[np.mod(hashed[p.hash_version], len(p.shards))]
        return bool(np.array_equal(chosen, shards))

    def _built(self, ring: ShardTopology, count: int, salt: int, version: int) -> Placement:
        """Return the placement the allocator builds for the tenant from ``count`` and ``salt`` on ``ring`` (its
        shards do not depend on the window: built once, at the epoch's window)."""
        from lakeshard.routing import TenantSetting, plan_placements

        key = (ring, count, salt, version)
        if key not in self._cache:
            epoch = from_micros(0)
            self._cache[key] = plan_placements(
                [(self.tenant, epoch)], {self.tenant: TenantSetting(self.tenant, count, salt)}, ring,
                default_shard_count=count, window_seconds=self.size // 1_000_000, now=epoch, hash_version=version)[0]
        return self._cache[key]


def _repairs(store: TableStore, cfg: LakeshardConfig) -> list[str]:
    """Return the paths of the ``placements`` files ``fsck_repairs`` records as removed."""
    if not store.exists(cfg.table_uri(FSCK_REPAIRS)):
        return []
    rows = store.read_table_arrow(cfg.table_uri(FSCK_REPAIRS), ["path"], where=pc.field("table_name") == PLACEMENTS)
    return sorted(set(rows.column("path").to_pylist()))


def _removed_files(store: TableStore, uri: str, paths: set[str]
                   ) -> tuple[dict[str, tuple[FileInfo, datetime | None]], datetime | None]:
    """Return each removed file's entry in the snapshot before its repair commit, with the time of the commit that
    added it, for those the log still gives; and the time of the first repair commit (None when the log no longer
    holds it)."""
    found: dict[str, tuple[FileInfo, datetime | None]] = {}
    repaired: datetime | None = None
    for commit, before in repair_commits(store, uri, paths):
        repaired = commit.timestamp if repaired is None else min(repaired, commit.timestamp)
        if before is not None:
            found |= {path: (f, None) for path, f in before.items()}
    try:
        for entry in store.log_entries(uri):
            for change in entry.changes:
                if change.action == "add" and change.file.path in found:
                    found[change.file.path] = (found[change.file.path][0], entry.timestamp)
    except LakeshardError:  # commits cleaned up: the repair times stand in
        pass
    return found, repaired


def _placed_again(held: pa.Table, repaired: datetime | None, span: tuple[int, int] | None) -> pa.Array:
    """Return which rows of ``held`` the allocator made after the repair (``created_at`` later than it) for a window
    the removed files' statistics cover: a window placed again before the refill ran."""
    if repaired is None or not held.num_rows:
        return pa.array([False] * held.num_rows, pa.bool_())
    made = held.column("created_at").cast(_UTC_US).cast(pa.int64())
    mask = pc.greater(made, micros(repaired))
    if span is not None:
        starts = held.column("window_start").cast(_UTC_US).cast(pa.int64())
        mask = pc.and_(mask, pc.and_(pc.greater_equal(starts, span[0]), pc.less_equal(starts, span[1])))
    return pc.fill_null(mask, False).combine_chunks() if isinstance(mask, pa.ChunkedArray) else mask


def _span(removed: dict[str, tuple[FileInfo, datetime | None]], expected: int, size: int) -> tuple[int, int] | None:
    """Return the ``[first, last]`` window starts (epoch microseconds) the removed files' statistics cover, or None
    when the log does not give every removed file's range (then every window is looked at)."""
    ranges = [f.time_range("window_start") for f, _ in removed.values()]
    known = [r for r in ranges if r is not None]
    if len(known) < expected or not known:
        return None
    lo = int(min(r[0] for r in known).timestamp() * 1_000_000)
    hi = int(max(r[1] for r in known).timestamp() * 1_000_000)
    return lo - lo % size, hi - hi % size


def _created_at(removed: dict[str, tuple[FileInfo, datetime | None]], window: int) -> datetime | None:
    """Return the earliest commit time of a removed file whose ``window_start`` range holds ``window``."""
    times = []
    for f, added in removed.values():
        span = f.time_range("window_start")
        if added is not None and (span is None or span[0] <= from_micros(window) <= span[1]):
            times.append(added)
    return min(times) if times else None


def _as_restored(p: Placement, created: datetime) -> Placement:
    from dataclasses import replace

    return replace(p, created_at=created.astimezone(UTC))


def _observed(store: TableStore, cfg: LakeshardConfig, held: pa.Table, span: tuple[int, int] | None, size: int
              ) -> tuple[dict[str, pa.Table], dict[tuple[str, int], set[int]]]:
    """Return, per tenant, the events (their key, ``shard``, ``_window_us``) of the windows ``placements`` lacks,
    from ``events`` and ``routed``; and per such window, the shards its events and its metrics went to."""
    parts = []
    events = cfg.table_uri(EVENTS)
    if store.exists(events):
        files = [f for f in store.files(events) if _meets(f.time_range("ts"), span, size)]
        if files:
            rows = store.read_arrow(events, files, [*EVENT_KEY, "shard"])
            us = rows.column("ts").cast(_UTC_US).cast(pa.int64()).to_numpy()
            parts.append(rows.select([*EVENT_KEY, "shard"])
                         .append_column("_window_us", pa.array(us - np.mod(us, size))))
    routed = cfg.table_uri(ROUTED)
    if store.exists(routed):
        where = None if span is None else (
            (pc.field("window_start") >= pa.scalar(span[0], pa.int64()).cast(_UTC_US))
            & (pc.field("window_start") <= pa.scalar(span[1], pa.int64()).cast(_UTC_US)))
        rows = store.read_table_arrow(routed, [*EVENT_KEY, "window_start", "shard"], where=where)
        parts.append(rows.select([*EVENT_KEY, "shard"]).append_column(
            "_window_us", rows.column("window_start").cast(_UTC_US).cast(pa.int64())))
    metrics = cfg.table_uri(ROUTING_METRICS)
    used = (store.read_table_arrow(metrics, ["tenant_id", "window_start", "shard"]) if store.exists(metrics)
            else pa.table({"tenant_id": pa.array([], pa.string()), "window_start": pa.array([], _UTC_US),
                           "shard": pa.array([], pa.int32())}))
    used = used.select(["tenant_id", "shard"]).append_column(
        "_window_us", used.column("window_start").cast(_UTC_US).cast(pa.int64()))
    keys = held.select(["tenant_id"]).append_column(
        "_window_us", held.column("window_start").cast(_UTC_US).cast(pa.int64()))

    def lacking(t: pa.Table) -> pa.Table:
        t = t.join(keys, ["tenant_id", "_window_us"], join_type="left anti", use_threads=False)
        if span is not None:
            w = t.column("_window_us")
            t = t.filter(pc.and_(pc.greater_equal(w, span[0]), pc.less_equal(w, span[1])))
        return t

    seen = lacking(pa.concat_tables([p.cast(parts[0].schema) for p in parts])) if parts else None
    shards_used: dict[tuple[str, int], set[int]] = defaultdict(set)
    for t in ([seen] if seen is not None else []) + [lacking(used)]:
        for tenant, window, shard in zip(t.column("tenant_id").to_pylist(), t.column("_window_us").to_pylist(),
                                         t.column("shard").to_pylist(), strict=True):
            shards_used[tenant, int(window)].add(int(shard))
    observed: dict[str, pa.Table] = {}
    if seen is not None and seen.num_rows:
        # An event in routed and in events (consumed since) is one event: its shard is the same in both.
        seen = seen.group_by([*EVENT_KEY, "_window_us", "shard"], use_threads=False).aggregate([])
        for tenant in pc.unique(seen.column("tenant_id")).to_pylist():
            observed[tenant] = seen.filter(pc.equal(seen.column("tenant_id"), tenant))
    return observed, dict(shards_used)


def _meets(r: tuple[datetime, datetime] | None, span: tuple[int, int] | None, size: int) -> bool:
    """Return whether a file's ``ts`` range can hold an event of a window in ``span`` (unknown ranges can)."""
    if r is None or span is None:
        return True
    return r[0] < from_micros(span[1] + size) and r[1] >= from_micros(span[0])


def _settings_history(store: TableStore, cfg: LakeshardConfig) -> dict[str, list[TenantSetting]]:
    """Return every setting ``tenant_settings`` ever held, per tenant."""
    from lakeshard.routing import TenantSetting

    uri = cfg.table_uri(TENANT_SETTINGS)
    out: dict[str, list[TenantSetting]] = defaultdict(list)
    if store.exists(uri):
        for r in store.read_table_arrow(uri, ["tenant_id", "shard_count", "salt"]).to_pylist():
            out[r["tenant_id"]].append(TenantSetting(r["tenant_id"], int(r["shard_count"]), int(r["salt"])))
    return out


def _rings(store: TableStore, cfg: LakeshardConfig, held: pa.Table) -> list[ShardTopology]:
    """Return every shard ring a placement could have been made on: the configured one, every one
    ``shard_topology`` ever held, and those of the placements still in the table."""
    from lakeshard.routing import ShardTopology

    rings = {ShardTopology(cfg.routing.total_shards, ())}
    uri = cfg.table_uri(SHARD_TOPOLOGY)
    rows = store.read_table_arrow(uri, ["total_shards", "excluded"]).to_pylist() if store.exists(uri) else []
    rows += held.select(["total_shards", "excluded"]).to_pylist()
    rings |= {ShardTopology(int(r["total_shards"]), tuple(sorted(set(r["excluded"])))) for r in rows}
    return sorted(rings, key=lambda r: (r.total_shards, r.excluded))

