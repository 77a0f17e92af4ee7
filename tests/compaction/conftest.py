"""Small events tables for compaction tests: a few buckets, each written as many small sorted appends."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from lakeshard.compaction import EVENTS_SORT_SCHEMA, CompactionSettings, LocalityPlanner, SizeTieredPlanner
from lakeshard.dedupe.writer import EVENTS_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakeshard.lake import TableStore

SERVICES = ["api", "auth", "billing", "cart", "checkout", "db-proxy", "etl", "search", "web", "worker"]
STATUSES = ["info", "warn", "error", None]
ENVS = ["prod", "staging", "dev", "pre.view|1"]  # one value with regex metacharacters
HOURS = ["2026-01-01T10", "2026-01-01T11"]


def event_rows(rng: random.Random, tenant: str, hour: str, n: int, start: int) -> list[dict[str, Any]]:
    """Return ``n`` events of one bucket; rare services/envs cluster on a few services, as in real traffic."""
    base = datetime.strptime(hour, "%Y-%m-%dT%H").replace(tzinfo=UTC)
    rows = []
    for i in range(n):
        service = rng.choice(SERVICES)
        env = "pre.view|1" if service == "search" and rng.random() < 0.2 else rng.choice(ENVS[:3])
        rows.append({
            "tenant_id": tenant, "event_id": f"{tenant}-{hour}-{start + i}",
            "ts": base + timedelta(seconds=rng.randrange(3600), microseconds=rng.randrange(10**6)),
            "service": service, "status": rng.choice(STATUSES), "env": env, "host": f"h{rng.randrange(5)}",
            "message": "ünïcode ✓ " * rng.randrange(3), "attributes": {"k": str(i)} if i % 3 else None,
            "size_bytes": 100 + i % 50, "shard": i % 4, "routed_version": start, "hour": hour,
        })
    return rows


AppendEvents = Callable[..., None]


@pytest.fixture
def events_table(spark: SparkSession, store: TableStore, tmp_path: Any) -> tuple[str, AppendEvents]:
    """Return a fresh events table and ``append(tenant, files, rows_per_file)`` that adds sorted small files.

    Each file of one append holds one ``shard`` value, so a file is what one shard writer would flush.
    """
    uri = str(tmp_path / "events")
    store.create(uri, EVENTS_SCHEMA, partition_by=["tenant_id", "hour"])
    rng = random.Random(42)
    counter = [0]

    def append(tenant: str, files: int, rows: int, *, sort: bool = True) -> None:
        # One commit adding ``files`` sorted files per bucket, as that many writer flushes would.
        data = []
        for f in range(files):
            part = [r for h in HOURS for r in event_rows(rng, tenant, h, rows, counter[0])]
            data += [{**r, "shard": f} for r in part]
            counter[0] += rows
        df = spark.createDataFrame(data, EVENTS_SCHEMA)
        df = df.repartitionByRange(files, "shard")
        store.append(uri, sort_like_writer(df) if sort else df)

    return uri, append


def sort_like_writer(df: DataFrame) -> DataFrame:
    """Return ``df`` sorted as the ingest writer sorts: bucket, then the sort schema."""
    return df.sortWithinPartitions("tenant_id", "hour", *EVENTS_SORT_SCHEMA.columns)


def checksum(df: DataFrame) -> list[tuple[Any, int]]:
    """Return the multiset of rows: all columns hashed per row (maps as sorted entries), with multiplicity."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import MapType

    cols = [F.array_sort(F.map_entries(F.col(f.name))) if isinstance(f.dataType, MapType) else F.col(f.name)
            for f in df.schema.fields]
    return sorted((r[0], r[1]) for r in df.groupBy(F.xxhash64(*cols).alias("h")).count().collect())


def small_settings(**extra: Any) -> CompactionSettings:
    """Return settings scaled to test tables: tiers of 4 files, 150-row outputs."""
    return CompactionSettings(
        size_tiered=SizeTieredPlanner(min_files=4, target_rows=150, base_rows=16, growth=4, settle_seconds=0,
                                      grace_seconds=0),
        locality=LocalityPlanner(target_rows=150, growth=2, max_level=3),
        max_regex_chars=200, **extra,
    )
