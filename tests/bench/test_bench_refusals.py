"""Smoke test of bench/bench_refusals.py: tiny zones, the three parses agree, the results are written."""

from __future__ import annotations

import json
from pathlib import Path

from bench import bench_refusals as bench


def test_each_share_gets_three_parses_that_agree_and_the_results_are_written(tmp_path: Path) -> None:
    assert bench.main(["--lines", "3000", "--file-lines", "1000", "--shares", "0,0.05,0.3", "--repeat", "1",
                       "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "refusals.json").read_text())
    rows = results["rows"]
    assert [r["share"] for r in rows] == [0.0, 0.05, 0.3]
    assert all(r["events"] + r["quarantined"] == 3000 for r in rows), rows
    assert rows[0]["quarantined"] == 0 and rows[2]["quarantined"] > rows[1]["quarantined"] > 0, rows
    assert (tmp_path / "refusals.png").stat().st_size > 0 and "| 30 % |" in (tmp_path / "refusals.md").read_text()
