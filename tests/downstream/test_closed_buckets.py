"""The downstream Lakeflow pipeline: its dataset functions on small frames, and the whole pipeline run by Spark's
``spark-pipelines`` over Delta on the demo's lakehouse, checked per closed bucket against the events table."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from deltalake import DeltaTable  # an independent reader of what the pipeline and lakeshard wrote

import lakeshard
from lakeshard.config import LakeshardConfig
from lakeshard.downstream import (
    EVENTS_TABLE_KEY,
    SUMMARY_COLUMNS,
    closed_bucket_summary,
    closed_buckets,
    configured_table,
    local_command,
    write_local_spec,
)
from lakeshard.errors import ConfigError
from lakeshard.tables import BUCKETS, EVENTS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession



def test_only_closed_buckets_are_summarised(spark: SparkSession) -> None:
    t = datetime(2026, 1, 1, 10, 5)
    events = spark.createDataFrame(
        [("a", "2026-01-01T10", t, 10, False), ("a", "2026-01-01T10", t.replace(minute=50), 30, True),
         ("a", "2026-01-01T11", t, 5, False), ("b", "2026-01-01T10", t, 7, False)],
        "tenant_id string, hour string, ts timestamp, size_bytes int, late boolean")
    buckets = spark.createDataFrame(
        [("a", "2026-01-01T10", "closing"), ("a", "2026-01-01T10", "closed"), ("a", "2026-01-01T11", "open"),
         ("b", "2026-01-01T10", "closing")], "tenant_id string, hour string, state string")
    rows = closed_bucket_summary(events, closed_buckets(buckets)).collect()
    assert [tuple(r) for r in rows] == [("a", "2026-01-01T10", 2, 40, 1, t, t.replace(minute=50))]
    assert tuple(rows[0].asDict()) == SUMMARY_COLUMNS


def test_a_source_the_configuration_does_not_name_is_refused(spark: SparkSession) -> None:
    with pytest.raises(ConfigError, match=r"^pipeline configuration lakeshard.nothing_here: expected the name"):
        configured_table(spark, "lakeshard.nothing_here")


def test_the_local_spec_names_the_lakehouse_tables_and_carries_the_sources(tmp_path: Path) -> None:
    spec = write_local_spec(tmp_path / "run", "/data/lh/")
    assert f'"{EVENTS_TABLE_KEY}": "/data/lh/{EVENTS}"' in spec.read_text()
    assert (tmp_path / "run" / "transformations" / "closed_buckets.py").is_file()


@pytest.mark.delta_jvm
@pytest.mark.usefixtures("native_store")  # skips (fails in CI) without Delta's engine on the session
@pytest.mark.slow
def test_spark_pipelines_summarises_each_closed_bucket_of_the_demo(
    spark: SparkSession, test_config: LakeshardConfig, demo_lakehouse: LakeshardConfig, tmp_path: Path,
) -> None:
    spec = write_local_spec(tmp_path / "downstream", demo_lakehouse.lakehouse)
    command, env = local_command(spec, test_config)
    library = str(Path(lakeshard.__file__).resolve().parents[1])
    run = subprocess.run(command, cwd=spec.parent, capture_output=True, text=True, timeout=900,
                         env={**os.environ, **env, "PYTHONPATH": library})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    events = DeltaTable(demo_lakehouse.table_uri(EVENTS)).to_pyarrow_table(columns=["tenant_id", "hour"])
    states = DeltaTable(demo_lakehouse.table_uri(BUCKETS)).to_pyarrow_table(columns=["tenant_id", "hour", "state"])
    closed = {(r["tenant_id"], r["hour"]) for r in states.to_pylist() if r["state"] == "closed"}
    per_bucket = Counter((r["tenant_id"], r["hour"]) for r in events.to_pylist())
    assert closed, "the demo closes its buckets; without closed ones this test would check nothing"
    summary = DeltaTable(str(spec.parent / "warehouse" / "closed_bucket_events")).to_pyarrow_table()
    assert {(r["tenant_id"], r["hour"]): r["events"] for r in summary.to_pylist()} == {
        b: n for b, n in per_bucket.items() if b in closed}
    feed = DeltaTable(str(spec.parent / "warehouse" / "events_feed")).to_pyarrow_table(columns=["tenant_id"])
    assert feed.num_rows == events.num_rows
