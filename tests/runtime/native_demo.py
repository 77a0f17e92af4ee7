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


def run_native_fused_ingest(spark: SparkSession, native_store: TableStore, test_config: LakeshardConfig,
                            tmp_path: Path) -> None:
    """Ingest a small zone on ``native_store`` with the fused hand-off (``lakeshard ingest``: router and writers in
    one process, no ``routed``), then deliver the zone again; check ``events`` against the ground truth (each
    event once) and that the second delivery wrote nothing."""
    import shutil

    from lakeshard.dedupe.writer import ShardWriter
    from lakeshard.routing import Router
    from lakeshard.synth import generate_landing

    landing = tmp_path / "landing"
    m = generate_landing(landing, SynthSpec(events=120, tenants=3, hours=0.5, seed=11, retry_rate=0.05,
                                            bad_rate=0.02))
    cfg = dataclasses.replace(
        test_config, lakehouse=str(tmp_path / "lakehouse"), landing=str(landing),
        spark=dataclasses.replace(test_config.spark, adapter="native"),
        routing=dataclasses.replace(test_config.routing, total_shards=SHARDS))

    def ingest() -> ShardWriter:
        writer = ShardWriter(spark, native_store, cfg, list(range(SHARDS)))
        Router(spark, native_store, cfg, handoff=writer, fused=True).run()
        writer.run()
        return writer

    first = ingest()
    assert any(r.routed_version < 0 for r in first.reports), "no batch went through the fused hand-off"
    for f in sorted(p for p in landing.rglob("part-*") if "_truth" not in p.parts)[:2]:  # redelivered under new names
        shutil.copy(f, f.with_name("again-" + f.name))
    second = ingest()
    assert sum(r.written for r in second.reports) == 0, second.reports
    check = check_against_truth(spark, native_store.read(cfg.table_uri(EVENTS)), cfg.landing)
    assert (check.missing, check.duplicate_rows, check.unexpected) == (0, 0, 0), check
    assert check.rows == m.unique_events
