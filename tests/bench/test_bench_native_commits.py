"""Smoke test of bench/bench_native_commits.py: every peer commits on Delta's engine, each commit lands once, the
markdown renders."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from bench import bench_native_commits as bench

pytestmark = pytest.mark.delta_jvm


def test_every_peer_commits_each_append_once_and_the_table_renders(spark: SparkSession, native_store: object,
                                                                   tmp_path: Path) -> None:
    rows = bench.measure([2, 4], 1, tmp_path)
    assert [r["log_commits"] for r in rows] == [2, 4]
    # Grown to 2, one measured commit; grown to 4, one more: five commits of two rows on every peer's table.
    assert rows[-1]["rows"] == dict.fromkeys(bench.PEERS, 10), rows[-1]["rows"]
    assert all(r[peer] > 0 for r in rows for peer in bench.PEERS)
    md = bench.render_md({"machine": "test", "date": "today", "repeat": 1, "rows": rows})
    assert md.count("\n| 2 |") == 1 and md.count("\n| 4 |") == 1
