"""``spark.read.format("lakeshard")``: pushed equality / IN / null filters prune files (partition, min/max, regex)
without changing the answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pyspark.sql.datasource
import pytest

from lakeshard.compaction import Compactor
from lakeshard.query import register_lakeshard_source

from .conftest import AppendEvents, checksum, small_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakeshard.lake import TableStore

# Spark pushes filters to Python data sources from 4.1 on (the filter classes came with it); on 4.0 the source reads
# every file, and only its answer is checked.
PUSHDOWN = hasattr(pyspark.sql.datasource, "Filter")


def test_pushed_filters_prune_files_and_the_rows_equal_a_full_scan(
        spark: SparkSession, store: TableStore, events_table: tuple[str, AppendEvents], tmp_path: Path) -> None:
    uri, append = events_table
    append("t1", 6, 60)
    append("t2", 2, 30)
    Compactor(store, uri, settings=small_settings()).run(apply=True)
    register_lakeshard_source(spark)
    report = tmp_path / "report.json"
    full = store.read(uri)
    for where in ("tenant_id = 't1' AND env = 'pre.view|1'",
                  "tenant_id IN ('t1', 't2') AND service = 'search' AND status IS NULL",
                  "env = 'no-such-env'"):
        df = spark.read.format("lakeshard").option("reportPath", str(report)).load(uri).where(where)
        assert checksum(df) == checksum(full.where(where)), where
        if not PUSHDOWN:
            continue
        pruned = json.loads(report.read_text())
        assert pruned["filters"], f"{where}: no filter reached the source"
        assert len(pruned["read"]) < pruned["considered"], (where, pruned)
    if not PUSHDOWN:
        return
    absent = json.loads(report.read_text())  # t1's compacted files have regexes; t2's two writer files do not
    assert absent["read"] and not any("tenant_id=t1" in p for p in absent["read"]) and absent["pruned_by_regex"] > 0
    first = spark.read.format("lakeshard").option("reportPath", str(report)).load(uri)
    first.where("tenant_id = 't1' AND env = 'pre.view|1'").count()
    assert json.loads(report.read_text())["pruned_by_regex"] > 0, "regexes pruned nothing min/max kept"


@pytest.mark.skipif(not PUSHDOWN, reason="this Spark pushes no filters to a Python data source (Spark 4.1+ does)")
def test_a_pushed_ts_range_prunes_hours_and_time_statistics(
        spark: SparkSession, store: TableStore, events_table: tuple[str, AppendEvents], tmp_path: Path) -> None:
    uri, append = events_table  # hours 2026-01-01T10 and T11, a file of each per append
    append("t1", 3, 20)
    register_lakeshard_source(spark)
    report = tmp_path / "report.json"
    full = store.read(uri)
    source = spark.read.format("lakeshard").option("reportPath", str(report)).load(uri)
    for where, by_partition in (("ts >= '2026-01-01T11:00:00Z'", 3), ("ts < '2026-01-01T11:00:00Z'", 3),
                                ("ts BETWEEN '2026-01-01T10:00:00Z' AND '2026-01-01T10:59:59Z'", 3),
                                ("ts > '2026-01-01T12:00:00Z'", 6)):
        assert checksum(source.where(where)) == checksum(full.where(where)), where
        pruned = json.loads(report.read_text())
        assert pruned["time"]["lower"] or pruned["time"]["upper"], f"{where}: no ts filter reached the source"
        assert (pruned["pruned_by_partition"], len(pruned["read"])) == (by_partition, 6 - by_partition), (where, pruned)
