"""The sharding allocator: always the same placement for a ``(tenant, time)``, created atomically if new.

Husky's allocator checks for a placement and creates it in one FoundationDB transaction. Here the
Delta log is the consensus: every allocation commit carries the app transaction ``allocator`` with
version = (the placements-table version it read) + 1, prepared against that version. Two allocators
that read the same version and both try to add placements carry the same app id, so Delta lets exactly
one commit; the loser re-reads (now seeing the winner's placements) and tries again for whatever is
still missing. Placements are immutable, so every process may cache them forever.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeshard.config import LakeshardConfig
from lakeshard.errors import CommitConflict
from lakeshard.lake import AppTransaction, TableStore
from lakeshard.routing.errors import RoutingError
from lakeshard.routing.placement import Placement, first_shard, placement_shards, window_of
from lakeshard.routing.tables import (
    RoutingTables,
    ShardTopology,
    TenantSetting,
    placements_arrow,
    placements_from_arrow,
)
from lakeshard.tables import ALLOCATOR_APP_ID
from lakeshard.utc import aware, from_micros, micros

__all__ = ["ALLOCATOR_APP_ID", "AllocatorStats", "ShardAllocator", "plan_placements"]

Key = tuple[str, int]  # (tenant_id, window start in epoch microseconds)


@dataclass
class AllocatorStats:
    """Counters of one allocator's work (what a metrics table or a report shows)."""

    cache_hits: int = 0
    table_reads: int = 0
    placements_created: int = 0
    commits: int = 0
    lost_races: int = 0
    files_read: int = 0  # placements-table files read (those whose windows overlap the ones asked for)
    rows_read: int = 0  # placements rows those reads returned (the windows asked for)


def plan_placements(
    missing: Iterable[tuple[str, datetime]],
    settings: Mapping[str, TenantSetting],
    topology: ShardTopology,
    *,
    default_shard_count: int,
    window_seconds: int,
    now: datetime,
    hash_version: int,
) -> list[Placement]:
    """Return new placements for ``(tenant, window start)`` pairs that have none (pure; no I/O).

    A tenant without settings gets ``default_shard_count`` shards and salt 0. A shard count larger than
    the shards left after exclusions is capped to what is available, so an exclusion never makes a
    tenant unroutable.
    """
    available = topology.total_shards - len(set(topology.excluded))
    out = []
    # A tenant's shard list depends on its setting and the topology only: one computation per tenant.
    shards_of: dict[str, tuple[TenantSetting, tuple[int, ...]]] = {}
    for tenant, start in sorted(set(missing)):
        if tenant not in shards_of:
            setting = settings.get(tenant, TenantSetting(tenant, default_shard_count, 0))
            count = max(1, min(setting.shard_count, available))
            first = first_shard(tenant, setting.salt, topology.total_shards)
            shards_of[tenant] = (setting, placement_shards(first, count, topology.total_shards, topology.excluded))
        setting, shards = shards_of[tenant]
        out.append(Placement(
            tenant_id=tenant, window_start=start, window_end=start + timedelta(seconds=window_seconds),
            shards=shards, salt=setting.salt, total_shards=topology.total_shards,
            excluded=tuple(sorted(set(topology.excluded))), created_at=now, hash_version=hash_version,
        ))
    return out


class ShardAllocator:
    """Returns the placement of any ``(tenant, timestamp)``, the same one in every process, forever.

    Example::

        allocator = ShardAllocator(store, cfg)
        p = allocator.get_placement("acme", datetime(2026, 1, 1, 10, 7, tzinfo=UTC))
        p.shards, p.shard_for("event-123")
        placements = allocator.resolve([("acme", window_start), ("zeta", window_start)])  # one read, ≤1 commit
    """

    def __init__(
        self,
        store: TableStore,
        cfg: LakeshardConfig,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.store = store
        self.cfg = cfg
        self.tables = RoutingTables(store, cfg)
        self.window_seconds = cfg.routing.window_seconds
        self.stats = AllocatorStats()
        self._clock = clock
        self._cache: dict[Key, Placement] = {}
        # Every placement row read so far (all tenants of the windows read, keyed by ``_window_us``): a later
        # lookup in those windows costs no read, and only the pairs asked for ever become Placement objects.
        self._rows: pa.Table | None = None

    def window_start(self, ts: datetime) -> datetime:
        """Return the start of the placement window holding ``ts``."""
        return window_of(ts, self.window_seconds)[0]

    def get_placement(self, tenant_id: str, ts: datetime) -> Placement:
        """Return the placement of ``tenant_id`` for the window holding ``ts``, creating it if needed."""
        start = self.window_start(ts)
        return self.resolve([(tenant_id, start)])[(tenant_id, start)]

    def resolve(self, pairs: Iterable[tuple[str, datetime]]) -> dict[tuple[str, datetime], Placement]:
        """Return the placements of ``(tenant, window start)`` pairs, creating the missing ones atomically.

        Cached pairs cost nothing; the rest cost one read of the placements table and, if some are
        new, one commit (more only when racing another allocator).

        Raises:
            RoutingError: a window start is not on the window grid, or allocation kept losing races.
        """
        aligned: dict[Key, tuple[str, datetime]] = {}
        for tenant, start in pairs:
            start = aware(start)
            aligned[(tenant, micros(start))] = (tenant, start)
        keys = list(aligned)
        found = self.resolve_windows([t for t, _ in keys], [w for _, w in keys])
        return {aligned[k]: p for k, p in zip(keys, found, strict=True)}

    def resolve_windows(self, tenants: Sequence[str], window_starts: Sequence[int]) -> list[Placement]:
        """Return the placement of each ``(tenants[i], window_starts[i])`` — window starts in epoch
        microseconds — as :meth:`resolve` does, without a datetime per pair (a routed batch has tens of
        thousands of pairs).

        Raises:
            RoutingError: a window start is not on the window grid, or allocation kept losing races.
        """
        size = self.window_seconds * 1_000_000
        keys: list[Key] = list(zip(tenants, window_starts, strict=True))
        for tenant, start in keys:
            if start % size:
                raise RoutingError(f"window start {from_micros(start)} for tenant {tenant!r} is not on the "
                                   f"{self.window_seconds}s window grid (expected {from_micros(start - start % size)})")
        distinct = dict.fromkeys(keys)
        todo = [k for k in distinct if k not in self._cache]
        self.stats.cache_hits += len(distinct) - len(todo)
        if todo and self._rows is not None:
            self._decode(todo)
            todo = [k for k in todo if k not in self._cache]
        if todo:
            self._allocate(todo)
        return [self._cache[k] for k in keys]

    def _allocate(self, todo: Sequence[Key]) -> None:
        self.tables.ensure()
        uri = self.tables.placements_uri
        for attempt in range(self.cfg.routing.allocation_retries):
            version = self.store.version(uri)
            self._load(uri, version, todo)
            missing = [k for k in todo if k not in self._cache]
            if not missing:
                return
            new = plan_placements(
                [(tenant, from_micros(start)) for tenant, start in missing],
                self.tables.tenant_settings({tenant for tenant, _ in missing}), self.tables.topology(),
                default_shard_count=self.cfg.routing.default_shard_count,
                window_seconds=self.window_seconds, now=self._clock(),
                hash_version=self.cfg.routing.event_hash_version,
            )
            try:
                result = self.store.append_arrow(
                    uri, placements_arrow(new, allocation=version),
                    app_transactions=[AppTransaction(ALLOCATOR_APP_ID, version + 1)],
                    metadata={"placements": len(new)}, read_version=version,
                )
            except CommitConflict:
                result = None
            if result is not None and not result.skipped:
                self.stats.commits += 1
                self.stats.placements_created += len(new)
                for p in new:
                    self._cache[(p.tenant_id, micros(p.window_start))] = p
                return
            # Another allocator committed first: back off a little, then read what it allocated.
            self.stats.lost_races += 1
            time.sleep(random.uniform(0, 0.05 * (attempt + 1)))
        raise RoutingError(
            f"could not allocate {len(todo)} placements in {uri} after "
            f"{self.cfg.routing.allocation_retries} attempts: other allocators kept committing first"
        )

    def _load(self, uri: str, version: int, keys: Sequence[Key]) -> None:
        self.stats.table_reads += 1
        wanted = sorted({k[1] for k in keys})
        starts = pa.array(wanted, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
        # Read in this process (no Spark job): the windows asked for, every tenant's placements in them, kept
        # as rows since the other tenants' placements of these windows are worth keeping too. The table only grows
        # (a row per tenant per window), so only the files whose window_start statistics overlap the windows
        # asked for are read: each allocation commit adds one file, covering the few windows it allocated.
        # compact_books merges them into files sorted by window_start in small row groups, of which the
        # pushed filter decodes only those that can hold the windows asked for.
        lo, hi = from_micros(wanted[0]), from_micros(wanted[-1])
        files = [f for f in self.store.files(uri, version=version)
                 if (span := f.time_range("window_start")) is None or not (span[1] < lo or span[0] > hi)]
        self.stats.files_read += len(files)
        where = pc.field("window_start").isin(starts)
        rows = self.store.read_arrow(uri, files, where=where) if files else placements_arrow([], allocation=0)
        self.stats.rows_read += rows.num_rows
        rows = rows.append_column("_window_us", rows.column("window_start").cast(pa.timestamp("us", tz="UTC"))
                                  .cast(pa.int64()))
        if self._rows is not None:  # these windows' rows as of this version replace those read before
            kept = pc.invert(pc.is_in(self._rows.column("_window_us"), value_set=pa.array(wanted, pa.int64())))
            rows = pa.concat_tables([self._rows.filter(kept), rows], promote_options="default")
        self._rows = rows
        self._decode(keys)

    def _decode(self, keys: Sequence[Key]) -> None:
        """Turn the rows read so far of the pairs ``keys`` into cached Placements (a route run asks for a small
        part of the tenants x windows it reads: converting them all cost more than the read)."""
        assert self._rows is not None
        asked = pa.table({"tenant_id": pa.array([k[0] for k in keys], self._rows.schema.field("tenant_id").type),
                          "_window_us": pa.array([k[1] for k in keys], pa.int64())})
        # Arrow joins carry no list columns (shards): join the keys with their row numbers, then gather.
        at = (self._rows.select(["tenant_id", "_window_us"])
              .append_column("_row", pa.array(np.arange(self._rows.num_rows, dtype=np.int64)))
              .join(asked, ["tenant_id", "_window_us"], join_type="left semi", use_threads=False).column("_row"))
        rows = self._rows.take(at)
        found: dict[Key, Placement] = {}
        for p in placements_from_arrow(rows):
            key = (p.tenant_id, micros(p.window_start))
            # Exactly one placement per key is committed (the allocator's consensus). Were there ever two,
            # every reader would still pick the same one: the oldest, then the smallest shard list.
            if key not in found or (p.created_at, p.shards) < (found[key].created_at, found[key].shards):
                found[key] = p
        for key, p in found.items():
            self._cache.setdefault(key, p)
