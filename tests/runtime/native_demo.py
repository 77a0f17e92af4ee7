"""The small demo on Delta's own engine (the native adapter), shared by the classic test
(``test_native_demo.py``) and the one under Spark Connect (``connect_suite.py``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pyspark.sql import SparkSession

from lakeshard.app.demo import DemoReport, run_demo
from lakeshard.config import LakeshardConfig
from lakeshard.lake import TableStore
from lakeshard.synth import SynthSpec
from lakeshard.synth.verify import check_against_truth
from lakeshard.tables import EVENTS

__all__ = ["run_native_demo"]

# Few shards: on Delta's engine every shard with progress makes an `events` and an `event_ids` commit per step.
SHARDS = 2


def run_native_demo(spark: SparkSession, native_store: TableStore, test_config: LakeshardConfig,
                    tmp_path: Path) -> DemoReport:
    """Run the small demo on ``native_store`` and check ``events`` against the ground truth as Delta reads it
    and as delta-rs reads it (the same keys, each once); return the demo's report."""
    import pyarrow as pa
    from deltalake import DeltaTable

    cfg = dataclasses.replace(
        test_config, lakehouse=str(tmp_path / "lakehouse"), landing=str(tmp_path / "landing"),
        spark=dataclasses.replace(test_config.spark, adapter="native"),
        routing=dataclasses.replace(test_config.routing, total_shards=SHARDS))
    report = run_demo(spark, native_store, cfg, SynthSpec(events=300, tenants=4, hours=0.5, seed=3),
                      out=tmp_path / "out", say=lambda _: None, progress=False)
    print("native demo seconds:", {k.strip(): round(v, 1) for k, v in report.seconds.items()})
    assert report.ok, report.render()
    assert "result: all checks passed" in report.render()
    uri = cfg.table_uri(EVENTS)
    by_delta = native_store.read(uri)
    truth = check_against_truth(spark, by_delta, cfg.landing)
    assert truth.exactly_once, truth
    keys = ["tenant_id", "event_id", "ts"]
    delta_keys = by_delta.select(*keys).toArrow().cast(pa.schema([("tenant_id", pa.string()),
                                                                   ("event_id", pa.string()),
                                                                   ("ts", pa.timestamp("us", tz="UTC"))]))
    rs_keys = DeltaTable(uri).to_pyarrow_table(columns=keys).cast(delta_keys.schema)
    assert rs_keys.num_rows == delta_keys.num_rows == truth.truth_events
    assert sorted(rs_keys.to_pylist(), key=str) == sorted(delta_keys.to_pylist(), key=str)
    return report
