"""The closing fence on Delta's engine through public APIs (a metadata change) and the writers' in-write check of
bucket states: what each relies on in Delta, checked on Delta's engine.

Under Spark Connect, ``tests/runtime/connect_suite.py`` closes a bucket on Delta's engine and has a write built
before the close refused by the same check.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from lakeshard.buckets.completionist import ensure_buckets
from lakeshard.buckets.guard import guard_open_buckets, refused_by_guard
from lakeshard.errors import CommitConflict
from lakeshard.lake import AppTransaction, TableStore

pytestmark = [pytest.mark.delta_jvm, pytest.mark.slow]

SCHEMA = StructType([StructField("tenant_id", StringType(), False), StructField("hour", StringType(), False),
                     StructField("v", LongType(), True)])
H1, H2 = "2026-01-01T01", "2026-01-01T02"


def _tables(store: TableStore, tmp_path: Path) -> tuple[str, str]:
    events, buckets = str(tmp_path / "events"), str(tmp_path / "buckets")
    store.create(events, SCHEMA, partition_by=["tenant_id", "hour"])
    ensure_buckets(store, buckets)
    return events, buckets


def _mark(spark: SparkSession, store: TableStore, buckets: str, tenant: str, hour: str, state: str) -> None:
    import pyarrow as pa

    schema = store.arrow_schema(buckets)
    row = {f.name: None for f in schema}
    row.update(tenant_id=tenant, hour=hour, state=state, decided_at=0, reason="test")
    store.append_arrow(buckets, pa.Table.from_pylist([row], schema=schema))


def _rows(spark: SparkSession, *rows: tuple[str, str, int]) -> DataFrame:
    return spark.createDataFrame(list(rows), SCHEMA)


def test_the_guard_reads_bucket_states_when_the_write_runs_not_when_the_rows_were_built(
    spark: SparkSession, native_store: TableStore, tmp_path: Path
) -> None:
    store = native_store
    events, buckets = _tables(store, tmp_path)
    guarded = guard_open_buckets(store, buckets, _rows(spark, ("acme", H1, 1), ("zeta", H1, 2)))
    untouched = guard_open_buckets(store, buckets, _rows(spark, ("zeta", H2, 3)))
    _mark(spark, store, buckets, "acme", H1, "closing")  # after the rows were built, before they are written
    before = store.version(events)
    with pytest.raises(Exception) as refused:
        store.append(events, guarded, app_transactions=[AppTransaction("writer/0", 1)], read_version=before)
    conflict = refused_by_guard(refused.value, events, before, ("writer/0",))
    assert isinstance(conflict, CommitConflict) and f"acme/{H1} is closing or closed in {buckets}" in conflict.cause
    assert store.version(events) == before and store.transaction_version(events, "writer/0") is None
    assert refused_by_guard(ValueError("anything else"), events, before, ()) is None

    result = store.append(events, untouched, app_transactions=[AppTransaction("writer/1", 1)])
    assert result.rows_added == 1
    assert [tuple(r) for r in store.read(events).collect()] == [("zeta", H2, 3)]  # columns kept, in order


def test_the_guard_narrowed_to_the_rows_hours_refuses_a_closing_bucket_of_those_hours(
    spark: SparkSession, native_store: TableStore, tmp_path: Path
) -> None:
    """The writers name the hours of their rows (known from the Arrow batch): the check then reads only those
    hours' bucket states, and still refuses a bucket of them that began closing after the rows were built."""
    store = native_store
    events, buckets = _tables(store, tmp_path)
    _mark(spark, store, buckets, "acme", H2, "closed")  # another hour: outside the narrowed read
    guarded = guard_open_buckets(store, buckets, _rows(spark, ("acme", H1, 1)), [H1])
    open_hour = guard_open_buckets(store, buckets, _rows(spark, ("zeta", H1, 2)), [H1])
    _mark(spark, store, buckets, "acme", H1, "closing")
    before = store.version(events)
    with pytest.raises(Exception) as refused:
        store.append(events, guarded, app_transactions=[AppTransaction("writer/0", 1)], read_version=before)
    assert refused_by_guard(refused.value, events, before, ("writer/0",)) is not None
    assert store.append(events, open_hour, app_transactions=[AppTransaction("writer/1", 1)]).rows_added == 1


def test_a_fence_fails_a_public_append_whose_transaction_overlaps_it(
    spark: SparkSession, native_store: TableStore, tmp_path: Path
) -> None:
    """Delta fails every transaction that overlaps a metadata change, a blind append too: the append's query
    waits (inside its transaction) until the fence has landed."""
    store = native_store
    events, _ = _tables(store, tmp_path)
    release = tmp_path / "release"

    @F.udf("long", useArrow=False)  # a plain row UDF: no eval type for Spark to infer from the hints
    def held(v: int) -> int:  # runs inside the append's transaction (its write job)
        import os
        import time

        for _ in range(6000):
            if os.path.exists(str(release)):
                break
            time.sleep(0.05)
        return v

    started = tmp_path / "started"

    @F.udf("long", useArrow=False)  # a plain row UDF: no eval type for Spark to infer from the hints
    def mark(v: int) -> int:
        open(str(started), "w").close()
        return v

    rows = _rows(spark, ("acme", H1, 1)).withColumn("v", held(mark(F.col("v"))))
    outcome: list[BaseException | int] = []

    def append() -> None:
        try:
            outcome.append(store.append(events, rows, app_transactions=[AppTransaction("writer/0", 1)]).version)
        except BaseException as exc:
            outcome.append(exc)

    writer = threading.Thread(target=append)
    writer.start()
    try:
        for _ in range(2400):  # the append's job has started: its transaction is open
            if started.exists():
                break
            threading.Event().wait(0.05)
        assert started.exists()
        fenced = store.fence(events, [AppTransaction("writer/0", 0)], read_version=store.version(events))
    finally:
        release.touch()
        writer.join(timeout=300)
    [lost] = outcome
    assert isinstance(lost, CommitConflict), lost
    assert store.version(events) == fenced.version and store.transaction_version(events, "writer/0") is None


def test_a_fence_after_a_writer_commit_it_did_not_read_is_stale_and_a_fence_trips_no_table_check(
    spark: SparkSession, native_store: TableStore, tmp_path: Path
) -> None:
    store = native_store
    events, _ = _tables(store, tmp_path)
    read = store.version(events)
    store.append(events, _rows(spark, ("acme", H1, 1)), app_transactions=[AppTransaction("writer/0", 1)])
    with pytest.raises(CommitConflict, match="carried"):
        store.fence(events, [AppTransaction("writer/0", 1)], read_version=read)
    fenced = store.fence(events, [AppTransaction("writer/0", 1)], read_version=store.version(events),
                         metadata={"closing_fence": [f"acme/{H1}"]})
    [entry] = store.log_entries(events, start=fenced.version)
    assert entry.metadata_changed and not entry.changes and entry.custom_metadata["closing_fence"]
    # A writer that read before the fence loses even though its transaction starts after it.
    with pytest.raises(CommitConflict, match="changed the table's metadata"):
        store.append(events, _rows(spark, ("acme", H1, 2)), app_transactions=[AppTransaction("writer/1", 1)],
                     read_version=read)
    # The property is no table feature lakeshard refuses: later writes and the schema checks go on.
    store.append(events, _rows(spark, ("acme", H1, 3)), app_transactions=[AppTransaction("writer/0", 3)],
                 read_version=store.version(events))
    assert store.create(events, SCHEMA, partition_by=["tenant_id", "hour"]) == store.version(events)
    assert sorted(r["v"] for r in store.read(events).collect()) == [1, 3]
