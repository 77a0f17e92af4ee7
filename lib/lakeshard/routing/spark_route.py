"""The Spark route: a batch's landing events as a Spark DataFrame, each with its placement window and shard.

Each event gets its tenant's placement for the event's time window and
``shard = placement.shards[event_hash(event_id, placement.hash_version) % len(placement.shards)]``, so an
event — and every re-sent copy of it — always lands on the same shard. :mod:`lakeshard.routing.arrow_route` does
the same in this process for batches the driver takes.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

import pyarrow as pa

from lakeshard.routing.allocator import ShardAllocator
from lakeshard.routing.hashing import event_hash_column
from lakeshard.tables import EVENT_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["AUTO_WRITE_TASKS_MAX", "route", "write_tasks"]


def route(events: DataFrame, allocator: ShardAllocator) -> DataFrame:
    """Return ``events`` (landing event rows) with ``window_start`` and ``shard``, ready for a write by shard.

    Resolves every ``(tenant, window)`` of the frame with one allocator call (one read of the
    placements table, at most one commit), then joins the placements in by broadcast; each placement's
    hash version picks the event hash (Spark's built-in ``xxhash64`` for new placements). There is no
    shuffle on a small machine: the rows are coalesced into :func:`write_tasks` tasks (one per core), each
    writing one file per shard it holds rows of — so a write partitioned by shard makes at most that many files
    per shard, and moving every row across a shuffle (which cost more than the routing) is saved. A big
    cluster shuffles by shard instead: one file per shard.
    """
    from pyspark.sql import functions as F

    spark = events.sparkSession
    size = allocator.window_seconds * 1_000_000
    us = F.unix_micros("ts")
    windowed = events.withColumn("_window_us", us - F.pmod(us, F.lit(size)))
    distinct = windowed.select("tenant_id", "_window_us").distinct()
    # Arrow both ways: Python rows cost a conversion per field (tenths of a second for 30k pairs).
    pairs = distinct.toArrow() if hasattr(distinct, "toArrow") else pa.Table.from_pylist(  # Spark >= 4.0
        [r.asDict() for r in distinct.collect()], pa.schema([("tenant_id", pa.string()), ("_window_us", pa.int64())]))
    tenants, windows = pairs.column("tenant_id").to_pylist(), pairs.column("_window_us").to_pylist()
    placements = allocator.resolve_windows(tenants, windows)
    lookup = spark.createDataFrame(pa.table({
        "tenant_id": pa.array(tenants, pa.string()),
        "_window_us": pa.array(windows, pa.int64()),
        "_shards": pa.array([list(p.shards) for p in placements], pa.list_(pa.int32())),
        "_hash_version": pa.array([p.hash_version for p in placements], pa.int32()),
    }), "tenant_id string, _window_us long, _shards array<int>, _hash_version int")
    joined = windowed.join(F.broadcast(lookup), ["tenant_id", "_window_us"], "inner")

    def shard_by(version: int) -> Column:
        hashed = event_hash_column(F.col("event_id"), version)
        return F.element_at("_shards", (F.pmod(hashed, F.size("_shards")) + 1).cast("int"))

    versions = sorted({p.hash_version for p in placements}) or [allocator.cfg.routing.event_hash_version]
    shard = shard_by(versions[0])
    for version in versions[1:]:  # only a batch spanning placements of both versions (an upgraded lakehouse)
        shard = F.when(F.col("_hash_version") == version, shard_by(version)).otherwise(shard)
    routed = joined.select(
        *[F.col(f.name) for f in EVENT_SCHEMA.fields],
        F.timestamp_micros("_window_us").alias("window_start"),
        shard.cast("int").alias("shard"),
    )
    tasks = write_tasks(spark, allocator.cfg.routing.write_tasks)
    return routed.coalesce(tasks) if tasks else routed.repartition("shard")


# Up to this many cores, routing skips the shuffle (coalesce, one file per shard per core); a bigger cluster
# shuffles by shard instead, for one file per shard per commit rather than cores x shards small files.
AUTO_WRITE_TASKS_MAX = 8


def write_tasks(spark: SparkSession, configured: int = 0) -> int:
    """Return how many tasks write a routed batch (each one file per shard it holds), 0 for a shuffle by shard.

    ``configured`` if set; else the cores Spark runs tasks on (a local master's, else the cluster's
    ``spark.default.parallelism``), up to :data:`AUTO_WRITE_TASKS_MAX`; else 0 (more cores, or a session that
    does not say). Reads settings only, so it works the same over Spark Connect.
    """
    if configured:
        return configured
    try:
        master = spark.conf.get("spark.master") or ""
        local = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\d+)?\])?", master)
        if local:
            cores = 1 if local[1] is None else (os.cpu_count() or 1) if local[1] == "*" else int(local[1])
        else:
            # A setting, not SparkContext.defaultParallelism: a Spark Connect session has no SparkContext.
            cores = int(spark.conf.get("spark.default.parallelism", None) or 0)
    except Exception:  # a session that does not say (e.g. serverless)
        return 0
    return cores if 0 < cores <= AUTO_WRITE_TASKS_MAX else 0
