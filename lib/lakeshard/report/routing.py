"""What routing did, as numbers: load per shard and where the top tenants were placed."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from lakeshard.config import LakeshardConfig
from lakeshard.lake import TableStore
from lakeshard.routing import RoutingTables
from lakeshard.tables import PLACEMENTS, ROUTING_METRICS
from lakeshard.utc import from_micros

__all__ = ["ShardLoad", "shard_load"]


@dataclass(frozen=True)
class ShardLoad:
    """Bytes and events per shard from the routing metrics, and the top tenants' placements over time."""

    total_shards: int
    bytes_by_shard: dict[int, int]
    events_by_shard: dict[int, int]
    placements: int
    multi_shard_tenants: int
    # tenant -> [(window start, shards)] for the tenants with the most bytes
    top_tenant_placements: dict[str, list[tuple[datetime, tuple[int, ...]]]] = field(default_factory=dict)
    biggest_tenant: tuple[str, int] = ("", 0)  # the tenant with the most bytes, and its bytes

    @property
    def floor(self) -> float:
        """Return the lowest max/mean any placement could reach: a shard takes whole tenant slices, so the
        hottest one carries at least the biggest tenant's bytes over the most shards it was placed on."""
        tenant, size = self.biggest_tenant
        mean = sum(self.bytes_by_shard.values()) / self.total_shards if self.total_shards else 0.0
        spread = max((len(shards) for _, shards in self.top_tenant_placements.get(tenant, [])), default=1)
        return size / spread / mean if mean else 0.0

    @property
    def shards_used(self) -> int:
        """Return how many shards received any bytes."""
        return sum(1 for b in self.bytes_by_shard.values() if b > 0)

    @property
    def max_over_mean(self) -> float:
        """Return the hottest shard's bytes over the mean over all shards (1.0 is perfectly even)."""
        loads = [self.bytes_by_shard.get(s, 0) for s in range(self.total_shards)]
        mean = sum(loads) / len(loads) if loads else 0.0
        return max(loads) / mean if mean else 0.0


def shard_load(store: TableStore, cfg: LakeshardConfig, *, top_tenants: int = 4) -> ShardLoad:
    """Return the per-shard load and the top tenants' placements of a routed lakehouse."""
    from pyspark.sql import functions as F

    metrics = store.read(cfg.table_uri(ROUTING_METRICS))
    per_shard = metrics.groupBy("shard").agg(F.sum("bytes").alias("b"), F.sum("events").alias("e")).collect()
    biggest = (metrics.groupBy("tenant_id").agg(F.sum("bytes").alias("b")).orderBy(F.desc("b"))
               .limit(top_tenants).collect())
    top = [r["tenant_id"] for r in biggest]
    placements = store.read(cfg.table_uri(PLACEMENTS))
    rows = (placements.where(F.col("tenant_id").isin(top))
            .selectExpr("tenant_id", "unix_micros(window_start) AS w", "shards").orderBy("w").collect())
    by_tenant: dict[str, list[tuple[datetime, tuple[int, ...]]]] = {t: [] for t in top}
    for r in rows:
        by_tenant[r["tenant_id"]].append((from_micros(int(r["w"])), tuple(r["shards"])))
    counts = placements.agg(F.count(F.lit(1)).alias("n"),
                            F.count_distinct(F.when(F.size("shards") > 1, F.col("tenant_id"))).alias("multi")).first()
    return ShardLoad(
        total_shards=RoutingTables(store, cfg).topology().total_shards,
        bytes_by_shard={int(r["shard"]): int(r["b"]) for r in per_shard},
        events_by_shard={int(r["shard"]): int(r["e"]) for r in per_shard},
        placements=int(counts["n"]) if counts else 0,
        multi_shard_tenants=int(counts["multi"]) if counts else 0,
        top_tenant_placements=by_tenant,
        biggest_tenant=(str(biggest[0]["tenant_id"]), int(biggest[0]["b"])) if biggest else ("", 0),
    )
