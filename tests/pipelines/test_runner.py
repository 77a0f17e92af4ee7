"""The runner on the embedded lakehouse: real Router/ShardWriter/autoshard/balance flows, real Delta commits,
the event log read back as a table."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakeshard.config import LakeshardConfig
from lakeshard.dedupe.writer import EVENTS
from lakeshard.lake import TableStore
from lakeshard.pipelines import (
    EventLog,
    Flow,
    FlowContext,
    FlowResult,
    RunReport,
    expect,
    expect_or_drop,
    expect_or_fail,
    expect_or_quarantine,
    lakeshard_pipeline,
    run_pipeline,
)
from lakeshard.pipelines.context import EXPECTATION_QUARANTINE
from lakeshard.synth import Manifest
from lakeshard.synth.verify import check_against_truth
from lakeshard.tables import QUARANTINE


def _ends(store: TableStore, cfg: Any, run_id: str) -> dict[str, dict[str, Any]]:
    """Return each flow's end event (not 'started') of one run, as a dict."""
    rows = EventLog(store, cfg).read(run_id).where(F.col("event") != "started").collect()
    return {r["flow"]: r.asDict(recursive=True) for r in rows}


def test_event_log_accounts_for_every_input_record(
    spark: SparkSession, store: TableStore, landing: tuple[Path, Manifest], first_run: tuple[Path, RunReport],
    pipeline_config: Callable[[Path, Path], LakeshardConfig],
) -> None:
    lh, report = first_run
    manifest = landing[1]
    cfg = pipeline_config(lh, landing[0])
    assert report.ok, report.render()
    log = EventLog(store, cfg).read(report.run_id).collect()
    assert [(r["flow"], r["event"]) for r in log] == [
        (f, e) for f in ("route", "ingest", "close_buckets", "compact", "autoshard", "balance", "compact_books")
        for e in ("started", "completed")]
    ends = _ends(store, cfg, report.run_id)
    route, ingest = ends["route"], ends["ingest"]
    events = store.read(cfg.table_uri(EVENTS)).count()
    quarantined = store.read(cfg.table_uri(QUARANTINE)).count()
    # records in = events + duplicates dropped + quarantined, each term counted apart from the event log: lines
    # and duplicates from the generator's files, events and quarantined records as rows of their tables
    # (nothing fails or drops an expectation here, so expectation_quarantine stays empty).
    assert not store.exists(cfg.table_uri(EXPECTATION_QUARANTINE)) or \
        store.read(cfg.table_uri(EXPECTATION_QUARANTINE)).count() == 0
    assert manifest.records == events + manifest.duplicate_records + quarantined
    assert (route["rows_in"], ingest["rows_out"], ingest["duplicates_dropped"], route["quarantined"],
            ingest["quarantined"], ingest["dropped"]) == \
        (manifest.records, events, manifest.duplicate_records, quarantined, 0, 0)
    assert quarantined == manifest.bad_records
    assert check_against_truth(spark, store.read(cfg.table_uri(EVENTS)), landing[0]).exactly_once
    rules = {e["name"]: e for e in ingest["expectations"]}
    assert rules["identified"]["failed"] == 0 and rules["identified"]["kind"] == "expect_or_fail"
    assert rules["has_service"]["passed"] + rules["has_service"]["failed"] == events
    assert ends["route"]["expectations"][0]["passed"] == ingest["rows_in"]  # every routed row has a shard
    assert all(r["duration_seconds"] > 0 for r in ends.values())
    # Every bucket was closed (quiet period 0, nothing in flight) with a checksum; compaction sealed them.
    hours = store.read(cfg.table_uri(EVENTS)).select("tenant_id", "hour").distinct().count()
    assert ends["close_buckets"]["rows_out"] == hours
    # Each close commits two rows, "closing" then "closed" with the checksum: the expectation sees both.
    assert ends["close_buckets"]["expectations"][0]["passed"] == 2 * hours


def test_an_incremental_rerun_does_nothing_new(
    spark: SparkSession, store: TableStore, landing: tuple[Path, Manifest], first_run: tuple[Path, RunReport],
    copy_lakehouse: Callable[[Path], Path], pipeline_config: Callable[[Path, Path], LakeshardConfig],
) -> None:
    cfg = pipeline_config(copy_lakehouse(first_run[0]), landing[0])
    versions = {t: store.version(cfg.table_uri(t)) for t in ("routed", "events", "tenant_settings", "buckets")}
    report = run_pipeline(spark, store, cfg)
    assert [(f.flow, f.status) for f in report.flows] == [
        ("route", "completed"), ("ingest", "up_to_date"), ("close_buckets", "completed"), ("compact", "completed"),
        ("autoshard", "up_to_date"), ("balance", "up_to_date"),
        ("compact_books", "completed")]  # closing and compacting also follow the clock; upkeep always runs
    assert report.flow("route").result == FlowResult(details={"batches": 0, "files": 0})
    assert {t: store.version(cfg.table_uri(t)) for t in versions} == versions
    assert set(_ends(store, cfg, report.run_id)["ingest"]["input_versions"]) == {"routed"}


def test_a_flow_given_parameters_runs_even_when_its_inputs_are_unchanged(
    spark: SparkSession, store: TableStore, landing: tuple[Path, Manifest], first_run: tuple[Path, RunReport],
    copy_lakehouse: Callable[[Path], Path], pipeline_config: Callable[[Path, Path], LakeshardConfig],
) -> None:
    # "autoshard --as-of T" asks a question of the same inputs: answering "up to date" would ignore it.
    cfg = pipeline_config(copy_lakehouse(first_run[0]), landing[0])
    report = run_pipeline(spark, store, cfg, flows=["autoshard", "balance"],
                          params={"autoshard": {"as_of": "2026-01-01T02:00:00Z"}})
    assert [(f.flow, f.status) for f in report.flows] == [("autoshard", "completed"), ("balance", "up_to_date")]
    result = report.flow("autoshard").result
    assert result is not None and result.outcome.plan.now == datetime(2026, 1, 1, 2, tzinfo=UTC)


def test_compact_books_rewrites_grown_bookkeeping_tables_with_the_same_rows(
    spark: SparkSession, store: TableStore, landing: tuple[Path, Manifest], first_run: tuple[Path, RunReport],
    copy_lakehouse: Callable[[Path], Path], pipeline_config: Callable[[Path, Path], LakeshardConfig],
) -> None:
    cfg = pipeline_config(copy_lakehouse(first_run[0]), landing[0])
    grown = cfg.table_uri("pipeline_events")  # a file per flow event: 14 after the first run
    files, rows = len(store.files(grown)), sorted(map(str, store.read_table_arrow(grown).to_pylist()))
    assert files > 2
    # max_files=2: every bookkeeping table with more than two files is rewritten, one file per partition.
    report = run_pipeline(spark, store, cfg, flows=["compact_books"], params={"compact_books": {"max_files": 2}})
    assert report.ok, report.render()
    result = report.flow("compact_books").result
    assert result is not None and "pipeline_events" in str(result.details["tables"])
    # The run's "started" event was merged too; its "completed" event came after: one merged file plus that one.
    assert len(store.files(grown)) == 2
    after = sorted(map(str, store.read_table_arrow(grown).to_pylist()))
    assert set(rows) <= set(after) and len(after) == len(rows) + 2


def test_full_refresh_rebuilds_the_outputs_from_the_landing_zone(
    spark: SparkSession, store: TableStore, landing: tuple[Path, Manifest], first_run: tuple[Path, RunReport],
    copy_lakehouse: Callable[[Path], Path], pipeline_config: Callable[[Path, Path], LakeshardConfig],
) -> None:
    cfg = pipeline_config(copy_lakehouse(first_run[0]), landing[0])
    before = store.version(cfg.table_uri(EVENTS))
    # Refreshing ingest alone re-routes too: the writers' progress over `routed` only moves forward.
    report = run_pipeline(spark, store, cfg, flows=["ingest"], full_refresh=True)
    # ... and the bucket states describing the emptied events are rebuilt with them (refresh_with)
    assert report.ok and [f.flow for f in report.flows] == ["route", "ingest", "close_buckets"]
    ends = _ends(store, cfg, report.run_id)
    assert ends["route"]["rows_in"] == landing[1].records and ends["route"]["full_refresh"]
    # Emptied in one commit, then rebuilt: every event once again, and the old version still readable.
    history = store.history(cfg.table_uri(EVENTS))
    assert any("full_refresh" in h.custom_metadata for h in history)
    assert store.version(cfg.table_uri(EVENTS)) >= before + 2
    assert check_against_truth(spark, store.read(cfg.table_uri(EVENTS)), landing[0]).exactly_once
    assert store.read(cfg.table_uri(EVENTS), version=before).count() == landing[1].unique_events
    # Had the closed states survived, every rebuilt event would have gone to an open bucket as late.
    assert store.read(cfg.table_uri(EVENTS)).where("late").count() == 0


@pytest.mark.parametrize("arrow_max_bytes", [64 << 20, 0], ids=["driver", "spark"])
def test_drop_and_quarantine_expectations_account_for_the_rows_they_take(
    spark: SparkSession, store: TableStore, landing: tuple[Path, Manifest], routed_only: Path,
    copy_lakehouse: Callable[[Path], Path], pipeline_config: Callable[[Path, Path], LakeshardConfig],
    arrow_max_bytes: int,
) -> None:
    cfg = pipeline_config(copy_lakehouse(routed_only), landing[0])
    # The gated writer step runs in the driver (the gate's checks on Spark) or wholly on Spark: same outcome.
    cfg = dataclasses.replace(cfg, dedupe=dataclasses.replace(cfg.dedupe, arrow_max_bytes=arrow_max_bytes))
    routed = store.read(cfg.table_uri("routed"))
    tenants = [r[0] for r in routed.groupBy("tenant_id").count().orderBy("count").limit(2).collect()]
    p = lakeshard_pipeline()
    gated = p.flow("ingest").with_expectations(
        expect("has_service", "service IS NOT NULL"),
        expect_or_quarantine("not_first_tenant", f"tenant_id <> '{tenants[0]}'"),
        expect_or_drop("not_second_tenant", f"tenant_id <> '{tenants[1]}'"))
    report = run_pipeline(spark, store, cfg, p.replace(gated), flows=["ingest"])
    assert report.ok, report.render()
    ingest = _ends(store, cfg, report.run_id)["ingest"]
    events = store.read(cfg.table_uri(EVENTS))
    unique = routed.dropDuplicates(["tenant_id", "event_id", "ts"])
    in_first, in_second = (unique.where(F.col("tenant_id") == t).count() for t in tenants)
    assert (ingest["quarantined"], ingest["dropped"]) == (in_first, in_second) and in_first > 0 and in_second > 0
    assert events.where(F.col("tenant_id").isin(tenants)).count() == 0
    assert ingest["rows_in"] == ingest["rows_out"] + ingest["duplicates_dropped"] + in_first + in_second
    quarantined = store.read(cfg.table_uri(EXPECTATION_QUARANTINE))
    assert quarantined.groupBy("flow", "rule").count().collect() == [("ingest", "not_first_tenant", in_first)]
    rules = {e["name"]: (e["passed"], e["failed"]) for e in ingest["expectations"]}
    assert rules["not_first_tenant"][1] == in_first and rules["not_second_tenant"][1] == in_second
    assert ingest["details"]["engines"] == ("arrow" if arrow_max_bytes else "spark")


def _count_tenants(ctx: FlowContext) -> FlowResult:
    events = ctx.store.read(ctx.cfg.table_uri(EVENTS))
    uri = ctx.cfg.table_uri("tenant_counts")
    ctx.store.create(uri, events.groupBy("tenant_id").count().schema)
    ctx.store.append(uri, events.groupBy("tenant_id").count())
    return FlowResult(rows_in=events.count())


def test_a_failing_expect_or_fail_stops_downstream_flows_and_commits_nothing(
    spark: SparkSession, store: TableStore, landing: tuple[Path, Manifest], routed_only: Path,
    copy_lakehouse: Callable[[Path], Path], pipeline_config: Callable[[Path, Path], LakeshardConfig],
) -> None:
    cfg = pipeline_config(copy_lakehouse(routed_only), landing[0])
    p = lakeshard_pipeline()
    strict = p.flow("ingest").with_expectations(expect_or_fail("only_production", "env = 'production'"))
    downstream = Flow("tenant_counts", _count_tenants, inputs=(EVENTS,), outputs=("tenant_counts",))
    report = run_pipeline(spark, store, cfg, p.replace(strict).extend(downstream),
                          flows=["ingest", "tenant_counts"])
    assert not report.ok
    assert [(f.flow, f.status) for f in report.flows] == [("ingest", "failed"), ("tenant_counts", "skipped")]
    ends = _ends(store, cfg, report.run_id)
    assert ends["ingest"]["event"] == "failed"
    assert "ExpectationFailed: flow 'ingest': expectation 'only_production' (env = 'production') failed on" \
        in ends["ingest"]["error"]
    [rule] = ends["ingest"]["expectations"]
    assert rule["failed"] > 0 and rule["kind"] == "expect_or_fail"
    assert ends["tenant_counts"]["event"] == "skipped"
    assert store.read(cfg.table_uri(EVENTS)).count() == 0  # nothing of the failed step was committed
    assert not store.exists(cfg.table_uri("tenant_counts"))


def test_route_and_ingest_run_as_one_call_with_the_fused_hand_off_and_account_as_two_flows(
    spark: SparkSession, store: TableStore, landing: tuple[Path, Manifest], tmp_path: Path,
    pipeline_config: Callable[[Path, Path], LakeshardConfig],
) -> None:
    """``handoff="fused"``: the runner calls ``ingest_fused`` once for the route and ingest flows; each keeps its
    event-log entries, counts and expectations, and nothing goes through ``routed`` (docs/decisions.md, record 19)."""
    from lakeshard.tables import FUSED_APP_ID, ID_INDEX, ROUTED

    manifest = landing[1]
    cfg = pipeline_config(tmp_path / "lh", landing[0])
    report = run_pipeline(None, store, cfg, lakeshard_pipeline(), flows=["route", "ingest"], handoff="fused")
    assert report.ok, report.render()
    log = EventLog(store, cfg).read(report.run_id).collect()
    assert [(r["flow"], r["event"]) for r in log] == [
        ("route", "started"), ("ingest", "started"), ("route", "completed"), ("ingest", "completed")]
    # The pair's events are committed together: two commits of the log where each flow would make its own.
    commits = [c for c in store.history(cfg.table_uri("pipeline_events"))
               if c.custom_metadata.get("run_id") == report.run_id]
    assert len(commits) == 2, commits
    ends = _ends(store, cfg, report.run_id)
    route, ingest = ends["route"], ends["ingest"]
    events = store.read(cfg.table_uri(EVENTS)).count()
    assert (route["rows_in"], route["quarantined"], ingest["rows_in"], ingest["rows_out"],
            ingest["duplicates_dropped"]) == (manifest.records, manifest.bad_records,
                                              manifest.records - manifest.bad_records, events,
                                              manifest.duplicate_records)
    assert route["expectations"][0]["passed"] == ingest["rows_in"]  # counted on the rows handed over
    rules = {e["name"]: e for e in ingest["expectations"]}
    assert rules["has_service"]["passed"] + rules["has_service"]["failed"] == events
    assert report.flow("ingest").result is not None
    assert report.flow("ingest").result.details["engines"] == "fused"
    assert check_against_truth(spark, store.read(cfg.table_uri(EVENTS)), landing[0]).exactly_once
    assert store.read(cfg.table_uri(ROUTED)).count() == 0
    assert (store.transaction_version(cfg.table_uri(ID_INDEX), FUSED_APP_ID) or 0) >= 1
