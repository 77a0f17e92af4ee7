"""The small demo with every batch through Spark (``routing.arrow_max_bytes = 0``, ``dedupe.arrow_max_bytes = 0``),
and ``lakeshard doctor`` naming the runtime.

Not collected by default: ``tests/runtime/test_connect.py`` runs it under a Spark Connect session (as the
``spark`` fixture is there); run alone, it runs on the classic session.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from pyspark.sql import SparkSession

from lakeshard.app.demo import run_demo
from lakeshard.config import LakeshardConfig
from lakeshard.lake import TableStore
from lakeshard.runtime import is_spark_connect, runtime_name
from lakeshard.synth import SynthSpec


def test_the_small_demo_with_every_batch_through_spark(spark: SparkSession, store: TableStore,
                                                       test_config: LakeshardConfig, tmp_path: Path) -> None:
    assert is_spark_connect(spark) == bool(os.environ.get("LAKESHARD_TEST_SPARK_REMOTE"))
    cfg = dataclasses.replace(
        test_config, lakehouse=str(tmp_path / "lakehouse"), landing=str(tmp_path / "landing"),
        routing=dataclasses.replace(test_config.routing, arrow_max_bytes=0),
        dedupe=dataclasses.replace(test_config.dedupe, arrow_max_bytes=0))
    report = run_demo(spark, store, cfg, SynthSpec(events=300, tenants=4, hours=0.5, seed=3), out=tmp_path / "out",
                      say=lambda _: None, progress=False)
    assert report.ok, report.render()
    assert report.runtime == runtime_name(spark) and f"runtime:   {report.runtime}" in report.render()


def test_doctor_names_the_runtime_and_proves_a_round_trip(spark: SparkSession, test_config: LakeshardConfig) -> None:
    from lakeshard.app.cli import _doctor_session
    from lakeshard.runtime import detect_runtime

    remote = os.environ.get("LAKESHARD_TEST_SPARK_REMOTE", "")
    cfg = dataclasses.replace(test_config, spark=dataclasses.replace(test_config.spark, remote=remote))
    rows: list[tuple[str, str]] = []
    assert _doctor_session(cfg, detect_runtime(cfg), rows)
    found = dict(rows)
    assert found["runtime"] == ("Spark Connect" if remote else "classic") and found["delta round trip"] == "ok"


def test_an_arrow_table_with_no_rows_or_no_chunk_becomes_a_dataframe_of_its_columns(spark: SparkSession) -> None:
    import pyarrow as pa

    from lakeshard.runtime import arrow_dataframe

    schema = pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("tenant_id", pa.string()),
                        ("attributes", pa.map_(pa.string(), pa.string()))])
    one = pa.table({"ts": pa.array([1_700_000_000_000_000], schema.field("ts").type), "tenant_id": ["t"],
                    "attributes": pa.array([[("k", "v")]], schema.field("attributes").type)}, schema=schema)
    for table in (one, one.slice(0, 0), pa.Table.from_batches([], schema=schema)):
        df = arrow_dataframe(spark, table)
        assert df.columns == schema.names
        assert [f.dataType.simpleString() for f in df.schema] == ["timestamp", "string", "map<string,string>"]
        assert df.count() == table.num_rows
        assert df.toArrow().column("tenant_id").to_pylist() == table.column("tenant_id").to_pylist()
