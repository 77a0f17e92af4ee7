"""The embedded TableStore on real Delta tables: commits, time travel, swaps, conflicts, crashes, vacuum."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable  # the independent reader these tests check against
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    DateType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from lakeshard.errors import CommitConflict, TableExists, TableNotFound, TableStoreError
from lakeshard.lake import AppTransaction, TableStore

EVENTS = StructType([
    StructField("tenant_id", StringType(), False),
    StructField("hour", IntegerType(), True),
    StructField("event_id", StringType(), False),
    StructField("ts", TimestampType(), True),
    StructField("attributes", MapType(StringType(), StringType()), True),
])
COMMITTER = Path(__file__).with_name("_committer.py")


def _rows(spark: SparkSession, tenant: str, hour: int, n: int, start: int = 0):
    rows = [(tenant, hour, f"{tenant}-{start + i}", None, {"k": str(i)}) for i in range(n)]
    return spark.createDataFrame(rows, EVENTS).coalesce(1)


def _shape(schema: StructType) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]


def _ids(df) -> list[str]:
    return sorted(r.event_id for r in df.select("event_id").collect())


def test_two_appends_then_time_travel_to_each_version(store: TableStore, spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "events")
    v0 = store.create(uri, EVENTS, partition_by=["tenant_id", "hour"])
    first = store.append(uri, _rows(spark, "acme", 1, 3))
    second = store.append(uri, _rows(spark, "zeta:co/x y", 2, 2))

    assert (v0, first.version, second.version) == (0, 1, 2)
    assert first.rows_added == 3 and second.rows_added == 2
    assert store.read(uri, version=0).count() == 0
    assert _ids(store.read(uri, version=1)) == ["acme-0", "acme-1", "acme-2"]
    latest = store.read(uri)
    assert _shape(latest.schema) == _shape(EVENTS)  # the table's column order and types, partitions included
    got = {(r.tenant_id, r.hour, r.event_id) for r in latest.collect()}
    odd = "zeta:co/x y"  # characters that need escaping in paths and URIs
    assert got == {("acme", 1, f"acme-{i}") for i in range(3)} | {(odd, 2, f"{odd}-{i}") for i in range(2)}
    assert store.read(uri, timestamp=store.history(uri)[-1].timestamp).count() == 0
    assert store.version(uri) == 2


def test_empty_table_reads_as_empty_frame_with_schema(store: TableStore, tmp_path: Path) -> None:
    uri = str(tmp_path / "empty")
    store.create(uri, EVENTS, partition_by=["tenant_id"])
    df = store.read(uri)
    assert df.count() == 0 and _shape(df.schema) == _shape(EVENTS)


def test_partition_values_restore_with_their_types(store: TableStore, spark: SparkSession, tmp_path: Path) -> None:
    schema = StructType([StructField("day", DateType()), StructField("shard", LongType()),
                         StructField("v", StringType())])
    uri = str(tmp_path / "typed")
    store.create(uri, schema, partition_by=["day", "shard"])
    store.append(uri, spark.createDataFrame([(date(2026, 1, 2), 7, "a"), (None, 8, "b")], schema))
    rows = sorted(store.read(uri).collect(), key=lambda r: r.v)
    assert [(r.day, r.shard, r.v) for r in rows] == [(date(2026, 1, 2), 7, "a"), (None, 8, "b")]
    parts = {(f.partition_values["day"], f.partition_values["shard"]) for f in store.files(uri)}
    assert parts == {(None, "8"), ("2026-01-02", "7")}


def test_partition_values_with_any_characters_read_back(
    store: TableStore, spark: SparkSession, tmp_path: Path
) -> None:
    names = ["a:b", "c d", "e%f", "g+h", "é漢", "i#j", "k?l", "m[n]", "o{p}", "q\\r", "s|t", "u^v", "w`x",
             'y"z', "<>", "a'b", "~!@$&*()=,;", "tab\tx", "/lead", "%2F"]
    uri = str(tmp_path / "odd names")
    store.create(uri, EVENTS, partition_by=["tenant_id"])
    # One write spreads over many partition directories: Spark repeats file names across them.
    df = spark.createDataFrame([(n, i, f"e{i}", None, None) for i, n in enumerate(names)], EVENTS).coalesce(1)
    store.append(uri, df)
    got = {(r.tenant_id, r.hour) for r in store.read(uri).collect()}
    assert got == {(n, i) for i, n in enumerate(names)}


def test_files_report_size_rows_partitions_and_stats(store: TableStore, spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "stats")
    store.create(uri, EVENTS, partition_by=["tenant_id"])
    df = spark.sql("select 'acme' tenant_id, cast(id % 3 as int) hour, concat('e', id) event_id, "
                   "timestamp_micros(1767225600000000 + id * 1500) ts, map('a','b') attributes from range(10)")
    store.append(uri, df.coalesce(1))
    (f,) = store.files(uri)
    assert f.num_records == 10 and f.size_bytes > 0 and f.partition_values == {"tenant_id": "acme"}
    assert f.min_values["hour"] == 0 and f.max_values["hour"] == 2
    # Timestamp stats are kept at millisecond precision; the max is rounded up so it stays an upper bound.
    assert str(f.min_values["ts"]).startswith("2026-01-01 00:00:00")
    assert f.max_values["ts"].timestamp() >= 1767225600 + 9 * 0.0015


def test_replace_swaps_files_atomically(store: TableStore, spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "swap")
    store.create(uri, EVENTS, partition_by=["tenant_id"])
    for i in range(3):
        store.append(uri, _rows(spark, "acme", 1, 2, start=10 * i))
    before = store.files(uri)
    old_version = store.version(uri)
    merged = store.read(uri).coalesce(1)
    result = store.replace_files(uri, [f.path for f in before], merged, metadata={"op": "compact"})

    assert (result.files_removed, result.files_added, result.version) == (3, 1, old_version + 1)
    after = store.files(uri)
    assert len(after) == 1 and {f.path for f in after}.isdisjoint({f.path for f in before})
    assert _ids(store.read(uri)) == _ids(store.read(uri, version=old_version))
    # A reader pinned to the old version still sees the old file set, and it is still readable.
    assert {f.path for f in store.files(uri, version=old_version)} == {f.path for f in before}
    assert store.read(uri, version=old_version).count() == 6
    assert store.history(uri)[0].custom_metadata["op"] == "compact"


def test_replace_of_a_file_no_longer_live_is_a_conflict(store: TableStore, spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "swap2")
    store.create(uri, EVENTS)
    store.append(uri, _rows(spark, "acme", 1, 2))
    (f,) = store.files(uri)
    store.replace_files(uri, [f.path], store.read(uri))
    version = store.version(uri)
    with pytest.raises(CommitConflict, match="not live"):
        store.replace_files(uri, [f.path], _rows(spark, "acme", 1, 2))
    assert store.version(uri) == version and store.read(uri).count() == 2


def test_replace_with_nothing_removes_rows(store: TableStore, spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "drop")
    store.create(uri, EVENTS, partition_by=["tenant_id"])
    store.append(uri, _rows(spark, "a", 1, 2))
    store.append(uri, _rows(spark, "b", 1, 2))
    drop = [f.path for f in store.files(uri) if f.partition_values["tenant_id"] == "a"]
    store.replace_files(uri, drop, None, data_change=True)
    assert _ids(store.read(uri)) == ["b-0", "b-1"]


def test_recommitting_an_app_transaction_is_a_noop(store: TableStore, spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "idem")
    store.create(uri, EVENTS)
    txn = [AppTransaction("writer/3", 5)]
    first = store.append(uri, _rows(spark, "acme", 1, 4), app_transactions=txn)
    again = store.append(uri, _rows(spark, "acme", 1, 4), app_transactions=txn)
    older = store.append(uri, _rows(spark, "acme", 1, 4), app_transactions=[AppTransaction("writer/3", 4)])

    assert not first.skipped and again.skipped and older.skipped
    assert again.version == first.version and "already committed" in again.reason
    assert store.read(uri).count() == 4
    assert store.transaction_version(uri, "writer/3") == 5
    assert store.transaction_version(uri, "writer/9") is None
    nxt = store.append(uri, _rows(spark, "acme", 1, 1, start=100), app_transactions=[AppTransaction("writer/3", 6)])
    assert not nxt.skipped and store.transaction_version(uri, "writer/3") == 6
    with pytest.raises(CommitConflict, match="all new or all replayed"):
        store.append(uri, _rows(spark, "acme", 1, 1),
                     app_transactions=[AppTransaction("writer/3", 6), AppTransaction("writer/4", 1)])


def test_empty_batch_still_commits_progress(store: TableStore, spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "progress")
    store.create(uri, EVENTS, partition_by=["tenant_id"])
    result = store.append(uri, spark.createDataFrame([], EVENTS), app_transactions=[AppTransaction("w/0", 9)])
    assert result.files_added == 0 and result.version == 1
    assert store.transaction_version(uri, "w/0") == 9 and store.read(uri).count() == 0


def test_delta_rs_reads_what_the_store_wrote(store: TableStore, spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "interop")
    store.create(uri, EVENTS, partition_by=["tenant_id", "hour"])
    store.append(uri, _rows(spark, "acme", 1, 5))
    store.append(uri, _rows(spark, "b%c d", 2, 3))
    theirs = pa.table(DeltaTable(uri).to_pyarrow_table())
    assert theirs.num_rows == store.read(uri).count() == 8
    assert sorted(theirs.column("event_id").to_pylist()) == _ids(store.read(uri))
    assert set(theirs.column("tenant_id").to_pylist()) == {"acme", "b%c d"}


def test_create_checks_shape_and_append_checks_columns(store: TableStore, spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "shape")
    store.create(uri, EVENTS, partition_by=["tenant_id"])
    assert store.create(uri, EVENTS, partition_by=["tenant_id"]) == 0  # same shape: fine
    with pytest.raises(TableExists):
        store.create(uri, EVENTS, partition_by=["tenant_id"], exist_ok=False)
    other = StructType([*EVENTS.fields, StructField("extra", StringType())])
    with pytest.raises(TableStoreError, match="different shape"):
        store.create(uri, other, partition_by=["tenant_id"])
    bad = _rows(spark, "a", 1, 1).withColumnRenamed("event_id", "evt")
    expected = r"unexpected columns \['evt'\].*missing non-nullable columns \['event_id'\]"
    with pytest.raises(TableStoreError, match=expected):
        store.append(uri, bad)
    with pytest.raises(TableNotFound):
        store.read(str(tmp_path / "nope"))


def _spawn(table: str, tag: str, rows: int, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(COMMITTER), table, tag, str(rows), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _race(procs: list[subprocess.Popen[str]], barrier: Path) -> list[dict[str, object]]:
    deadline = time.time() + 240
    while len(list(barrier.glob("ready-*"))) < len(procs):
        assert time.time() < deadline, "committer processes never became ready"
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        time.sleep(0.05)
    (barrier / "go").touch()
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-2000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    return outs


@pytest.mark.slow
def test_two_processes_appending_at_once_both_commit(store: TableStore, tmp_path: Path) -> None:
    uri = str(tmp_path / "race")
    store.create(uri, EVENTS, partition_by=["tenant_id"])
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    outs = _race([_spawn(uri, t, 50, "--barrier", str(barrier)) for t in ("p1", "p2")], barrier)
    assert sorted(o["outcome"] for o in outs) == ["committed", "committed"]
    assert sorted(o["version"] for o in outs) == [1, 2]
    df = store.read(uri)
    assert df.count() == 100 and df.select("event_id").distinct().count() == 100


@pytest.mark.slow
def test_two_processes_committing_the_same_app_transaction_one_wins(store: TableStore, tmp_path: Path) -> None:
    uri = str(tmp_path / "race_txn")
    store.create(uri, EVENTS, partition_by=["tenant_id"])
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = [_spawn(uri, t, 50, "--barrier", str(barrier), "--app", "writer/0", "1") for t in ("p1", "p2")]
    outs = _race(procs, barrier)
    outcomes = sorted(str(o["outcome"]) for o in outs)
    # The loser either sees the conflict or finds its progress already committed; never both commit.
    assert outcomes in (["committed", "conflict"], ["committed", "skipped"]), outs
    assert store.version(uri) == 1
    assert store.read(uri).count() == 50  # one whole commit, never half of one, never both
    assert store.transaction_version(uri, "writer/0") == 1
    # The loser cleaned up its files: only the winner's are on disk.
    on_disk = {str(p.relative_to(uri)) for p in Path(uri).rglob("*.parquet")}
    assert on_disk == {f.path for f in store.files(uri)}


@pytest.mark.slow
def test_killed_before_commit_leaves_nothing_visible_and_vacuum_removes_it(
    store: TableStore, spark: SparkSession, tmp_path: Path
) -> None:
    uri = str(tmp_path / "crash")
    store.create(uri, EVENTS, partition_by=["tenant_id"])
    store.append(uri, _rows(spark, "kept", 1, 3))
    proc = _spawn(uri, "doomed", 40, "--die-before-commit")
    proc.communicate(timeout=240)
    assert proc.returncode == -9  # SIGKILL, after its Parquet files were written

    committed = {f.path for f in store.files(uri)}
    on_disk = {str(p.relative_to(uri)) for p in Path(uri).rglob("*.parquet")}
    orphans = on_disk - committed
    assert orphans, "the killed writer should have left Parquet files behind"
    assert store.version(uri) == 1 and _ids(store.read(uri)) == ["kept-0", "kept-1", "kept-2"]

    dry = store.vacuum(uri, retention_hours=0, dry_run=True)
    assert len(dry.removed_files) == len(orphans)
    assert {str(p.relative_to(uri)) for p in Path(uri).rglob("*.parquet")} == on_disk  # dry run deletes nothing
    report = store.vacuum(uri, retention_hours=0)
    assert len(report.removed_files) == len(orphans)
    assert {str(p.relative_to(uri)) for p in Path(uri).rglob("*.parquet")} == committed
    assert not [d for d in os.listdir(uri) if d.startswith("w-") and not any(Path(uri, d).rglob("*.parquet"))]
    assert store.read(uri).count() == 3
