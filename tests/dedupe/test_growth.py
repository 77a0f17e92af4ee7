"""Writer-side work that must not grow with the number of shards: the ID index repair over hundreds of shards."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakeshard.dedupe.index import IdIndex
from lakeshard.lake import TableStore
from lakeshard.tables import EVENTS_PARTITIONING, ID_INDEX_PARTITIONING
from lakeshard.tables.schemas import EVENTS_SCHEMA, ID_INDEX_PROPERTIES, ID_INDEX_SCHEMA

SHARDS = 600  # ChunkLocks.states overflowed the JVM stack at 500 per-tenant predicates


def _no_commit_hook(point: str) -> None:
    """The index's commit-point hook: nothing to inject here."""


@pytest.mark.slow
@pytest.mark.parametrize("arrow_max_bytes", [0, 64 << 20], ids=["spark", "arrow"])  # 0: always Spark
def test_repair_over_hundreds_of_shards_behind(spark: SparkSession, store: TableStore, tmp_path: Path,
                                               arrow_max_bytes: int) -> None:
    """A repair whose shards are all behind rebuilds exactly the rows between each shard's index progress and its
    ``events`` progress; on Spark, in one job whose plan does not grow with the shards (a predicate per shard
    overflows the analyser's recursion at a few hundred)."""
    events_uri, ids_uri = str(tmp_path / "events"), str(tmp_path / "event_ids")
    store.create(events_uri, EVENTS_SCHEMA, partition_by=EVENTS_PARTITIONING)
    store.create(ids_uri, ID_INDEX_SCHEMA, partition_by=ID_INDEX_PARTITIONING, properties=ID_INDEX_PROPERTIES)
    ts = datetime(2026, 1, 1, 5, 30, tzinfo=UTC)
    # Per shard: one row at each routed version 1..3; the events progress is 2 for every shard but the last (3).
    rows = [("t0", f"e{s}-{v}", ts, None, None, None, None, None, None, 10, s, v, "2026-01-01T05", False)
            for s in range(SHARDS) for v in (1, 2, 3)]
    store.append(events_uri, spark.createDataFrame(rows, EVENTS_SCHEMA))
    progress = {s: 2 for s in range(SHARDS)} | {SHARDS - 1: 3}
    index = IdIndex(store, tuple(range(SHARDS)), ids_uri=ids_uri, events_uri=events_uri,
                    retention=timedelta(days=1), cache_bytes=1 << 20, arrow_max_bytes=arrow_max_bytes,
                    spark=lambda: spark, before_commit=_no_commit_hook)

    assert index.repair(progress) == SHARDS * 2 + 1
    ids = {(r["shard"], r["routed_version"]) for r in store.read(ids_uri).collect()}
    assert ids == {(s, v) for s in range(SHARDS) for v in range(1, progress[s] + 1)}
    assert index.repair(progress) == 0  # the app transactions record each shard's rebuilt progress
