"""The whole declared pipeline at production shape: hundreds of tenants and about a thousand (tenant, hour)
buckets in one run. Nothing a flow builds (filters, plans, loops of Spark jobs) may grow with their number."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakeshard.config import LakeshardConfig
from lakeshard.lake import TableStore
from lakeshard.pipelines import lakeshard_pipeline, run_pipeline
from lakeshard.synth import SynthSpec, generate_landing
from lakeshard.synth.verify import check_against_truth
from lakeshard.tables import EVENTS

TENANTS = 600


@pytest.mark.slow
def test_the_pipeline_over_600_tenants_and_their_buckets_is_exactly_once_and_compacts(
    spark: SparkSession, store: TableStore, tmp_path: Path,
    pipeline_config: Callable[[Path, Path], LakeshardConfig],
) -> None:
    landing = tmp_path / "landing"
    # Tenants of equal volume (no Zipf skew), so that every one of them has events in most hours.
    manifest = generate_landing(landing, SynthSpec(events=6_000, tenants=TENANTS, hours=2.0, zipf_s=0.0, seed=21,
                                                   burst_tenants=0, file_seconds=600))
    cfg = pipeline_config(tmp_path / "lh", landing)
    # One routed commit per writer step and a few landing files per batch: several small files per bucket.
    cfg = dataclasses.replace(cfg, dedupe=dataclasses.replace(cfg.dedupe, max_batch_bytes=1))
    report = run_pipeline(spark, store, cfg, lakeshard_pipeline(),
                          params={"close_buckets": {"quiet_minutes": 0.0}, "route": {"batch_files": 4},
                                  "compact": {"min_files": 2}})
    assert report.ok, report.render()
    assert [f.flow for f in report.flows if f.status == "completed"] == [
        "route", "ingest", "close_buckets", "compact", "autoshard", "balance", "compact_books"]

    events = store.read(cfg.table_uri(EVENTS))
    truth = check_against_truth(spark, events, landing)
    assert truth.exactly_once, truth
    assert truth.rows == manifest.unique_events
    buckets = events.select("tenant_id", "hour").distinct().count()
    assert events.select("tenant_id").distinct().count() >= TENANTS * 0.95 and buckets > 900
    close, compact = report.flow("close_buckets").result, report.flow("compact").result
    assert close is not None and close.rows_out == buckets  # every bucket closed (nothing in flight)
    assert compact is not None and compact.rows_in > compact.rows_out > 0  # files in > files out
    assert len(store.files(cfg.table_uri(EVENTS))) < compact.rows_in
