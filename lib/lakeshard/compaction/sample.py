"""A small-file ``events`` table for demos and tests: a few buckets, each written as many small sorted files.

Rare values cluster the way real traffic clusters them — the rare env ``pre.view|1`` (regex metacharacters
on purpose) appears only with the ``search`` service — so pruning on a non-leading column has something
to find. Each append is one commit adding ``files`` files per bucket, as that many writer flushes would.
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from lakeshard.compaction.sort_schema import EVENTS_SORT_SCHEMA
from lakeshard.tables import EVENTS_PARTITIONING, parse_hour

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakeshard.lake import TableStore

__all__ = ["ENVS", "HOURS", "SERVICES", "SmallFileTable", "event_rows", "sort_like_writer"]

SERVICES = ["api", "auth", "billing", "cart", "checkout", "db-proxy", "etl", "search", "web", "worker"]
STATUSES = ["info", "warn", "error", None]
ENVS = ["prod", "staging", "dev", "pre.view|1"]
HOURS = ["2026-01-01T10", "2026-01-01T11"]


def event_rows(rng: random.Random, tenant: str, hour: str, n: int, start: int) -> list[dict[str, Any]]:
    """Return ``n`` events of one bucket ``(tenant, hour)`` with event ids numbered from ``start``."""
    base = parse_hour(hour)
    rows = []
    for i in range(n):
        service = rng.choice(SERVICES)
        env = ENVS[3] if service == "search" and rng.random() < 0.2 else rng.choice(ENVS[:3])
        rows.append({
            "tenant_id": tenant, "event_id": f"{tenant}-{hour}-{start + i}",
            "ts": base + timedelta(seconds=rng.randrange(3600), microseconds=rng.randrange(10**6)),
            "service": service, "status": rng.choice(STATUSES), "env": env, "host": f"h{rng.randrange(5)}",
            "message": "ünïcode ✓ " * rng.randrange(3), "attributes": {"k": str(i)} if i % 3 else None,
            "size_bytes": 100 + i % 50, "shard": i % 4, "routed_version": start, "hour": hour,
        })
    return rows


def sort_like_writer(df: DataFrame) -> DataFrame:
    """Return ``df`` sorted within partitions as ingest sorts files: bucket, then the sort schema."""
    return df.sortWithinPartitions("tenant_id", "hour", *EVENTS_SORT_SCHEMA.columns)


class SmallFileTable:
    """An ``events`` table at ``uri`` that :meth:`append` fills with small files.

    Example::

        table = SmallFileTable(spark, store, "/tmp/lh/events")
        table.append("t1", files=40, rows=200)      # 40 sorted files in each of t1's two hour buckets
    """

    def __init__(self, spark: SparkSession, store: TableStore, uri: str, *, seed: int = 42) -> None:
        from lakeshard.tables import EVENTS_SCHEMA

        self.spark, self.store, self.uri = spark, store, uri
        self._schema = EVENTS_SCHEMA
        store.create(uri, EVENTS_SCHEMA, partition_by=EVENTS_PARTITIONING)
        self._rng = random.Random(seed)
        self._next_id = 0

    def append(self, tenant: str, files: int, rows: int, *, sort: bool = True) -> None:
        """Commit ``files`` files of ``rows`` events to each of the tenant's buckets (sorted unless told not to)."""
        data = []
        for f in range(files):
            part = [r for h in HOURS for r in event_rows(self._rng, tenant, h, rows, self._next_id)]
            data += [{**r, "shard": f} for r in part]  # one shard per file: what one writer flush holds
            self._next_id += rows
        df = self.spark.createDataFrame(data, self._schema).repartitionByRange(files, "shard")
        self.store.append(self.uri, sort_like_writer(df) if sort else df)
