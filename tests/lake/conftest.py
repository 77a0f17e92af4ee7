"""The TableStore contract runs against every adapter: ``table_store`` is the embedded store, then the native one.

The native parameter carries the ``delta_jvm`` marker (``pytest -m delta_jvm`` selects it) and is skipped, with
the reason, when the session cannot load Delta's JVM classes. To run it, start the tests with delta-spark's
jars on a local session: ``LAKESHARD_SPARK_JARS=/path/delta-spark_2.13-<v>.jar,/path/delta-storage-<v>.jar``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakeshard.lake import TableStore

NO_DELTA_JVM = (
    "Delta Lake's JVM classes (io.delta.tables.DeltaTable) are not on this Spark session's classpath: the delta-spark "
    "pip package ships only the Python API, its jars come from Maven, which this environment cannot reach "
    "(set LAKESHARD_SPARK_JARS to local delta-spark and delta-storage jars to run these)"
)


@pytest.fixture(params=["embedded", pytest.param("native", marks=pytest.mark.delta_jvm)])
def table_store(request: pytest.FixtureRequest, spark: SparkSession, store: TableStore) -> TableStore:
    """Return each TableStore adapter over the shared session; the native one only where Delta's classes load."""
    if request.param == "embedded":
        return store
    from lakeshard.lake.native import NativeTableStore
    from lakeshard.lake.native.jvm import has_delta_jvm

    if not has_delta_jvm(spark):
        pytest.skip(NO_DELTA_JVM)
    return NativeTableStore(spark)
