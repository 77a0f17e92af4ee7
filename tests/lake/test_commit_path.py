"""Which way the native adapter commits on a classic session (:func:`lakeshard.lake.native.jvm.commit_path`): Delta's
internal transaction when this Delta has every method lakeshard calls, its public writer otherwise, and the store's
contract on real Delta commits either way.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from lakeshard.config import LakeshardConfig, load_config
from lakeshard.errors import UnsupportedByAdapter
from lakeshard.lake import AppTransaction, TableStore, native_commit_path
from lakeshard.lake.native import NativeTableStore, jvm
from lakeshard.lake.native.jvm import INTERNAL_API, INTERNAL_PATH, PUBLIC_PATH, JvmMethod

pytestmark = pytest.mark.delta_jvm

ROWS = StructType([StructField("tenant_id", StringType(), False), StructField("n", IntegerType(), True)])
# A method no Delta has: the probe must find it missing, exactly as it would a renamed or re-typed one.
ABSENT = JvmMethod("{delta}.OptimisticTransaction", "commit", ("{delta}.DeltaOperations$Operation",), "long")


def _rows(spark: SparkSession, tenant: str, n: int, start: int = 0):
    return spark.createDataFrame([(tenant, start + i) for i in range(n)], ROWS).coalesce(1)


def test_deltas_internal_api_is_found_with_every_signature_lakeshard_calls(native_store: TableStore,
                                                                          spark: SparkSession) -> None:
    path = native_commit_path(spark)
    assert path.internal, path.reason
    assert path.name == INTERNAL_PATH and f"the {len(INTERNAL_API)} methods" in path.reason
    assert native_commit_path(spark) is path  # found once per session
    assert native_store.writes_in_process


def test_doctor_names_the_commit_path_it_found(native_store: TableStore, spark: SparkSession,
                                               test_config: LakeshardConfig) -> None:
    from lakeshard.app.cli import _doctor_session
    from lakeshard.runtime import RuntimeKind

    rows: list[tuple[str, str]] = []
    cfg = load_config(overrides={"spark": {**vars(test_config.spark), "adapter": "native"}})
    assert _doctor_session(cfg, RuntimeKind.LOCAL, rows)
    assert dict(rows)["commit path"].startswith(f"{INTERNAL_PATH} - Delta's internal transaction API in ")


def test_a_delta_without_a_method_lakeshard_calls_commits_through_the_public_writer(
    native_store: TableStore, spark: SparkSession, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(jvm, "INTERNAL_API", (*INTERNAL_API, ABSENT))
    store = NativeTableStore(spark)
    path = store.commit_path
    assert path.name == PUBLIC_PATH and not store.writes_in_process
    assert "OptimisticTransaction.commit(org.apache.spark.sql.delta.DeltaOperations$Operation)" in path.reason
    assert "it has [" in path.reason  # the overloads this Delta does have, to compare

    # The contract on the public path, on real Delta commits: appends with progress marks, a replay, a swap of whole
    # partitions, a checkpoint, and what needs the internal path refused with the reason.
    uri = str(tmp_path / "public")
    store.create(uri, ROWS, partition_by=["tenant_id"])
    first = store.append(uri, _rows(spark, "a", 3), app_transactions=[AppTransaction("w/1", 1)])
    again = store.append(uri, _rows(spark, "a", 3), app_transactions=[AppTransaction("w/1", 1)])
    store.append(uri, _rows(spark, "b", 2), app_transactions=[AppTransaction("w/2", 1)])
    assert not first.skipped and first.rows_added == 3 and again.skipped
    assert store.transaction_versions(uri, ["w/1", "w/2"]) == {"w/1": 1, "w/2": 1}
    a_files = [f.path for f in store.files(uri) if f.partition_values["tenant_id"] == "a"]
    swapped = store.replace_files(uri, a_files, _rows(spark, "a", 3), read_version=store.version(uri))
    assert swapped.files_removed == len(a_files) and store.read(uri).count() == 5
    assert store.history(uri, limit=1)[0].operation == "WRITE"  # Delta's public writer, not a Manual Update
    with pytest.raises(UnsupportedByAdapter, match=r"OptimisticTransaction\.commit"):
        store.append(uri, _rows(spark, "c", 1),
                     app_transactions=[AppTransaction("w/3", 1), AppTransaction("w/4", 1)])
    assert store.create_checkpoint(uri) in store.checkpoint_versions(uri)
    assert sorted(r.n for r in store.read(uri).collect()) == [0, 0, 1, 1, 2]
    # The probe for the real list of methods is unchanged by the forced one.
    monkeypatch.undo()
    assert native_commit_path(spark).internal


@pytest.mark.parametrize("partitioned", [True, False])
def test_arrow_reads_through_spark_give_each_group_its_rows_in_one_read(
    native_store: TableStore, spark: SparkSession, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    partitioned: bool
) -> None:
    """Where this process cannot read the files itself (the public path here; Spark Connect), groups of files are
    read through Spark: one read for all of them (a read per group was a request each under Connect), split by
    file: a file in two groups is in both, an empty group is empty, a filter applies per group."""
    import pyarrow.compute as pc

    from lakeshard.lake.native import adapter

    monkeypatch.setattr(jvm, "INTERNAL_API", (*INTERNAL_API, ABSENT))
    store = NativeTableStore(spark)
    assert not store.writes_in_process
    uri = str(tmp_path / "groups")
    store.create(uri, ROWS, partition_by=["tenant_id"] if partitioned else [])
    for tenant, n, start in (("a", 3, 0), ("a", 2, 3), ("b", 4, 0), ("c", 1, 0)):
        store.append(uri, _rows(spark, tenant, n, start))
    files = store.files(uri)
    by_rows = {f.num_records: f for f in files}  # 3, 2, 4, 1 rows: one file each
    reads: list[int] = []
    real = adapter.read_data_files
    monkeypatch.setattr(adapter, "read_data_files", lambda *a, **k: (reads.append(len(a[4])), real(*a, **k))[1])
    groups = {"first": [by_rows[3], by_rows[4]], "again": [by_rows[4]], "none": [], "last": [by_rows[2], by_rows[1]]}
    read = store.read_arrow_groups(uri, groups, ["tenant_id", "n"])
    assert reads == [4]  # one read of the four files
    got = {k: sorted(zip(t.column("tenant_id").to_pylist(), t.column("n").to_pylist(), strict=True))
           for k, t in read.items()}
    assert got == {"first": [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("b", 2), ("b", 3)],
                   "again": [("b", 0), ("b", 1), ("b", 2), ("b", 3)], "none": [],
                   "last": [("a", 3), ("a", 4), ("c", 0)]}
    filtered = store.read_arrow_groups(uri, groups, ["n"], where=pc.field("n") >= 2)
    assert {k: sorted(t.column("n").to_pylist()) for k, t in filtered.items()} == {
        "first": [2, 2, 3], "again": [2, 3], "none": [], "last": [3, 4]}
    assert filtered["none"].schema == filtered["first"].schema


def test_fsck_repair_on_the_public_writer_refuses_before_it_records_anything(
    native_store: TableStore, spark: SparkSession, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Under Spark Connect (the public writer) the repair's swap of part of a partition's files is refused; it used
    # to record the damaged file in fsck_repairs first, so the record named a file still live and refill acted on it.
    from lakeshard.maintenance import check_table, repair_table

    monkeypatch.setattr(jvm, "INTERNAL_API", (*INTERNAL_API, ABSENT))
    store = NativeTableStore(spark)
    uri, record = str(tmp_path / "t"), str(tmp_path / "fsck_repairs")
    store.create(uri, ROWS, partition_by=["tenant_id"])
    store.append(uri, _rows(spark, "a", 3))
    store.append(uri, _rows(spark, "a", 2, start=3))
    cut = tmp_path / "t" / store.files(uri)[0].path
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    check = check_table(store, uri)
    assert len(check.damaged) == 1
    with pytest.raises(UnsupportedByAdapter, match=r"fsck --repair .* from a classic session.*nothing was changed"):
        repair_table(store, check, record)
    assert not (tmp_path / "fsck_repairs").exists()  # nothing recorded
    assert len(check_table(store, uri).damaged) == 1 and store.version(uri) == check.version
