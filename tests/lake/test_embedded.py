"""The embedded TableStore only: two processes racing their commits, a writer killed before its commit, vacuum.

The contract every adapter meets is in ``test_store_contract.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from lakeshard.errors import TableStoreError
from lakeshard.lake import TableStore

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


def test_a_store_that_cached_a_table_still_sees_another_stores_commits_and_loses_to_them(
    store: TableStore, spark: SparkSession, tmp_path: Path
) -> None:
    """Each store keeps a DeltaTable per table and carries app transaction versions forward; neither may hide
    a commit made through another store (another writer process): reads see it, and a commit prepared at a
    version before it conflicts with it instead of landing next to it."""
    from lakeshard.errors import CommitConflict
    from lakeshard.lake import AppTransaction
    from lakeshard.lake.embedded import EmbeddedTableStore

    other = EmbeddedTableStore(spark)
    uri = str(tmp_path / "shared")
    store.create(uri, EVENTS, partition_by=["tenant_id"])
    store.append(uri, _rows(spark, "a", 1, 2), app_transactions=[AppTransaction("writer/0", 1)])
    read_version = store.version(uri)
    assert store.transaction_versions(uri, ["writer/0", "writer/1"]) == {"writer/0": 1, "writer/1": None}

    # The other store commits the next progress of both shards while this one holds its cached table.
    other.append(uri, _rows(spark, "b", 1, 3), app_transactions=[AppTransaction("writer/0", 2),
                                                                  AppTransaction("writer/1", 2)])
    with pytest.raises(CommitConflict):  # prepared at the version this store read: the other commit wins
        store.append(uri, _rows(spark, "c", 1, 4), app_transactions=[AppTransaction("writer/0", 3)],
                     read_version=read_version)
    assert store.transaction_versions(uri, ["writer/0", "writer/1"]) == {"writer/0": 2, "writer/1": 2}
    assert store.version(uri) == other.version(uri) == 2

    # The same with this store's cached table still exactly at the version read: it must not commit blindly.
    read_version = store.version(uri)
    other.append(uri, _rows(spark, "d", 1, 1), app_transactions=[AppTransaction("writer/1", 3)])
    with pytest.raises(CommitConflict):
        store.append(uri, _rows(spark, "e", 1, 1), app_transactions=[AppTransaction("writer/1", 4)],
                     read_version=read_version)
    same = store.append(uri, _rows(spark, "e", 1, 1), app_transactions=[AppTransaction("writer/1", 3)],
                        read_version=read_version)
    assert same.skipped  # exactly the progress the other store committed: a replay, nothing written
    assert store.transaction_version(uri, "writer/1") == other.transaction_version(uri, "writer/1") == 3
    assert {f.path for f in store.files(uri)} == {f.path for f in other.files(uri)}
    assert sorted({r.tenant_id for r in store.read(uri).collect()}) == ["a", "b", "d"]


def test_a_write_the_committer_cannot_fully_see_fails_without_moving_progress_and_retries_exactly_once(
    store: TableStore, spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark writes a partitioned batch; before the commit one of its files vanishes for the committer (as when the
    driver does not see the executors' storage). The commit must fail with nothing moved, and a retry once the
    fault is gone commits the batch exactly once."""
    from lakeshard.errors import UnaccountedRows
    from lakeshard.lake import AppTransaction
    from lakeshard.lake.embedded import write as embedded_write

    uri = str(tmp_path / "events")
    store.create(uri, EVENTS, partition_by=["tenant_id", "hour"])
    store.append(uri, _rows(spark, "acme", 1, 2), app_transactions=[AppTransaction("writer/0", 1)])
    batch = _rows(spark, "acme", 1, 3, start=10).unionByName(_rows(spark, "zeta", 2, 4, start=20))
    step = [AppTransaction("writer/0", 2)]
    real = embedded_write.written_parquet

    def one_file_lost(target: str):  # the committer lists the write directory after one file went missing
        fs, written = real(target)
        fs.delete_file(written[0][0].path)
        return real(target)

    monkeypatch.setattr(embedded_write, "written_parquet", one_file_lost)
    with pytest.raises(UnaccountedRows, match="Spark reported writing 7 rows"):
        store.append(uri, batch, app_transactions=step)
    assert store.version(uri) == 1 and store.transaction_version(uri, "writer/0") == 1
    assert store.read(uri).count() == 2

    monkeypatch.setattr(embedded_write, "written_parquet", real)
    assert store.append(uri, batch, app_transactions=step).rows_added == 7
    assert store.append(uri, batch, app_transactions=step).skipped  # the step is done: a replay adds nothing
    ids = sorted(r.event_id for r in store.read(uri).collect())
    assert ids == sorted([f"acme-{i}" for i in (0, 1, 10, 11, 12)] + [f"zeta-{i}" for i in range(20, 24)])
    assert store.transaction_version(uri, "writer/0") == 2


@pytest.mark.parametrize("checkpoint", [False, True])
def test_many_app_versions_at_once_come_from_one_read_of_the_log_and_match_delta_rs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checkpoint: bool,
) -> None:
    import random

    import pyarrow as pa
    from deltalake import DeltaTable

    # A compaction swap fences hundreds of buckets' chunk locks: their app ids' versions, asked for at once,
    # must not cost a delta-rs scan of the log each (that cost grows with the table's age).
    from lakeshard.lake import AppTransaction
    from lakeshard.lake.embedded import EmbeddedTableStore

    uri = str(tmp_path / "fenced")
    writer = EmbeddedTableStore(None)
    writer.create(uri, StructType([StructField("k", LongType(), True)]))
    rng = random.Random(7)
    apps = [f"chunk/t{i}/h{i % 5}" for i in range(60)]
    for n in range(12):
        writer.append_arrow(uri, pa.table({"k": pa.array([n], pa.int64())}), app_transactions=[
            AppTransaction(a, n * 10 + rng.randrange(10)) for a in rng.sample(apps, 20)])
        if checkpoint and n == 7:
            writer.create_checkpoint(uri)
    truth = {a: DeltaTable(uri).transaction_version(a) for a in [*apps, "never/used"]}
    scans: list[str] = []
    real = DeltaTable.transaction_version
    monkeypatch.setattr(DeltaTable, "transaction_version", lambda self, a: scans.append(a) or real(self, a))
    assert EmbeddedTableStore(None).transaction_versions(uri, list(truth)) == truth
    assert scans == []


def _fresh_loads(monkeypatch: pytest.MonkeyPatch, store: TableStore) -> list[str]:
    """Record the tables the store loads afresh (a snapshot replayed from the checkpoint) from now on."""
    log = store._log  # type: ignore[attr-defined]
    loads: list[str] = []
    real = log.table

    def table(uri: str, version: int | None = None):  # type: ignore[no-untyped-def]
        loads.append(uri)
        return real(uri, version)

    monkeypatch.setattr(log, "table", table)
    return loads


def test_ensuring_an_existing_table_keeps_its_snapshot(store: TableStore, spark: SparkSession, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Each job run ensures its tables (``create`` of an existing one): that must not load them afresh, a cost that
    grows with the table's files, run after run."""
    from lakeshard.lake import AppTransaction

    uri = str(tmp_path / "ensured")
    store.create(uri, EVENTS, partition_by=["tenant_id"])
    for i in range(3):
        store.append(uri, _rows(spark, f"t{i}", 1, 2), app_transactions=[AppTransaction("writer/0", i + 1)])
    files = {f.path for f in store.files(uri)}
    loads = _fresh_loads(monkeypatch, store)
    for _ in range(3):  # three job runs
        assert store.create(uri, EVENTS, partition_by=["tenant_id"]) == 3
        assert store.transaction_versions(uri, ["writer/0"]) == {"writer/0": 3}
        assert {f.path for f in store.files(uri)} == files
    assert loads == [], f"loaded afresh {len(loads)} times"


def test_a_table_created_again_in_its_place_is_not_served_from_the_old_snapshot(
        store: TableStore, spark: SparkSession, tmp_path: Path) -> None:
    import shutil

    from lakeshard.lake import AppTransaction
    from lakeshard.lake.embedded import EmbeddedTableStore

    uri = str(tmp_path / "again")
    store.create(uri, EVENTS, partition_by=["tenant_id"])
    store.append(uri, _rows(spark, "old", 1, 2), app_transactions=[AppTransaction("writer/0", 7)])
    assert store.transaction_version(uri, "writer/0") == 7 and store.version(uri) == 1
    shutil.rmtree(uri)  # dropped and created again by another process, as far as its old version and beyond
    other = EmbeddedTableStore(spark)
    other.create(uri, EVENTS, partition_by=["hour"])
    other.append(uri, _rows(spark, "new", 2, 1))
    other.append(uri, _rows(spark, "new", 3, 1))
    with pytest.raises(TableStoreError, match="different shape"):
        store.create(uri, EVENTS, partition_by=["tenant_id"])
    assert store.create(uri, EVENTS, partition_by=["hour"]) == 2
    assert store.transaction_version(uri, "writer/0") is None
    assert {f.partition_values["hour"] for f in store.files(uri)} == {"2", "3"}


def test_looking_at_a_table_lists_its_log_only_when_it_moved(store: TableStore, spark: SparkSession, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A job run asks for versions, app versions and commits over and over; delta-rs lists the whole ``_delta_log``
    for each of those looks (``update_incremental``, ``is_deltatable``), a cost growing with the commits the log
    keeps. Only a look after a new commit may list; what every look answers stays the same."""
    from deltalake import DeltaTable

    from lakeshard.lake import AppTransaction
    from lakeshard.lake.embedded import EmbeddedTableStore

    uri = str(tmp_path / "looked")
    store.create(uri, EVENTS, partition_by=["tenant_id"])
    for i in range(3):
        store.append(uri, _rows(spark, f"t{i}", 1, 2), app_transactions=[AppTransaction("writer/0", i + 1)])
    store.version(uri)
    listings: list[str] = []
    for name in ("update_incremental", "is_deltatable"):
        real = getattr(DeltaTable, name)

        def counted(*args, _real=real, _name=name, **kwargs):  # type: ignore[no-untyped-def]
            listings.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(DeltaTable, name, counted)
    for _ in range(5):
        assert store.exists(uri) and store.version(uri) == 3
        assert store.transaction_versions(uri, ["writer/0"]) == {"writer/0": 3}
        assert [e.version for e in store.log_entries(uri, start=2)] == [2, 3]
    assert listings == []
    # Another store's commit is seen at the next look (which may list), and later looks list nothing again.
    EmbeddedTableStore(spark).append(uri, _rows(spark, "t9", 1, 1), app_transactions=[AppTransaction("writer/0", 4)])
    assert store.version(uri) == 4 and store.transaction_versions(uri, ["writer/0"]) == {"writer/0": 4}
    seen = len(listings)
    assert [e.version for e in store.log_entries(uri, start=3)] == [3, 4] and store.version(uri) == 4
    assert len(listings) == seen
    with pytest.raises(TableStoreError, match="missing"):
        (Path(uri) / "_delta_log" / f"{2:020d}.json").unlink()
        store.log_entries(uri, start=1)


def _partitioned_table(uri: str) -> None:
    """Write a table of four files: tenants ``ivy`` and ``oak``, hours 07 and 08, three rows each."""
    import pyarrow as pa
    from deltalake import write_deltalake

    for tenant in ("ivy", "oak"):
        for hour in ("2026-05-06T07", "2026-05-06T08"):
            write_deltalake(uri, pa.table({"tenant_id": [tenant] * 3, "hour": [hour] * 3, "n": [1, 2, 3]}),
                            mode="append", partition_by=["tenant_id", "hour"])


@pytest.mark.parametrize("damage", ["truncated", "missing", "fewer rows than the log says", "another schema"])
def test_an_arrow_read_that_meets_a_damaged_data_file_names_table_file_tenant_and_hour(
        tmp_path: Path, damage: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lakeshard.errors import DamagedDataFile
    from lakeshard.lake.embedded import EmbeddedTableStore

    uri = str(tmp_path / "ledger")
    _partitioned_table(uri)
    store = EmbeddedTableStore(None)
    files = store.files(uri)
    victim = next(f for f in files if f.partition_values == {"tenant_id": "oak", "hour": "2026-05-06T07"})
    on_disk = Path(uri) / victim.path
    if damage == "truncated":
        on_disk.write_bytes(on_disk.read_bytes()[:40])
    elif damage == "missing":
        on_disk.unlink()
    elif damage == "fewer rows than the log says":
        pq.write_table(pa.table({"n": pa.array([7], pa.int64())}), on_disk)
    else:
        pq.write_table(pa.table({"n": pa.array(["x", "y", "z"])}), on_disk)

    with pytest.raises(DamagedDataFile) as raised:
        store.read_arrow(uri, files)
    err = raised.value
    assert (err.table, err.path, err.partition_values) == (uri, victim.path, victim.partition_values)
    assert str(err).startswith(f"{uri}: data file {victim.path} (tenant_id=oak, hour=2026-05-06T07) ")
    assert "\n" not in str(err)
    others = [f for f in files if f is not victim]
    assert store.read_arrow(uri, others).num_rows == 9  # the other files still read
