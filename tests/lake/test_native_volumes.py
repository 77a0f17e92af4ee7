"""The native adapter on ``dbfs:`` paths, as a Databricks runtime reports the files of a Unity Catalog volume.

On Databricks ``/Volumes/c/s/v/x`` is qualified by Spark as ``dbfs:/Volumes/c/s/v/x`` (``_metadata.file_path``,
``inputFiles()``) while Python reads the same bytes through the FUSE path ``/Volumes/c/s/v/x``. The test JVMs
serve ``dbfs:`` the same way over this machine's root (``tests/conftest.py``, ``TEST_JVM_DEFAULTS``): a table
created, appended to, swapped, listed and read at ``dbfs:/<tmp>/t`` must give what the same calls give at a
plain local path, with Delta's own reader and delta-rs (through the local path) agreeing. Where Python itself opens
a ``dbfs:`` file (footer checks) it uses the runtime's FUSE mounts, which exist only on Databricks; that mapping is
checked in ``test_files.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from lakeshard.lake import AppTransaction, TableStore

SCHEMA = StructType([
    StructField("tenant_id", StringType(), False),
    StructField("hour", IntegerType(), False),
    StructField("n", LongType(), False),
])


def _rows(spark: SparkSession, tenant: str, hour: int, ns: range):
    return spark.createDataFrame([(tenant, hour, n) for n in ns], SCHEMA).coalesce(1)


@pytest.fixture
def on_dbfs(native_store: TableStore, tmp_path: Path) -> tuple[str, Path]:
    """Return a table location as a runtime spells it (``dbfs:/...``) and the local folder behind it."""
    return f"dbfs:{tmp_path}/events", tmp_path / "events"


def test_commits_listings_and_reads_at_a_dbfs_path(native_store: TableStore, spark: SparkSession,
                                                     on_dbfs: tuple[str, Path]) -> None:
    uri, local = on_dbfs
    native_store.create(uri, SCHEMA, partition_by=["tenant_id", "hour"])
    native_store.append(uri, _rows(spark, "acme", 7, range(5)), app_transactions=[AppTransaction("writer/3", 11)])
    skipped = native_store.append(uri, _rows(spark, "acme", 7, range(5)),
                                  app_transactions=[AppTransaction("writer/3", 11)])
    native_store.append(uri, _rows(spark, "b c", 8, range(100, 103)))

    assert (local / "_delta_log").is_dir()  # the bytes are where the local path says
    assert skipped.skipped and native_store.version(uri) == 2
    assert native_store.transaction_version(uri, "writer/3") == 11
    files = native_store.files(uri)
    assert sorted(f.num_records for f in files) == [3, 5]
    # The files' rows, read by Spark through the dbfs: scheme and matched back to the log's paths.
    by_file = native_store.read_files(uri, files)
    assert sorted(r.n for r in by_file.collect()) == [*range(5), *range(100, 103)]
    arrow = native_store.read_arrow(uri, files, columns=["n"])
    assert sorted(arrow.column("n").to_pylist()) == [*range(5), *range(100, 103)]
    assert {(r.tenant_id, r.n) for r in native_store.read(uri).collect()} == \
        {("acme", n) for n in range(5)} | {("b c", n) for n in range(100, 103)}
    # delta-rs, through the local path, sees the same table.
    assert DeltaTable(str(local)).version() == 2
    assert sorted(DeltaTable(str(local)).to_pyarrow_table().column("n").to_pylist()) == \
        [*range(5), *range(100, 103)]


def test_a_swap_at_a_dbfs_path_replaces_exactly_its_files(native_store: TableStore, spark: SparkSession,
                                                           on_dbfs: tuple[str, Path]) -> None:
    uri, local = on_dbfs
    native_store.create(uri, SCHEMA, partition_by=["tenant_id", "hour"])
    for start in (0, 10):
        native_store.append(uri, _rows(spark, "acme", 1, range(start, start + 4)))
    native_store.append(uri, _rows(spark, "zed", 2, range(50, 52)))
    acme = [f for f in native_store.files(uri) if f.partition_values["tenant_id"] == "acme"]
    assert len(acme) == 2

    merged = native_store.read_files(uri, acme).coalesce(1)
    result = native_store.replace_files(uri, [f.path for f in acme], merged, data_change=False)

    after = native_store.files(uri)
    assert result.files_removed == 2 and result.files_added == 1
    assert sorted(f.num_records for f in after) == [2, 8]
    assert sorted(DeltaTable(str(local)).to_pyarrow_table().column("n").to_pylist()) == \
        [*range(4), *range(10, 14), 50, 51]


def test_spark_reports_the_files_of_a_dbfs_table_as_a_runtime_does(native_store: TableStore, spark: SparkSession,
                                                                    on_dbfs: tuple[str, Path]) -> None:
    uri, local = on_dbfs
    native_store.create(uri, SCHEMA, partition_by=["tenant_id", "hour"])
    native_store.append(uri, _rows(spark, "acme", 4, range(2)))
    reported = {r.p for r in native_store.read(uri).selectExpr("_metadata.file_path AS p").collect()}
    assert reported and all(p.startswith(f"dbfs:{local}/") for p in reported)
