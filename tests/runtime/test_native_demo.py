"""The small demo and a fused ingest on Delta's own engine, on the tests' classic session (under Spark Connect:
connect_suite.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from native_demo import run_native_demo, run_native_fused_ingest
from pyspark.sql import SparkSession

from lakeshard.config import LakeshardConfig
from lakeshard.lake import TableStore

pytestmark = [pytest.mark.delta_jvm, pytest.mark.slow]


def test_the_small_demo_passes_on_delta_engine(spark: SparkSession, native_store: TableStore,
                                               test_config: LakeshardConfig, tmp_path: Path) -> None:
    report = run_native_demo(spark, native_store, test_config, tmp_path)
    assert report.runtime == "classic"


def test_a_fused_ingest_writes_each_event_once_on_delta_engine(spark: SparkSession, native_store: TableStore,
                                                               test_config: LakeshardConfig, tmp_path: Path) -> None:
    run_native_fused_ingest(spark, native_store, test_config, tmp_path)
