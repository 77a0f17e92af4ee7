"""The routing state kept in the lakehouse: placements, per-tenant settings, and the shard topology.

All three are append-only Delta tables; for settings and topology the newest row wins, so their
history is the audit log of every change the autosharder, the balancer or an operator made.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from lakeshard.config import LakeshardConfig
from lakeshard.lake import TableSpec, TableStore
from lakeshard.routing.errors import RoutingError
from lakeshard.routing.hashing import HASH_MMH3
from lakeshard.routing.placement import Placement
from lakeshard.tables import (
    PLACEMENT_SCHEMA,
    PLACEMENTS,
    SHARD_TOPOLOGY,
    SHARD_TOPOLOGY_SCHEMA,
    TENANT_SETTINGS,
    TENANT_SETTINGS_SCHEMA,
)
from lakeshard.utc import from_micros, micros

__all__ = [
    "PLACEMENTS",
    "PLACEMENT_SCHEMA",
    "SHARD_TOPOLOGY",
    "SHARD_TOPOLOGY_SCHEMA",
    "TENANT_SETTINGS",
    "TENANT_SETTINGS_SCHEMA",
    "RoutingTables",
    "ShardTopology",
    "TenantSetting",
    "placements_arrow",
    "placements_from_arrow",
]

_INTS = pa.list_(pa.field("element", pa.int32(), nullable=False))  # array<int> as Delta's Parquet holds it


@dataclass(frozen=True)
class TenantSetting:
    """How many shards a tenant's future placements get, and the salt that shifts its first shard."""

    tenant_id: str
    shard_count: int
    salt: int = 0


@dataclass(frozen=True)
class ShardTopology:
    """The shard ring new placements are made on: its size and the shards to skip."""

    total_shards: int
    excluded: tuple[int, ...] = ()


def placements_from_arrow(rows: pa.Table) -> list[Placement]:
    """Return the Placements of placements-table rows read as Arrow (e.g. :meth:`TableStore.read_table_arrow`)."""
    def column(name: str) -> list[Any]:
        col = rows.column(name)
        if pa.types.is_timestamp(col.type):  # epoch microseconds, turned into aware datetimes by from_micros
            col = col.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        values: list[Any] = col.to_pylist()
        return values

    names = ("tenant_id", "window_start", "window_end", "shards", "salt", "total_shards", "excluded", "created_at")
    versions = column("hash_version") if "hash_version" in rows.column_names else [None] * rows.num_rows
    return [Placement(tenant_id=t, window_start=from_micros(ws), window_end=from_micros(we), shards=tuple(sh),
                      salt=int(sa), total_shards=int(ts), excluded=tuple(ex), created_at=from_micros(ca),
                      hash_version=HASH_MMH3 if hv is None else int(hv))
            for t, ws, we, sh, sa, ts, ex, ca, hv in zip(*(column(n) for n in names), versions, strict=True)]


def placements_arrow(placements: Sequence[Placement], *, allocation: int) -> pa.Table:
    """Return ``placements`` as an Arrow table of :data:`PLACEMENT_SCHEMA` rows (``allocation`` on each).

    The allocator commits it with :meth:`TableStore.append_arrow` (no Spark job).
    """
    ts = pa.timestamp("us", tz="UTC")
    return pa.table({
        "tenant_id": pa.array([p.tenant_id for p in placements], pa.string()),
        "window_start": pa.array([micros(p.window_start) for p in placements], pa.int64()).cast(ts),
        "window_end": pa.array([micros(p.window_end) for p in placements], pa.int64()).cast(ts),
        "shards": pa.array([list(p.shards) for p in placements], _INTS),
        "salt": pa.array([p.salt for p in placements], pa.int32()),
        "total_shards": pa.array([p.total_shards for p in placements], pa.int32()),
        "excluded": pa.array([list(p.excluded) for p in placements], _INTS),
        "created_at": pa.array([micros(p.created_at) for p in placements], pa.int64()).cast(ts),
        "allocation": pa.array([allocation] * len(placements), pa.int64()),
        "hash_version": pa.array([p.hash_version for p in placements], pa.int32()),
    })


class RoutingTables:
    """Reads and writes the routing state tables of one lakehouse through a TableStore.

    Example::

        tables = RoutingTables(store, cfg)
        tables.set_topology(ShardTopology(32, excluded=(5,)), reason="shard 5 lags")
        tables.set_tenant_settings([TenantSetting("acme", shard_count=4, salt=1)], reason="balancer")
    """

    def __init__(self, store: TableStore, cfg: LakeshardConfig) -> None:
        self.store = store
        self.cfg = cfg
        self.placements_uri = cfg.table_uri(PLACEMENTS)
        self.settings_uri = cfg.table_uri(TENANT_SETTINGS)
        self.topology_uri = cfg.table_uri(SHARD_TOPOLOGY)
        self._ready = False

    def table_specs(self) -> list[TableSpec]:
        """Return the three tables (for :meth:`TableStore.create_all`)."""
        return [
            # A placements table made before hash versions gains its ``hash_version`` column (null: version 1).
            TableSpec(self.placements_uri, PLACEMENT_SCHEMA,
                      description="immutable time-bounded shard placements per tenant", grow=True),
            TableSpec(self.settings_uri, TENANT_SETTINGS_SCHEMA,
                      description="per-tenant shard count and salt; the newest row per tenant wins"),
            TableSpec(self.topology_uri, SHARD_TOPOLOGY_SCHEMA,
                      description="total shards and excluded shards; the newest row wins"),
        ]

    def ensure(self) -> None:
        """Create the three tables if they do not exist yet (idempotent, safe to race)."""
        if self._ready:
            return
        self.store.create_all(self.table_specs())
        self._ready = True

    def topology(self) -> ShardTopology:
        """Return the current shard topology: the newest row, or the configured default."""
        self.ensure()
        rows = self.store.read_table_arrow(self.topology_uri, ["effective_at", "total_shards", "excluded"])
        if not rows.num_rows:
            return ShardTopology(self.cfg.routing.total_shards, ())
        newest = rows.sort_by([("effective_at", "descending")]).slice(0, 1).to_pylist()[0]
        return ShardTopology(int(newest["total_shards"]), tuple(sorted(newest["excluded"])))

    def set_topology(self, topology: ShardTopology, *, reason: str) -> int:
        """Record a new topology for placements allocated from now on; return the commit version."""
        if topology.total_shards < 1:
            raise RoutingError(f"total_shards must be at least 1, got {topology.total_shards}")
        bad = [s for s in topology.excluded if not 0 <= s < topology.total_shards]
        if bad:
            raise RoutingError(f"excluded shards {bad} are outside [0, {topology.total_shards})")
        if len(set(topology.excluded)) >= topology.total_shards:
            raise RoutingError(f"cannot exclude every one of the {topology.total_shards} shards")
        self.ensure()
        row = pa.table({"effective_at": pa.array([datetime.now(UTC)], pa.timestamp("us", tz="UTC")),
                        "total_shards": pa.array([topology.total_shards], pa.int32()),
                        "excluded": pa.array([sorted(set(topology.excluded))], _INTS),
                        "reason": pa.array([reason], pa.string())})
        return self.store.append_arrow(self.topology_uri, row, metadata={"reason": reason}).version

    def tenant_settings(self, tenants: Iterable[str] | None = None) -> dict[str, TenantSetting]:
        """Return the newest setting of each tenant (of ``tenants`` only, when given)."""
        self.ensure()
        wanted = None if tenants is None else set(tenants)
        if wanted is not None and not wanted:
            return {}
        # The table holds one row per change, not per event: read it whole, newest row per tenant wins.
        rows = self.store.read_table_arrow(self.settings_uri, ["tenant_id", "shard_count", "salt", "updated_at"])
        out: dict[str, TenantSetting] = {}
        for r in rows.sort_by([("updated_at", "ascending")]).to_pylist():
            if wanted is None or r["tenant_id"] in wanted:
                out[r["tenant_id"]] = TenantSetting(r["tenant_id"], int(r["shard_count"]), int(r["salt"]))
        return out

    def set_tenant_settings(self, settings: Sequence[TenantSetting], *, reason: str) -> int | None:
        """Record new settings (effective from each tenant's next placement); return the commit version."""
        if not settings:
            return None
        bad = [s for s in settings if s.shard_count < 1]
        if bad:
            raise RoutingError(f"shard_count must be at least 1: {bad[:5]}")
        self.ensure()
        rows = pa.table({"tenant_id": pa.array([s.tenant_id for s in settings], pa.string()),
                         "shard_count": pa.array([s.shard_count for s in settings], pa.int32()),
                         "salt": pa.array([s.salt for s in settings], pa.int32()),
                         "updated_at": pa.array([datetime.now(UTC)] * len(settings), pa.timestamp("us", tz="UTC")),
                         "reason": pa.array([reason] * len(settings), pa.string())})
        return self.store.append_arrow(self.settings_uri, rows,
                                       metadata={"reason": reason, "tenants": len(settings)}).version
