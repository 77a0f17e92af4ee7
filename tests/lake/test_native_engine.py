"""The native adapter on Delta's own engine (``native_store``: classic here, and under Spark Connect in
``tests/runtime/test_connect.py``): the table features lakeshard cannot honour are off on the tables it creates,
and an existing table that has one is refused with the feature named and how to switch it off."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from lakeshard.errors import UnsupportedByAdapter
from lakeshard.lake import TableStore

pytestmark = pytest.mark.delta_jvm

SCHEMA = StructType([StructField("tenant_id", StringType(), False), StructField("n", LongType(), True)])


def _properties(spark: SparkSession, uri: str) -> dict[str, str]:
    return {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{uri}`").collect()}


def test_a_created_table_has_the_features_lakeshard_cannot_honour_off(native_store: TableStore,
                                                                     spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    native_store.create(uri, SCHEMA, partition_by=["tenant_id"])
    props = _properties(spark, uri)
    for key in ("delta.enableDeletionVectors", "delta.enableRowTracking", "delta.enableTypeWidening",
                "delta.autoOptimize.optimizeWrite", "delta.autoOptimize.autoCompact"):
        assert props.get(key) == "false", (key, props)
    native_store.append(uri, spark.createDataFrame([("a", 1)], SCHEMA))
    assert native_store.read(uri).count() == 1


@pytest.mark.parametrize(("setting", "named"), [
    ("delta.autoOptimize.autoCompact", "auto compaction"),
    ("delta.enableRowTracking", "row tracking"),
])
def test_an_existing_table_with_such_a_feature_is_refused_saying_how_to_switch_it_off(
        native_store: TableStore, spark: SparkSession, tmp_path: Path, setting: str, named: str) -> None:
    uri = str(tmp_path / "theirs")
    spark.sql(f"CREATE TABLE delta.`{uri}` (tenant_id string, n bigint) USING delta "
              f"TBLPROPERTIES ('{setting}' = 'true')").collect()
    with pytest.raises(UnsupportedByAdapter, match=named) as refused:
        native_store.append(uri, spark.createDataFrame([("a", 1)], SCHEMA))
    assert f"'{setting}' = 'false'" in str(refused.value) and uri in str(refused.value)
    spark.sql(f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES ('{setting}' = 'false')").collect()
    assert native_store.append(uri, spark.createDataFrame([("a", 1)], SCHEMA)).rows_added == 1
