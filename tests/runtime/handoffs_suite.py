"""Both hand-offs on Delta's engine, the way a user's jobs run them: the fused one (``lakeshard ingest``: router and
writers in one process) and the two-job one (``route``, then the shard writers reading ``routed``), each with a
crash replayed, files redelivered under new names, then buckets closed and compacted; ``events`` holds each true
event once throughout and no closed bucket changes.

Not collected by default: the environment matrix runs it (``scripts/matrix``), e.g. through databricks-connect
against a Spark Connect server with Delta's jars (``LAKESHARD_TEST_SPARK_REMOTE``); run alone it runs on the
classic session.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakeshard.config import LakeshardConfig
from lakeshard.lake import TableStore
from lakeshard.synth import SynthSpec, generate_landing
from lakeshard.synth.verify import check_against_truth
from lakeshard.tables import EVENTS, LANDING_BATCHES

SHARDS = 2


class Crash(BaseException):
    """The process dying at a commit (a BaseException: nothing in lakeshard catches it, as nothing catches a kill)."""


def _exactly_once(spark: SparkSession, store: TableStore, cfg: LakeshardConfig, events: int) -> None:
    check = check_against_truth(spark, store.read(cfg.table_uri(EVENTS)), cfg.landing)
    assert (check.missing, check.duplicate_rows, check.unexpected) == (0, 0, 0), check
    assert check.rows == events


@pytest.mark.delta_jvm
@pytest.mark.parametrize("handoff", ["fused", "two-job"])
def test_each_handoff_replays_a_crash_closes_and_compacts_exactly_once_on_delta_engine(
    spark: SparkSession, native_store: TableStore, test_config: LakeshardConfig, tmp_path: Path, handoff: str
) -> None:
    from lakeshard.buckets import Completionist
    from lakeshard.dedupe.writer import ShardWriter
    from lakeshard.pipelines import run_pipeline
    from lakeshard.routing import Router

    landing = tmp_path / "landing"
    spec = SynthSpec(events=240, tenants=3, hours=1, seed=23, retry_rate=0.05, bad_rate=0.02)
    truth = generate_landing(landing, spec)
    cfg = dataclasses.replace(
        test_config, lakehouse=str(tmp_path / "lakehouse"), landing=str(landing),
        spark=dataclasses.replace(test_config.spark, adapter="native"),
        routing=dataclasses.replace(test_config.routing, total_shards=SHARDS))
    fused = "fused" if handoff == "fused" else ""
    small = {"route": {"batch_files": 4}}  # several batches, so the crash leaves some for the replay

    # 1. A run that dies in its second batch: after the batch's plan, before its rows are committed.
    def die_in_batch_two(table: str, batch: int) -> None:
        if table != LANDING_BATCHES and batch == 2:
            raise Crash(f"killed before committing {table} of batch {batch}")

    with pytest.raises(Crash):
        if fused:
            writer = ShardWriter(spark, native_store, cfg, list(range(SHARDS)))
            Router(spark, native_store, cfg, max_batch_files=4, handoff=writer, fused=True,
                   before_commit=die_in_batch_two).run()
        else:
            Router(spark, native_store, cfg, max_batch_files=4, before_commit=die_in_batch_two).run()

    # 2. The next run replays the planned batch and goes on; a run after it finds nothing new.
    for _ in range(2):
        run_pipeline(spark, native_store, cfg, flows=["route", "ingest"], params=small, handoff=fused).raise_failure()
    _exactly_once(spark, native_store, cfg, truth.unique_events)

    # 3. A producer redelivers files under new names: routed again, written nowhere.
    for f in sorted(p for p in landing.rglob("part-*") if "_truth" not in p.parts)[:2]:
        shutil.copy(f, f.with_name("again-" + f.name))
    run_pipeline(spark, native_store, cfg, flows=["route", "ingest"], params=small, handoff=fused).raise_failure()
    _exactly_once(spark, native_store, cfg, truth.unique_events)

    # 4. The hours are over: their buckets close; compaction merges each closed bucket's files without changing it.
    files_before = len(native_store.files(cfg.table_uri(EVENTS)))
    run_pipeline(spark, native_store, cfg, flows=["close_buckets", "compact"],
                 params={"close_buckets": {"quiet_minutes": 0.0}, "compact": {"min_files": 2}}).raise_failure()
    completionist = Completionist(spark, native_store, cfg)
    assert completionist.closed(), "no bucket closed"
    assert completionist.verify() == [], "a closed bucket changed"
    assert len(native_store.files(cfg.table_uri(EVENTS))) < files_before, "compaction merged nothing"
    _exactly_once(spark, native_store, cfg, truth.unique_events)
