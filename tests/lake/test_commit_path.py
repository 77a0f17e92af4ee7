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
