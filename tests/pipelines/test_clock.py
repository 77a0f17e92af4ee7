"""The run's clock reaches the flows: traffic of a simulated future routes, lands and closes by that clock."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pyspark.sql import SparkSession

from lakeshard.buckets import Completionist
from lakeshard.config import LakeshardConfig
from lakeshard.lake import TableStore
from lakeshard.pipelines import run_pipeline
from lakeshard.synth import SynthSpec, generate_landing
from lakeshard.synth.verify import check_against_truth
from lakeshard.tables import EVENTS, QUARANTINE


def test_flows_decide_by_the_clock_the_run_is_given(
    spark: SparkSession, store: TableStore, tmp_path: Path,
    pipeline_config: Callable[[Path, Path], LakeshardConfig],
) -> None:
    # Three days ahead of the wall clock: by wall time every event would be absurdly far in the future
    # (quarantined) and no hour of it over (no bucket could close).
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=3)
    landing = tmp_path / "landing"
    manifest = generate_landing(landing, SynthSpec(events=300, tenants=3, seed=5, start=start, hours=0.2,
                                                   bad_rate=0.0, late_rate=0.0, burst_tenants=0))
    cfg = pipeline_config(tmp_path / "lh", landing)
    now = start + timedelta(hours=2)
    report = run_pipeline(spark, store, cfg, flows=["route", "ingest", "close_buckets"],
                          params={"close_buckets": {"quiet_minutes": 0}}, clock=lambda: now)

    assert [f.status for f in report.flows] == ["completed"] * 3
    quarantined = store.read(cfg.table_uri(QUARANTINE)).count()
    assert quarantined == 0, f"{quarantined} records quarantined: the router did not parse by the run's clock"
    check = check_against_truth(spark, store.read(cfg.table_uri(EVENTS)), landing)
    assert check.exactly_once and check.rows == manifest.unique_events
    closed = Completionist(spark, store, cfg).closed()
    hours = {h for by_hour in manifest.events_by_tenant_hour.values() for h in by_hour}
    assert len(closed) == sum(len(by_hour) for by_hour in manifest.events_by_tenant_hour.values()) > 0, (
        f"closed {sorted(closed)} of the hours {sorted(hours)}: the completionist did not go by the run's clock")
