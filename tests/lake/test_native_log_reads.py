"""The native adapter's log reads (Hadoop filesystem through py4j + protocol replay) on real Delta tables.

They need no Delta JVM, so they run here: tables written by the embedded adapter (delta-rs commits) are read
back through :meth:`NativeTableStore.for_log_reads`, and every answer must equal the embedded adapter's.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from py4j_errors import DELTA_LOST_RACE, py4j_error
from pyspark.sql import SparkSession

from lakeshard.errors import CommitConflict, EnvironmentProblem, TableNotFound, TableStoreError
from lakeshard.lake import ROWS_ADDED, AppTransaction, TableStore
from lakeshard.lake.native import NativeTableStore
from lakeshard.lake.native.jvm import jvm_has_class, scala_call
from lakeshard.lake.protocol.log import COMMIT_ID

SCHEMA = "tenant_id string, hour int, event_id string, ts timestamp"


def _rows(spark: SparkSession, tenant: str, n: int, start: int = 0):
    return spark.sql(f"select '{tenant}' tenant_id, cast(id % 2 as int) hour, concat('{tenant}-', id + {start}) "
                     f"event_id, timestamp_micros(1767225600000000 + id * 1500) ts from range({n})").coalesce(1)


@pytest.fixture(scope="module")
def reader(spark: SparkSession) -> NativeTableStore:
    return NativeTableStore.for_log_reads(spark)


def _table(store: TableStore, spark: SparkSession, uri: str) -> None:
    store.create(uri, _rows(spark, "x", 1).schema, partition_by=["tenant_id"])
    store.append(uri, _rows(spark, "a:b c", 4), app_transactions=[AppTransaction("writer/0", 1)],
                 metadata={"step": "one"})
    store.append(uri, _rows(spark, "d", 3), app_transactions=[AppTransaction("writer/1", 5)])
    store.create_checkpoint(uri)
    merged = store.read(uri).coalesce(1)
    store.replace_files(uri, [f.path for f in store.files(uri)], merged, metadata={"op": "compact"})
    store.append(uri, _rows(spark, "d", 2, start=10), app_transactions=[AppTransaction("writer/1", 6)])


def test_log_reads_equal_the_embedded_adapters(store: TableStore, reader: NativeTableStore, spark: SparkSession,
                                                tmp_path: Path) -> None:
    uri = str(tmp_path / "odd name")
    _table(store, spark, uri)

    assert reader.exists(uri) and not reader.exists(str(tmp_path / "nothing"))
    assert reader.version(uri) == store.version(uri) == 4
    assert reader.partition_columns(uri) == ["tenant_id"]
    assert reader.schema(uri).simpleString() == store.schema(uri).simpleString()
    for version in (None, 1, 2, 3):
        ours = sorted(reader.files(uri, version=version), key=lambda f: f.path)
        theirs = sorted(store.files(uri, version=version), key=lambda f: f.path)
        assert [(f.path, f.size_bytes, f.num_records, dict(f.partition_values)) for f in ours] == [
            (f.path, f.size_bytes, f.num_records, dict(f.partition_values)) for f in theirs], version
        # Typed statistics, as the embedded adapter gives them (timestamps as UTC datetimes).
        assert [(f.min_values, f.max_values, f.null_counts) for f in ours] == [
            (f.min_values, f.max_values, f.null_counts) for f in theirs], version
    assert reader.transaction_versions(uri, ["writer/0", "writer/1", "writer/9"]) == {
        "writer/0": 1, "writer/1": 6, "writer/9": None}
    assert reader.transaction_version(uri, "writer/1") == store.transaction_version(uri, "writer/1") == 6
    assert reader.checkpoint_versions(uri) == store.checkpoint_versions(uri) == [2]
    assert {f.path for f in reader.checkpoint_files(uri, 2)} == {f.path for f in store.checkpoint_files(uri, 2)}

    ours_log, theirs_log = reader.log_entries(uri, start=1), store.log_entries(uri, start=1)
    assert [(e.version, e.operation, e.app_transactions, e.changes) for e in ours_log] == [
        (e.version, e.operation, e.app_transactions, e.changes) for e in theirs_log]
    assert [e.custom_metadata for e in ours_log] == [e.custom_metadata for e in theirs_log]
    assert ours_log[0].custom_metadata["step"] == "one" and ours_log[2].custom_metadata["op"] == "compact"

    history = reader.history(uri)
    assert [c.version for c in history] == [4, 3, 2, 1, 0]
    assert [c.custom_metadata for c in history] == [c.custom_metadata for c in store.history(uri)]
    assert [c.version for c in reader.history(uri, limit=2)] == [4, 3]
    times = [c.timestamp for c in reversed(history)]
    assert times == sorted(times) and all(t.tzinfo is not None for t in times)

    rows = reader.read_files(uri, reader.files(uri)).collect()
    assert sorted(r.event_id for r in rows) == sorted(r.event_id for r in store.read(uri).collect())
    assert {r.tenant_id for r in rows} == {"a:b c", "d"}


def test_looking_at_a_log_again_starts_no_spark_job_on_a_classic_session(store: TableStore, spark: SparkSession,
                                                                          tmp_path: Path) -> None:
    # A writer step looks at the log some thirty times; each look a Spark job made a small native run a minute.
    uri = str(tmp_path / "t")
    _table(store, spark, uri)
    reader = NativeTableStore.for_log_reads(spark)
    reader.files(uri)  # the first read of the table replays from its checkpoint, which is Parquet read by Spark
    store.append(uri, _rows(spark, "e", 2), app_transactions=[AppTransaction("writer/2", 1)])
    sc = spark.sparkContext
    sc.setJobGroup("log-looks", "the native adapter looking at a log")
    try:
        assert reader.exists(uri) and not reader.exists(str(tmp_path / "nothing"))
        assert reader.version(uri) == store.version(uri)
        assert reader.transaction_version(uri, "writer/2") == 1
        assert len(reader.files(uri)) == len(store.files(uri))
        assert [c.version for c in reader.history(uri, limit=2)] == [5, 4]
        assert reader.partition_columns(uri) == ["tenant_id"]
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    assert list(sc.statusTracker().getJobIdsForGroup("log-looks")) == []


def test_the_hadoop_filesystem_and_binaryfile_see_the_same_files(store: TableStore, spark: SparkSession,
                                                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    # Under Spark Connect the log is read with binaryFile, on a classic session through Hadoop: one view of it.
    from lakeshard.lake.native.files import SparkFiles
    from lakeshard.lake.native.jvm import HadoopFiles

    uri = str(tmp_path / "odd name")
    _table(store, spark, uri)
    log = Path(uri) / "_delta_log"
    (log / ".00000000000000000001.json.crc").write_text("hidden")
    (log / "_commits").mkdir(exist_ok=True)
    (log / "_commits" / "00000000000000000009.uuid.json").write_text("{}")
    (Path(uri) / "_tmp_write").mkdir()
    (Path(uri) / "_tmp_write" / "part-0.parquet").write_text("not data")
    hadoop, binary = HadoopFiles.of(spark), SparkFiles(spark)
    assert hadoop is not None

    listed = sorted(hadoop.list_dir(str(log)))
    assert listed == sorted(binary.list_dir(str(log)))
    # Statuses read from one line of text each (two py4j calls) or asked one by one: the same listing.
    assert hadoop._described(hadoop._path(str(log))[0].listStatus(hadoop._path(str(log))[1])) is not None
    monkeypatch.setattr(hadoop, "_described", lambda statuses: None)
    assert sorted(hadoop.list_dir(str(log))) == listed
    monkeypatch.undo()
    names = [n for n, _, _ in listed]
    assert f"{4:020d}.json" in names and "_last_checkpoint" not in names
    assert not any(n.startswith(".") or n.startswith("_") for n in names)
    commits = [loc for n, loc, _ in listed if n.endswith(".json")]
    texts = hadoop.read_texts(commits)
    assert texts == binary.read_texts(commits)
    assert len(texts) == 5 and all(t.startswith("{") for t in texts.values())
    assert sorted(hadoop.list_files(uri)) == sorted(binary.list_files(uri))
    # Every file written is listed, the replaced ones too (what vacuum compares); nothing under _tmp_write.
    assert {unquote(f.path) for f in store.files(uri)} < set(hadoop.list_files(uri))
    assert not any(p.startswith("_") for p in hadoop.list_files(uri))
    for files in (hadoop, binary):
        assert files.list_dir(str(tmp_path / "nothing" / "_delta_log")) == []
        assert files.list_files(str(tmp_path / "nothing")) == []
        assert files.read_texts([f"{log}/{99:020d}.json"]) == {}
        with pytest.raises(FileNotFoundError):
            files.read_text(f"{log}/{99:020d}.json")


def _jobs_of(spark: SparkSession, group: str, look: Callable[[], object]) -> tuple[object, int]:
    """Return what ``look`` returns and how many Spark jobs it started."""
    sc = spark.sparkContext
    sc.setJobGroup(group, "a look at a log folder")
    try:
        out = look()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    return out, len(sc.statusTracker().getJobIdsForGroup(group))


def test_a_log_folder_seen_here_as_spark_sees_it_is_listed_and_read_without_spark_jobs(
        store: TableStore, spark: SparkSession, tmp_path: Path) -> None:
    # Under Spark Connect (no py4j) each listing is a binaryFile job; a server on this machine shares its files.
    from lakeshard.lake.native.files import LocalFirstFiles, SparkFiles

    uri = str(tmp_path / "odd name")
    _table(store, spark, uri)
    log = str(Path(uri) / "_delta_log")
    (Path(log) / ".00000000000000000001.json.crc").write_text("hidden")  # names Spark leaves out
    (Path(log) / "_commits").mkdir(exist_ok=True)
    files, binary = LocalFirstFiles(spark), SparkFiles(spark)
    first, jobs = _jobs_of(spark, "first-look", lambda: files.list_dir(log))
    assert first == binary.list_dir(log) and jobs > 0  # the first look asks Spark, and compares

    store.append(uri, _rows(spark, "e", 2), app_transactions=[AppTransaction("writer/2", 1)])
    (listed, texts), jobs = _jobs_of(spark, "local-looks", lambda: (
        files.list_dir(log), files.read_texts([loc for n, loc, _ in files.list_dir(log) if n.endswith(".json")])))
    assert jobs == 0
    assert sorted(listed) == sorted(binary.list_dir(log)) and f"{5:020d}.json" in [n for n, _, _ in listed]
    assert texts == binary.read_texts(list(texts)) and len(texts) == 6
    with pytest.raises(FileNotFoundError):
        files.read_text(f"{listed[0][1].rsplit('/', 1)[0]}/{99:020d}.json")
    shutil.rmtree(uri)  # dropped: an absent folder lists as nothing, as through Spark
    assert files.list_dir(log) == binary.list_dir(log) == []


def test_a_log_folder_seen_otherwise_here_or_on_a_mount_is_always_asked_of_spark(
        store: TableStore, spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import lakeshard.lake.native.files as files_module

    uri = str(tmp_path / "t")
    _table(store, spark, uri)
    log = Path(uri) / "_delta_log"
    # A server elsewhere whose path exists here too: the same names at other times, or other names.
    stale = tmp_path / "here"
    shutil.copytree(log, stale)
    for f in stale.iterdir():
        os.utime(f, (f.stat().st_mtime - 3600, f.stat().st_mtime - 3600))
    fewer = tmp_path / "fewer"
    shutil.copytree(log, fewer)
    (fewer / f"{4:020d}.json").unlink()
    for here in (stale, fewer):
        monkeypatch.setattr(files_module, "_local_folder", lambda location, here=here: str(here))
        files = files_module.LocalFirstFiles(spark)
        for look in range(2):
            listed, jobs = _jobs_of(spark, f"elsewhere-{here.name}-{look}",
                                    lambda files=files: files.list_dir(str(log)))
            assert jobs > 0 and sorted(listed) == sorted(files_module.SparkFiles(spark).list_dir(str(log)))
    monkeypatch.undo()
    # dbfs: (served by the test JVMs from this machine's root, as a runtime serves a volume) is another filesystem
    # than this process's: always Spark. So are the mounts of cloud storage, whose local view may lag behind the
    # cluster's writes.
    files = files_module.LocalFirstFiles(spark)
    first = files_module.SparkFiles(spark).list_dir(str(log))
    for look in range(2):
        listed, jobs = _jobs_of(spark, f"dbfs-{look}", lambda: files.list_dir(f"dbfs:{log}"))
        assert jobs > 0 and sorted(n for n, _, _ in listed) == sorted(n for n, _, _ in first)
    assert files_module._local_folder(f"file://{log}") == str(log)
    assert files_module._local_folder("/Volumes/main/lake/v/t/_delta_log") is None
    assert files_module._local_folder("/dbfs/lake/t/_delta_log") is None


def test_missing_tables_and_versions_are_clear_errors(store: TableStore, reader: NativeTableStore,
                                                      spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(TableNotFound, match="no Delta table at"):
        reader.files(str(tmp_path / "nothing"))
    uri = str(tmp_path / "t")
    _table(store, spark, uri)
    with pytest.raises(TableStoreError, match="no version 9"):
        reader.files(uri, version=9)
    (Path(uri) / "_delta_log" / f"{0:020d}.json").unlink()  # log cleanup after the checkpoint at 2
    assert {f.path for f in reader.files(uri)} == {f.path for f in store.files(uri)}  # from the checkpoint on
    with pytest.raises(TableStoreError, match="holds commits from version 1"):
        reader.log_entries(uri, start=0)
    with pytest.raises(TableStoreError, match="commit 0 is missing"):
        reader.files(uri, version=1)


def test_a_table_created_again_at_the_same_place_is_read_afresh(store: TableStore, reader: NativeTableStore,
                                                                 spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "again")
    _table(store, spark, uri)
    assert reader.transaction_version(uri, "writer/1") == 6 and len(reader.files(uri, version=1)) == 1
    shutil.rmtree(uri)  # a full refresh: dropped and created again, versions start over
    store.create(uri, _rows(spark, "x", 1).schema, partition_by=["tenant_id"])
    store.append(uri, _rows(spark, "e", 2))
    assert reader.transaction_version(uri, "writer/1") is None
    assert {f.partition_values["tenant_id"] for f in reader.files(uri, version=1)} == {"e"}


def test_a_log_reader_needs_delta_itself_to_write_a_checkpoint(store: TableStore, reader: NativeTableStore,
                                                                spark: SparkSession, tmp_path: Path) -> None:
    assert jvm_has_class(spark.sparkContext._jvm, "org.apache.spark.sql.SparkSession")
    uri = str(tmp_path / "t")
    _table(store, spark, uri)
    if not jvm_has_class(spark.sparkContext._jvm, "io.delta.tables.DeltaTable"):
        with pytest.raises(EnvironmentProblem, match="DeltaLog class is in none of"):
            reader.create_checkpoint(uri)
        return
    # With Delta's jars on the session (make env installs them) Delta writes it, readable by both adapters.
    version = reader.create_checkpoint(uri)
    assert version == store.version(uri) and version in reader.checkpoint_versions(uri)
    assert version in store.checkpoint_versions(uri)


# ---------------------------------------------------------------------------------------------------------
# What a native commit hands to Delta. Delta's OptimisticTransaction is absent here, so a recording stand-in
# takes its place: these tests check lakeshard's side of a commit (which actions, which reads, which metadata,
# how conflicts are reported), not that Delta commits them - that is the delta_jvm contract tests' job.


class RecordingTransaction:
    """Records what the native adapter does with Delta's transaction (reads of app ids, the committed actions)."""

    def __init__(self, read_version: int, spark: SparkSession, fail_with: Exception | None = None) -> None:
        self.read_version = read_version
        self.spark = spark
        self.fail_with = fail_with
        self.txn_reads: list[str] = []
        self.committed: list[dict] = []
        self.operation: str | None = None
        self.user_metadata: str | None = None

    def readVersion(self) -> int:
        return self.read_version

    def readTxn(self) -> Any:  # Delta's ArrayBuffer of the app ids the transaction read
        return type("Reads", (), {"addOne": lambda _self, app_id: self.txn_reads.append(app_id)})()

    def commit(self, actions: list[dict], operation: str) -> int:
        self.operation = operation
        self.user_metadata = self.spark.conf.get("spark.databricks.delta.commitInfo.userMetadata", None)
        if self.fail_with is not None:
            raise self.fail_with
        self.committed = actions
        return self.read_version + 1


def _recording(reader: NativeTableStore, monkeypatch: pytest.MonkeyPatch, txn: RecordingTransaction) -> None:
    log = type("Log", (), {"startTransaction": lambda _self: txn})()
    monkeypatch.setattr(reader._delta, "delta_log", lambda uri: log)
    monkeypatch.setattr(reader._delta, "action", lambda action: action)
    monkeypatch.setattr(reader._delta, "seq", list)
    monkeypatch.setattr(reader._delta, "manual_update", lambda: "ManualUpdate")
    monkeypatch.setattr(reader._delta, "append_operation", lambda: "Append")


def _write_one_file(directory: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    target = Path(directory) / "tenant_id=a%3Ab c"
    target.mkdir(parents=True)
    pq.write_table(pa.table({"hour": pa.array([0, 1], pa.int32()), "event_id": ["n-0", "n-1"],
                             "ts": pa.array([None, None], pa.timestamp("us", tz="UTC"))}), target / "part-0.parquet")


def test_a_swap_hands_delta_exact_removes_new_adds_app_transactions_and_metadata(
    store: TableStore, spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "swap")
    _table(store, spark, uri)
    reader = NativeTableStore.for_log_reads(spark)
    live = sorted(f.path for f in reader.files(uri))
    txn = RecordingTransaction(store.version(uri), spark)
    _recording(reader, monkeypatch, txn)
    seen = []

    def describe(table: str, files: list) -> dict[str, str]:
        seen.extend(files)
        return {"fragments": "one"}

    result = reader.replace_files(uri, live, None, write=_write_one_file, metadata={"op": "compact"},
                                  app_transactions=[AppTransaction("lock/a", 3)], before_commit=describe)

    assert (result.version, result.files_added, result.files_removed, result.rows_added) == (5, 1, len(live), 2)
    assert txn.txn_reads == ["lock/a"]  # read before committing: a concurrent commit of lock/a fails this one
    assert txn.operation == "ManualUpdate"  # it removes files: not an append
    adds = [a["add"] for a in txn.committed if "add" in a]
    removes = [a["remove"] for a in txn.committed if "remove" in a]
    assert [a["txn"]["appId"] for a in txn.committed if "txn" in a] == ["lock/a"]
    assert sorted(r["path"] for r in removes) == live and not any(r["dataChange"] for r in removes)
    (add,) = adds
    assert add["dataChange"] is False and add["partitionValues"] == {"tenant_id": "a:b c"}
    assert add["path"].startswith("w-") and add["path"].endswith("/tenant_id=a%253Ab%20c/part-0.parquet")
    assert json.loads(add["stats"])["numRecords"] == 2
    # before_commit saw the new file as it lies on disk, before the commit.
    assert [f.path.split("/", 1)[1] for f in seen] == ["tenant_id=a%3Ab c/part-0.parquet"]
    meta = json.loads(txn.user_metadata or "{}")
    assert (meta["op"], meta["fragments"], meta[ROWS_ADDED]) == ("compact", "one", "2") and meta[COMMIT_ID]
    assert spark.conf.get("spark.databricks.delta.commitInfo.userMetadata", None) is None  # restored


def test_a_native_commit_refuses_or_skips_before_writing(
    store: TableStore, spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "refuse")
    _table(store, spark, uri)
    reader = NativeTableStore.for_log_reads(spark)
    txn = RecordingTransaction(store.version(uri), spark)
    _recording(reader, monkeypatch, txn)
    writes: list[str] = []

    with pytest.raises(CommitConflict, match="not live at version 4"):
        reader.replace_files(uri, ["gone.parquet"], None, write=writes.append)
    with pytest.raises(CommitConflict, match="all new or all replayed"):
        reader.replace_files(uri, [], None, write=writes.append,
                             app_transactions=[AppTransaction("writer/1", 6), AppTransaction("writer/2", 1)])
    replayed = reader.append(uri, _rows(spark, "d", 1), app_transactions=[AppTransaction("writer/1", 6),
                                                                         AppTransaction("writer/0", 1)])
    assert replayed.skipped and replayed.version == 4 and "already committed" in replayed.reason
    # One app transaction and no read version goes to Delta's writer (txnAppId/txnVersion); a replay never gets there.
    again = reader.append(uri, _rows(spark, "d", 1), app_transactions=[AppTransaction("writer/1", 5)])
    assert again.skipped and again.version == 4
    # Read at version 2, and writer/1 moved on at version 4 without reaching 7: someone else owns it now.
    with pytest.raises(CommitConflict, match=r"commit 4 \(after the version read\) carried \['writer/1'\]"):
        reader.replace_files(uri, [], None, app_transactions=[AppTransaction("writer/1", 7)], read_version=2)
    assert writes == [] and txn.committed == []


def test_a_lost_native_commit_is_a_conflict_and_its_files_are_deleted(
    store: TableStore, spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "lost")
    _table(store, spark, uri)
    reader = NativeTableStore.for_log_reads(spark)
    lost = py4j_error(*DELTA_LOST_RACE)
    _recording(reader, monkeypatch, RecordingTransaction(store.version(uri), spark, fail_with=lost))
    before = {p for p in Path(uri).iterdir()}

    with pytest.raises(CommitConflict, match="lost to a concurrent commit: Py4JJavaError: lost"):
        reader.replace_files(uri, [f.path for f in reader.files(uri)], None, write=_write_one_file)
    assert {p for p in Path(uri).iterdir()} == before  # the write directory is gone again


class _LandsThenFails:
    """Delta's own transaction, except that its commit raises once the commit file is in the log: how Delta reports
    a commit whose file landed before a later step of the call failed (or a retry that met its own commit)."""

    def __init__(self, txn: Any, error: Exception) -> None:
        self._txn, self._error = txn, error

    def __getattr__(self, name: str) -> Any:
        return getattr(self._txn, name)

    def commit(self, actions: Any, operation: Any) -> int:
        self._txn.commit(actions, operation)
        raise self._error


@pytest.mark.parametrize("error", ["lost race", "collection changed", "other"])
def test_a_commit_in_the_log_is_committed_and_keeps_its_files_whatever_delta_raised(
    store: TableStore, spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: str
) -> None:
    uri = str(tmp_path / "landed")
    _table(store, spark, uri)
    writer = NativeTableStore.for_log_reads(spark)
    raised = {"lost race": py4j_error(*DELTA_LOST_RACE),
              "collection changed": py4j_error(*DELTA_LOST_RACE[2:]),
              "other": RuntimeError("a step after the commit failed")}[error]
    delta_log = writer._delta.delta_log

    def landing_then_failing(table: str) -> Any:
        log = delta_log(table)
        return type("Log", (), {"startTransaction": lambda _s: _LandsThenFails(scala_call(log, "startTransaction"),
                                                                                raised)})()

    monkeypatch.setattr(writer._delta, "delta_log", landing_then_failing)
    before = store.version(uri)

    result = writer.append(uri, None, app_transactions=[AppTransaction("writer/3", 1)], write=_write_one_file)

    monkeypatch.undo()
    # Delta's reader over the files the commit named: they are all still there.
    assert sorted(r.event_id for r in store.read(uri).where("event_id like 'n-%'").collect()) == ["n-0", "n-1"]
    assert (result.version, result.skipped, result.rows_added) == (before + 1, False, 2)
    assert store.transaction_version(uri, "writer/3") == 1


def test_arrow_schema_works_on_pyspark_4_0s_signature(store: TableStore, spark: SparkSession, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """pyspark 4.0 (Databricks Runtime 17.3) has ``to_arrow_schema(schema, error_on_duplicated_field_names_in_struct)``
    and no ``timezone``; its timestamps are UTC microseconds already."""
    import pyarrow as pa
    import pyspark.sql.pandas.types as pandas_types

    real = pandas_types.to_arrow_schema

    def to_arrow_schema_4_0(schema: object, error_on_duplicated_field_names_in_struct: bool = False) -> pa.Schema:
        return real(schema, error_on_duplicated_field_names_in_struct=error_on_duplicated_field_names_in_struct,
                    timezone="UTC")

    uri = str(tmp_path / "arrow")
    store.create(uri, _rows(spark, "x", 1).schema, partition_by=["tenant_id"])
    expected = NativeTableStore.for_log_reads(spark).arrow_schema(uri)
    monkeypatch.setattr(pandas_types, "to_arrow_schema", to_arrow_schema_4_0)
    assert NativeTableStore.for_log_reads(spark).arrow_schema(uri) == expected
    assert expected.field("ts").type == pa.timestamp("us", tz="UTC")
