"""The expectation gate on its own, on real Delta commits: counts, null handling, quarantine committed once —
on a Spark DataFrame and on an Arrow table (:meth:`ExpectationGate.keep_arrow`), with the same outcome."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakeshard.config import LakeshardConfig, load_config
from lakeshard.dedupe.writer import EVENTS, ShardWriter
from lakeshard.errors import LakeshardError
from lakeshard.lake import AppTransaction, TableStore
from lakeshard.lake.embedded import EmbeddedTableStore
from lakeshard.pipelines import (
    EventLog,
    ExpectationFailed,
    ExpectationGate,
    Flow,
    FlowContext,
    FlowResult,
    expect,
    expect_or_drop,
    expect_or_fail,
    expect_or_quarantine,
    lakeshard_pipeline,
    run_pipeline,
)
from lakeshard.pipelines.arrow_rules import UnsupportedCondition
from lakeshard.pipelines.context import EXPECTATION_QUARANTINE, _passes
from lakeshard.synth import Manifest
from lakeshard.synth.verify import check_against_truth

ROWS = pa.table({"n": pa.array([1, -1, 500, None, 5], pa.int32()), "env": ["a", "b", None, "c", "d"]})


def _nothing(ctx: FlowContext) -> FlowResult:
    return FlowResult()


def _gate_rows(spark: SparkSession, gate: ExpectationGate, rows: pa.Table, path: str,
               txns: Sequence[AppTransaction] = ()) -> list[dict[str, Any]]:
    """Return the rows ``gate`` keeps of ``rows``, passed as a Spark DataFrame or as an Arrow table."""
    if path == "spark":
        return [r.asDict() for r in gate(spark.createDataFrame(rows), txns).collect()]
    kept = gate.keep_arrow(rows, txns)
    assert kept is not None, "every rule of these tests runs in Arrow"
    return kept.to_pylist()


@pytest.mark.parametrize("path", ["spark", "arrow"])
def test_quarantine_drop_and_counts_with_a_replay_committing_once(
    spark: SparkSession, store: TableStore, tmp_path: Path, path: str
) -> None:
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh")}, env={})
    flow = Flow("f", _nothing, gated=True, expectations=(
        expect("has_env", "env IS NOT NULL"),
        expect_or_quarantine("positive", "n > 0"),
        expect_or_drop("small", "n < 100")))
    gate = ExpectationGate(flow, store, cfg, "run-1")
    kept = _gate_rows(spark, gate, ROWS, path, [AppTransaction("writer/0", 7)])
    assert sorted(r["n"] for r in kept) == [1, 5]
    # null fails a rule: (None, "c") is quarantined by "positive" as well as -1
    assert (gate.quarantined, gate.dropped) == (2, 1)
    counts = {name: (c.passed, c.failed) for name, c in gate.counts.items()}
    assert counts == {"has_env": (4, 1), "positive": (3, 2), "small": (3, 2)}
    uri = cfg.table_uri(EXPECTATION_QUARANTINE)
    rows = store.read(uri).select("flow", "rule", "row", "run_id").collect()
    assert sorted((r["rule"], r["row"], r["run_id"]) for r in rows) == [
        ("positive", '{"env":"c"}', "run-1"), ("positive", '{"n":-1,"env":"b"}', "run-1")]
    # The same step replayed (same app transactions), on either path: nothing is quarantined twice.
    version = store.version(uri)
    for again in ("spark", "arrow"):
        _gate_rows(spark, ExpectationGate(flow, store, cfg, "run-2"), ROWS, again, [AppTransaction("writer/0", 7)])
        assert store.version(uri) == version and store.read(uri).count() == 2


@pytest.mark.parametrize("path", ["spark", "arrow"])
def test_a_quarantine_rule_nothing_fails_still_commits_the_steps_app_transactions(
    spark: SparkSession, store: TableStore, tmp_path: Path, path: str
) -> None:
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh")}, env={})
    flow = Flow("f", _nothing, gated=True, expectations=(expect_or_quarantine("small", "n < 1000 OR n IS NULL"),))
    gate = ExpectationGate(flow, store, cfg, "run-1")
    assert len(_gate_rows(spark, gate, ROWS, path, [AppTransaction("writer/0", 7)])) == 5
    uri = cfg.table_uri(EXPECTATION_QUARANTINE)
    assert store.read(uri).count() == 0 and store.transaction_version(uri, "f/writer/0") == 7
    assert (gate.quarantined, gate.dropped, gate.counts["small"].passed) == (0, 0, 5)


@pytest.mark.parametrize("path", ["spark", "arrow"])
def test_expect_or_fail_raises_with_the_rule_and_an_example(spark: SparkSession, store: TableStore,
                                                             tmp_path: Path, path: str) -> None:
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh")}, env={})
    flow = Flow("f", _nothing, gated=True, expectations=(expect_or_fail("positive", "n > 0"),))
    gate = ExpectationGate(flow, store, cfg, "run-1")
    with pytest.raises(ExpectationFailed, match=r"flow 'f': expectation 'positive' \(n > 0\) failed on 1 row\(s\), "
                                                r"e.g. \{\"n\":-3\}; nothing of this step was committed"):
        _gate_rows(spark, gate, pa.table({"n": pa.array([1, -3], pa.int32())}), path)
    assert (gate.counts["positive"].passed, gate.counts["positive"].failed) == (1, 1)
    assert not store.exists(cfg.table_uri(EXPECTATION_QUARANTINE))


def test_a_rule_outside_the_arrow_subset_leaves_the_rows_to_spark(store: TableStore, tmp_path: Path) -> None:
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh")}, env={})
    flow = Flow("f", _nothing, gated=True, expectations=(expect("known_env", "env LIKE 'prod%'"),
                                                         expect_or_drop("positive", "n > 0")))
    gate = ExpectationGate(flow, store, cfg, "run-1")
    assert gate.keep_arrow(ROWS) is None and not gate.runs_in_arrow(ROWS.schema)
    with pytest.raises(UnsupportedCondition, match="LIKE"):
        gate.observe_arrow(ROWS)
    assert (gate.counts["positive"].passed, gate.counts["positive"].failed, gate.dropped) == (0, 0, 0)
    counted = ExpectationGate(Flow("f", _nothing, expectations=(expect("positive", "n > 0"),)), store, cfg, "r")
    counted.observe_arrow(ROWS)
    assert (counted.counts["positive"].passed, counted.counts["positive"].failed) == (3, 2)


@pytest.mark.slow
def test_route_and_ingest_on_a_lazy_store_start_no_spark_and_count_as_the_spark_path(
    spark: SparkSession, store: TableStore, landing: tuple[Path, Manifest],
    pipeline_config: Callable[[Path, Path], LakeshardConfig], tmp_path: Path,
) -> None:
    source = landing[0]
    cfg = pipeline_config(tmp_path / "driver", source)
    lazy = EmbeddedTableStore(None, start_spark=lambda: spark)  # started only if something asks for Spark
    report = run_pipeline(None, lazy, cfg, lakeshard_pipeline(), flows=["route", "ingest"])
    assert report.ok, report.render()
    assert not lazy.spark_started, "route + ingest of a small landing zone needed Spark"
    # The same run with every writer step, and so the gate, on Spark.
    on_spark = pipeline_config(tmp_path / "spark", source)
    on_spark = dataclasses.replace(on_spark, dedupe=dataclasses.replace(on_spark.dedupe, arrow_max_bytes=0))
    spark_report = run_pipeline(spark, store, on_spark, lakeshard_pipeline(), flows=["route", "ingest"])
    assert spark_report.ok, spark_report.render()

    def counts(c: LakeshardConfig, run_id: str) -> dict[str, list[tuple[str, str, int, int]]]:
        rows = EventLog(store, c).read(run_id).where(F.col("event") == "completed").collect()
        return {r["flow"]: sorted((e["name"], e["kind"], e["passed"], e["failed"]) for e in r["expectations"])
                for r in rows}

    driver_counts = counts(cfg, report.run_id)
    assert driver_counts == counts(on_spark, spark_report.run_id)
    events = store.read(cfg.table_uri(EVENTS))
    assert check_against_truth(spark, events, str(source)).exactly_once
    assert driver_counts["ingest"] == [("has_service", "expect", events.where("service IS NOT NULL").count(),
                                        events.where("service IS NULL").count()),
                                       ("identified", "expect_or_fail", events.count(), 0)]
    routed = store.read(cfg.table_uri("routed"))
    passed = routed.where(_passes(expect("r", "shard >= 0"))).count()
    assert driver_counts["route"] == [("routed_to_a_shard", "expect", passed, routed.count() - passed)]


class Crash(LakeshardError):
    """Stops a writer right before its events commit (a LakeshardError: not retried as a fault)."""


@pytest.mark.slow
def test_drop_and_quarantine_in_either_writer_engine_keep_the_same_rows_and_a_replay_quarantines_once(
    spark: SparkSession, store: TableStore, landing: tuple[Path, Manifest], routed_only: Path, tmp_path: Path,
    pipeline_config: Callable[[Path, Path], LakeshardConfig],
) -> None:
    routed = store.read(pipeline_config(routed_only, landing[0]).table_uri("routed"))
    tenants = [r[0] for r in routed.groupBy("tenant_id").count().orderBy("count", "tenant_id").limit(2).collect()]
    flow = lakeshard_pipeline().flow("ingest").with_expectations(
        expect_or_quarantine("not_first_tenant", f"tenant_id <> '{tenants[0]}'"),
        expect_or_drop("not_second_tenant", f"tenant_id <> '{tenants[1]}'"))

    def crash(table: str) -> None:
        if table == EVENTS:
            raise Crash("stopped before the events commit")

    outcomes = {}
    for engine, arrow_max_bytes in (("arrow", 64 << 20), ("spark", 0)):
        cfg = pipeline_config(Path(shutil.copytree(routed_only, tmp_path / engine)), landing[0])
        cfg = dataclasses.replace(cfg, dedupe=dataclasses.replace(cfg.dedupe, arrow_max_bytes=arrow_max_bytes))
        # The step quarantines (its own commit, before the events'), then the process stops; the replay
        # quarantines the same rows again under the same app transactions: committed once.
        with pytest.raises(Crash):
            ShardWriter(spark, store, cfg, [0, 1, 2, 3], gate=ExpectationGate(flow, store, cfg, "run-1"),
                        before_commit=crash).run()
        gate = ExpectationGate(flow, store, cfg, "run-2")
        reports = ShardWriter(spark, store, cfg, [0, 1, 2, 3], gate=gate).run()
        assert {r.engine for r in reports} == {engine}
        quarantine = store.read(cfg.table_uri(EXPECTATION_QUARANTINE))
        events = store.read(cfg.table_uri(EVENTS))
        outcomes[engine] = (
            sorted((r["flow"], r["rule"], r["condition"], r["row"], r["rows"]) for r in quarantine.collect()),
            sorted(tuple(r) for r in events.select("tenant_id", "event_id", "ts").collect()),
            (gate.quarantined, gate.dropped))
        assert not quarantine.where(F.col("run_id") == "run-2").count()  # the first attempt's rows stay
    assert outcomes["arrow"] == outcomes["spark"]
    quarantined, kept, (n_quarantined, n_dropped) = outcomes["arrow"]
    assert len(quarantined) == n_quarantined > 0 and n_dropped > 0
    assert {t for t, _, _ in kept}.isdisjoint(tenants)


@pytest.mark.slow
def test_a_rule_only_spark_evaluates_handles_steps_whose_events_are_all_duplicates_or_all_dropped(
    spark: SparkSession, store: TableStore, landing: tuple[Path, Manifest],
    pipeline_config: Callable[[Path, Path], LakeshardConfig], first_run: tuple[Path, Any],
    copy_lakehouse: Callable[[Path], Path], tmp_path: Path,
) -> None:
    """A rule outside the Arrow subset sends a driver step's new events to Spark and back; a step with no new
    event (every routed row a duplicate) or whose events a rule drops all of hands Spark an empty table."""
    assert not ExpectationGate(Flow("f", _nothing, expectations=(expect("x", "length(event_id) > 0"),)),
                               store, load_config(env={}), "r").runs_in_arrow(pa.schema([("event_id", pa.string())]))
    pipeline = lakeshard_pipeline()
    ingest = pipeline.flow("ingest")
    spark_only = pipeline.replace(ingest.with_expectations(*ingest.expectations,
                                                           expect("short_ids", "length(event_id) < 300")))
    # Every file of the landing zone delivered again under another path: routed again, every event a duplicate.
    lh = copy_lakehouse(first_run[0])
    again = Path(shutil.copytree(landing[0], tmp_path / "redelivered"))
    cfg = pipeline_config(lh, again)
    before = store.read(cfg.table_uri(EVENTS)).count()
    report = run_pipeline(None, EmbeddedTableStore(None, start_spark=lambda: spark), cfg, spark_only,
                          flows=["route", "ingest"])
    assert report.ok, report.render()
    events = store.read(cfg.table_uri(EVENTS))
    assert events.count() == before
    assert check_against_truth(spark, events, str(landing[0])).exactly_once
    # A rule that drops every new event, evaluated by Spark: the steps commit their progress and no event.
    drop_all = pipeline.replace(ingest.with_expectations(expect_or_drop("never", "length(event_id) < 0")))
    fresh = pipeline_config(tmp_path / "dropped", landing[0])
    report = run_pipeline(None, EmbeddedTableStore(None, start_spark=lambda: spark), fresh, drop_all,
                          flows=["route", "ingest"])
    assert report.ok, report.render()
    assert store.read(fresh.table_uri(EVENTS)).count() == 0
    rerun = run_pipeline(None, EmbeddedTableStore(None, start_spark=lambda: spark), fresh, drop_all,
                         flows=["route", "ingest"])
    assert rerun.ok, rerun.render()
    assert store.read(fresh.table_uri(EVENTS)).count() == 0
