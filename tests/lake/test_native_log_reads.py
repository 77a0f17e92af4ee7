"""The native adapter's log reads (Hadoop filesystem through py4j + protocol replay) on real Delta tables.

They need no Delta JVM, so they run here: tables written by the embedded adapter (delta-rs commits) are read
back through :meth:`NativeTableStore.for_log_reads`, and every answer must equal the embedded adapter's.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakeshard.errors import EnvironmentProblem, TableNotFound, TableStoreError
from lakeshard.lake import AppTransaction, TableStore
from lakeshard.lake.native import NativeTableStore
from lakeshard.runtime import jvm_has_class

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


def test_a_log_reader_refuses_what_needs_delta_itself(reader: NativeTableStore, spark: SparkSession,
                                                      tmp_path: Path) -> None:
    assert jvm_has_class(spark.sparkContext._jvm, "org.apache.spark.sql.SparkSession")
    assert not jvm_has_class(spark.sparkContext._jvm, "io.delta.tables.DeltaTable")
    with pytest.raises(EnvironmentProblem, match="DeltaLog class is in none of"):
        reader.create_checkpoint(str(tmp_path))
