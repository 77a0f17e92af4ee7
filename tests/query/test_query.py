"""read_events: pruning never changes the answer, and regexes skip files min/max cannot."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

from lakeshard.compaction import Compactor
from lakeshard.query import QueryError, read_events

from .conftest import AppendEvents, small_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakeshard.lake import TableStore

T0, T1 = datetime(2026, 1, 1, 10, tzinfo=UTC), datetime(2026, 1, 1, 12, tzinfo=UTC)


def _ids(df: Any) -> set[str]:
    return {r["event_id"] for r in df.select("event_id").collect()}


def test_pruned_reads_give_the_full_scan_answer(spark: SparkSession, store: TableStore,
                                                events_table: tuple[str, AppendEvents]) -> None:
    """For equality, IN, null and absent values: same rows as a scan, fewer files, regex beating min/max."""
    from pyspark.sql import functions as F

    uri, append = events_table
    append("t1", 6, 60)
    append("t2", 1, 10)
    Compactor(store, uri, settings=small_settings()).run(apply=True)
    everything = store.read(uri).where((F.col("tenant_id") == "t1") & (F.col("ts") >= T0) & (F.col("ts") < T1))
    cases: list[tuple[dict[str, Any], Any]] = [
        ({"service": "billing"}, F.col("service") == "billing"),
        ({"env": "pre.view|1"}, F.col("env") == "pre.view|1"),
        ({"service": ["auth", "web"], "status": "error"},
         F.col("service").isin("auth", "web") & (F.col("status") == "error")),
        ({"status": None}, F.col("status").isNull()),
        ({"service": "catalog"}, F.lit(False)),  # sorts between "cart" and "checkout": absent
    ]
    reports = {}
    for predicates, condition in cases:
        df, report = read_events(spark, store, uri, tenant="t1", start=T0, end=T1, predicates=predicates)
        assert _ids(df) == _ids(everything.where(condition)), predicates
        assert report.pruned_by_partition >= 1  # t2's files
        assert report.considered == len(store.files(uri))
        reports[str(predicates)] = report
    absent = reports[str({"service": "catalog"})]
    assert absent.pruned_by_regex >= 1 and not absent.read
    canary = reports[str({"env": "pre.view|1"})]
    _, min_max_only = read_events(spark, store, uri, tenant="t1", start=T0, end=T1,
                                  predicates={"env": "pre.view|1"}, use_regex=False)
    assert len(canary.read) < len(min_max_only.read)
    assert "pruned by partition" in canary.render()


def test_malformed_queries_are_named(spark: SparkSession, store: TableStore,
                                     events_table: tuple[str, AppendEvents]) -> None:
    """Unknown columns, empty IN lists and empty time ranges raise QueryError saying what is wrong."""
    uri, append = events_table
    append("t1", 1, 5)
    with pytest.raises(QueryError, match=r"unknown columns \['colour'\]"):
        read_events(spark, store, uri, tenant="t1", start=T0, end=T1, predicates={"colour": "red"})
    with pytest.raises(QueryError, match="empty IN list"):
        read_events(spark, store, uri, tenant="t1", start=T0, end=T1, predicates={"service": []})
    with pytest.raises(QueryError, match="time range is empty"):
        read_events(spark, store, uri, tenant="t1", start=T1, end=T0)


@pytest.mark.parametrize("tenant", ["nel\x85", "nb\xa0sp", "ls\u2028ps"], ids=["c1-control", "nbsp", "line-sep"])
def test_a_tenant_with_characters_java_uris_quote_reads_back_every_row(
        store: TableStore, events_table: tuple[str, AppendEvents], tenant: str) -> None:
    """Spark names such files with their characters percent-quoted (java.net.URI quotes C1 controls and
    Unicode spaces): the read still matches every file to its add action."""
    uri, append = events_table
    append(tenant, 2, 5)
    df, report = read_events(store.spark, store, uri, tenant=tenant, start=datetime(2026, 1, 1, tzinfo=UTC),
                             end=datetime(2026, 1, 2, tzinfo=UTC))
    assert df.count() == 20 and len(report.read) == 4


def test_a_damaged_fragments_file_costs_regex_pruning_not_the_query(
        spark: SparkSession, store: TableStore, events_table: tuple[str, AppendEvents]) -> None:
    """The fragments table only lets a query skip more files: with one of its files damaged, a query of any tenant
    of that hour failed (``DamagedDataFile`` of ``fragments``); it now reads those files unpruned by regex and gives
    the same rows."""
    from pathlib import Path
    from urllib.parse import unquote

    from lakeshard.compaction.fragment_table import fragments_uri

    uri, append = events_table
    append("t1", 6, 60)
    Compactor(store, uri, settings=small_settings()).run(apply=True)
    predicates = {"service": "catalog"}  # absent: regexes prune every file
    expected, pruned = read_events(spark, store, uri, tenant="t1", start=T0, end=T1, predicates=predicates)
    assert pruned.pruned_by_regex >= 1
    expected_ids = _ids(expected)
    fragments = fragments_uri(uri)
    for f in store.files(fragments):
        on_disk = Path(fragments.removeprefix("file://")) / unquote(f.path)
        on_disk.write_bytes(on_disk.read_bytes()[: on_disk.stat().st_size // 2])

    df, report = read_events(spark, store, uri, tenant="t1", start=T0, end=T1, predicates=predicates)
    assert _ids(df) == expected_ids
    assert report.pruned_by_regex == 0 and len(report.read) > len(pruned.read)
