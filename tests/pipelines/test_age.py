"""What a job run costs must not grow with the lakehouse's age: runs after the first reuse what the store knows."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakeshard.config import LakeshardConfig
from lakeshard.lake import TableStore
from lakeshard.pipelines import run_pipeline
from lakeshard.synth import SynthSpec, generate_landing
from lakeshard.synth.verify import check_against_truth
from lakeshard.tables import EVENTS


def test_an_ingest_run_loads_no_table_afresh_that_an_earlier_run_loaded(
    spark: SparkSession, store: TableStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    pipeline_config: Callable[[Path, Path], LakeshardConfig],
) -> None:
    """A fresh snapshot load replays the newest checkpoint and the commits after it: its cost grows with the
    table's files (``events``: thousands a day). Each run of the ingest job builds its router, writer and event log
    anew, and each ensures its tables; doing so must not throw away the snapshots the store keeps."""
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    landing = tmp_path / "landing"
    spec = SynthSpec(events=300, tenants=3, seed=5, start=start, hours=0.1, bad_rate=0.0, late_rate=0.0,
                     burst_tenants=0)
    first = generate_landing(landing / "a", spec)
    cfg = pipeline_config(tmp_path / "lh", landing)
    assert run_pipeline(spark, store, cfg, flows=["route", "ingest"]).ok

    log = store._log  # type: ignore[attr-defined]
    loads: list[str] = []
    real = log.table

    def table(uri: str, version: int | None = None):  # type: ignore[no-untyped-def]
        loads.append(uri.rstrip("/").rsplit("/", 1)[-1])
        return real(uri, version)

    monkeypatch.setattr(log, "table", table)
    second = generate_landing(landing / "b", SynthSpec(events=300, tenants=3, seed=6, start=start + timedelta(
        minutes=6), hours=0.1, bad_rate=0.0, late_rate=0.0, burst_tenants=0))
    for _ in range(2):  # the second run finds nothing new: it still ensures its tables
        assert run_pipeline(spark, store, cfg, flows=["route", "ingest"]).ok

    assert loads == [], f"tables loaded afresh by later runs: {sorted(set(loads))} ({len(loads)} loads)"
    monkeypatch.undo()
    rows = store.read(cfg.table_uri(EVENTS))
    assert rows.count() == first.unique_events + second.unique_events
    assert check_against_truth(spark, rows, landing / "a").missing == 0
