"""The small demo with every batch through Spark (``routing.arrow_max_bytes = 0``, ``dedupe.arrow_max_bytes = 0``),
the small demo on Delta's engine (the native adapter), and ``lakeshard doctor`` naming the runtime.

Not collected by default: ``tests/runtime/test_connect.py`` runs it under a Spark Connect session (as the
``spark`` fixture is there); run alone, it runs on the classic session.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
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


@pytest.mark.delta_jvm
def test_the_small_demo_passes_on_delta_engine(spark: SparkSession, native_store: TableStore,
                                               test_config: LakeshardConfig, tmp_path: Path) -> None:
    from native_demo import run_native_demo

    report = run_native_demo(spark, native_store, test_config, tmp_path)
    assert report.runtime == runtime_name(spark)


@pytest.mark.delta_jvm
def test_a_fused_ingest_writes_each_event_once_on_delta_engine(spark: SparkSession, native_store: TableStore,
                                                               test_config: LakeshardConfig, tmp_path: Path) -> None:
    """``lakeshard ingest``'s fused hand-off under Spark Connect: a fused batch's rows reach Delta's public writer as
    a DataFrame (no py4j to commit files this process wrote)."""
    from native_demo import run_native_fused_ingest

    run_native_fused_ingest(spark, native_store, test_config, tmp_path)


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


@pytest.mark.delta_jvm
def test_shard_writers_on_delta_engine_commit_shard_by_shard_and_a_close_is_fenced_without_py4j(
    spark: SparkSession, native_store: TableStore, tmp_path: Path
) -> None:
    """On Delta's engine each shard's events are one commit carrying its ``writer/<shard>`` alone, through the
    public writer: no py4j under Spark Connect. A bucket closes there too: the fence is a metadata change (SQL),
    and a writer's rows built before a close are refused by the check of bucket states inside its write."""
    from datetime import UTC, datetime, timedelta

    from lakeshard.buckets import Completionist
    from lakeshard.buckets.guard import guard_open_buckets, refused_by_guard
    from lakeshard.config import load_config
    from lakeshard.dedupe.writer import EVENTS, ID_INDEX, ShardWriter
    from lakeshard.lake import AppTransaction
    from lakeshard.routing.router import Router
    from lakeshard.synth import generate_landing
    from lakeshard.synth.verify import check_against_truth
    from lakeshard.tables import BUCKETS, writer_app_id

    landing = tmp_path / "landing"
    generate_landing(landing, SynthSpec(events=300, tenants=3, hours=0.2, seed=11, retry_rate=0.05,
                                        redelivered_files=0.1, bad_rate=0.0))
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": str(landing),
                                 "routing": {"total_shards": 2, "default_shard_count": 2}}, env={})
    Router(spark, native_store, cfg).run()
    writer = ShardWriter(spark, native_store, cfg, [0, 1])
    writer.ensure_tables()
    events = cfg.table_uri(EVENTS)
    before = native_store.version(events)
    reports = writer.run()
    assert reports and not any(r.conflict for r in reports)
    commits = native_store.log_entries(events, start=before + 1)
    assert all(len(e.app_transactions) == 1 for e in commits)
    assert {t.app_id for e in commits for t in e.app_transactions} == {writer_app_id(0), writer_app_id(1)}
    check = check_against_truth(spark, native_store.read(events), str(landing))
    assert check.exactly_once, check
    assert native_store.read(cfg.table_uri(ID_INDEX)).count() == native_store.read(events).count()

    # Rows built while their bucket is open, then the close: the write runs after it and is refused.
    buckets = cfg.table_uri(BUCKETS)
    one = native_store.read(events).limit(1).collect()[0]
    late = guard_open_buckets(native_store, buckets, native_store.read(events).where(
        f"tenant_id = '{one['tenant_id']}' AND hour = '{one['hour']}'").limit(1))
    closer = Completionist(spark, native_store, cfg, clock=lambda: datetime.now(UTC) + timedelta(days=2))
    report = closer.run()
    assert (one["tenant_id"], one["hour"]) in {(s.tenant_id, s.hour) for s in report.closed}
    assert closer.verify() == []
    fences = [e for e in native_store.log_entries(events, start=before + 1) if e.metadata_changed]
    assert fences and all(not e.changes and not e.app_transactions for e in fences)
    at = native_store.version(events)
    with pytest.raises(Exception) as refused:
        native_store.append(events, late, app_transactions=[AppTransaction("writer/9", 1)], read_version=at)
    assert refused_by_guard(refused.value, events, at, ("writer/9",)) is not None
    assert native_store.version(events) == at and native_store.read(buckets).where("state = 'closed'").count()


@pytest.mark.delta_jvm
def test_a_fused_ingest_in_requests_of_a_few_kib_writes_each_event_once(spark: SparkSession,
                                                                        test_config: LakeshardConfig,
                                                                        tmp_path: Path) -> None:
    """Under Spark Connect no request carries more than ``request_bytes`` of rows: a batch larger than that is
    staged in chunks inside the table's folder and committed in one commit from there, each event once; staged
    files are in no commit. On a classic session the rows are written by this process and nothing is staged."""
    from native_demo import run_native_fused_ingest

    from lakeshard.lake.native import NativeTableStore
    from lakeshard.lake.native.connect import STAGE_PREFIX, ConnectLimits

    limit = 4 * 1024
    store = NativeTableStore(spark, ConnectLimits(request_bytes=limit))
    run_native_fused_ingest(spark, store, test_config, tmp_path)
    events = tmp_path / "lakehouse" / "events"
    staged = [f for d in events.glob(f"{STAGE_PREFIX}*") for f in d.glob("part-*.parquet")]
    live = {f.path for f in store.files(str(events))}
    if is_spark_connect(spark):
        assert len(staged) >= 2, "no write was split into bounded requests"
        assert all(f.stat().st_size < 16 * limit for f in staged)  # a chunk's rows, not a batch's
    else:
        assert staged == []
    assert not any(p.startswith(STAGE_PREFIX) for p in live)
