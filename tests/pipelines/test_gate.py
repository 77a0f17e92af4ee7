"""The expectation gate on its own, on real Delta commits: counts, null handling, quarantine committed once."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakeshard.config import load_config
from lakeshard.lake import AppTransaction, TableStore
from lakeshard.pipelines import (
    ExpectationFailed,
    ExpectationGate,
    Flow,
    FlowContext,
    FlowResult,
    expect,
    expect_or_drop,
    expect_or_fail,
    expect_or_quarantine,
)
from lakeshard.pipelines.context import EXPECTATION_QUARANTINE


def _nothing(ctx: FlowContext) -> FlowResult:
    return FlowResult()


def test_quarantine_drop_and_counts_with_a_replay_committing_once(
    spark: SparkSession, store: TableStore, tmp_path: Path
) -> None:
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh")}, env={})
    flow = Flow("f", _nothing, gated=True, expectations=(
        expect("has_env", "env IS NOT NULL"),
        expect_or_quarantine("positive", "n > 0"),
        expect_or_drop("small", "n < 100")))
    df = spark.createDataFrame([(1, "a"), (-1, "b"), (500, None), (None, "c"), (5, "d")], "n int, env string")
    gate = ExpectationGate(flow, store, cfg, "run-1")
    kept = gate(df, [AppTransaction("writer/0", 7)])
    assert sorted(r["n"] for r in kept.collect()) == [1, 5]
    # null fails a rule: (None, "c") is quarantined by "positive" as well as -1
    assert (gate.quarantined, gate.dropped) == (2, 1)
    counts = {name: (c.passed, c.failed) for name, c in gate.counts.items()}
    assert counts == {"has_env": (4, 1), "positive": (3, 2), "small": (3, 2)}
    uri = cfg.table_uri(EXPECTATION_QUARANTINE)
    rows = store.read(uri).select("flow", "rule", "row", "run_id").collect()
    assert sorted((r["rule"], r["row"], r["run_id"]) for r in rows) == [
        ("positive", '{"env":"c"}', "run-1"), ("positive", '{"n":-1,"env":"b"}', "run-1")]
    # The same step replayed (same app transactions): nothing is quarantined twice.
    version = store.version(uri)
    ExpectationGate(flow, store, cfg, "run-2")(df, [AppTransaction("writer/0", 7)])
    assert store.version(uri) == version and store.read(uri).count() == 2


def test_expect_or_fail_raises_with_the_rule_and_an_example(spark: SparkSession, store: TableStore,
                                                             tmp_path: Path) -> None:
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh")}, env={})
    flow = Flow("f", _nothing, gated=True, expectations=(expect_or_fail("positive", "n > 0"),))
    gate = ExpectationGate(flow, store, cfg, "run-1")
    with pytest.raises(ExpectationFailed, match=r"flow 'f': expectation 'positive' \(n > 0\) failed on 1 row\(s\), "
                                                r"e.g. \{\"n\":-3\}; nothing of this step was committed"):
        gate(spark.createDataFrame([(1,), (-3,)], "n int"))
    assert (gate.counts["positive"].passed, gate.counts["positive"].failed) == (1, 1)
    assert not store.exists(cfg.table_uri(EXPECTATION_QUARANTINE))
