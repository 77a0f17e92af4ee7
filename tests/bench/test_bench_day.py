"""Smoke test of bench/bench_day.py: a half-hour slice on the shared session, ground truth and output files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from bench import bench_day as bench


@pytest.mark.slow
def test_a_simulated_hour_ends_exactly_once_and_writes_its_report(spark: SparkSession, tmp_path: Path) -> None:
    out = tmp_path / "results"
    # Files quiet for 6 simulated minutes leave the zone after the maintenance job (a lifecycle rule): the runs
    # after it see a zone without them, and the lakehouse still ends exactly once.
    args = bench.parser().parse_args(["--hours", "0.5", "--events", "1000", "--tenants", "20", "--shards", "4",
                                      "--keep-landing-hours", "0.1", "--out", str(out), "--name", "smoke"])
    results = bench.run(spark, args, tmp_path / "work", say=lambda line: None)

    truth = results["truth"]
    assert truth["exactly_once"] and truth["rows"] == truth["truth_events"] == 1000, truth
    assert truth["quarantined"] == truth["bad_records"] > 0, truth
    assert results["failures"] == []
    assert any((tmp_path / "work" / "landing-archive").rglob("*.json*")), "the lifecycle rule moved no file"
    runs = results["runs"]
    assert sum(r["flow"] == "route" for r in runs) == 6  # every 5 simulated minutes
    assert sum(r["flow"] == "compact" for r in runs) == 1  # hourly, at minute 10
    saved = json.loads((out / "smoke.json").read_text())
    assert saved["truth"] == truth and set(saved["summary"]) == set(bench.FLOWS)
    assert "exactly once" in (out / "smoke.md").read_text()
    assert (out / "smoke.png").stat().st_size > 0
