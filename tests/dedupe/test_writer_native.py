"""Shard writers on Delta's own engine (the native adapter): one commit per shard, each with its ``writer/<shard>``
alone, through Delta's public writer; exactly once through replays, a crash between two shards' commits and a
stale writer (docs/decisions.md record 2)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakeshard.config import LakeshardConfig, load_config
from lakeshard.dedupe.writer import EVENTS, ID_INDEX, ShardWriter
from lakeshard.lake import TableStore
from lakeshard.routing.router import Router
from lakeshard.synth import SynthSpec, generate_landing
from lakeshard.synth.verify import check_against_truth
from lakeshard.tables import writer_app_id

pytestmark = pytest.mark.delta_jvm

SHARDS = 4
ENGINES = {"arrow": {}, "spark": {"arrow_max_bytes": 1}}


class Crash(BaseException):
    """Stands in for the writer process dying at a commit point."""


def _routed(spark: SparkSession, store: TableStore, tmp_path: Path, engine: str = "arrow") -> tuple[
        LakeshardConfig, str]:
    landing = tmp_path / "landing"
    generate_landing(landing, SynthSpec(events=600, tenants=5, hours=0.2, seed=7, retry_rate=0.08,
                                        redelivered_files=0.15, bad_rate=0.0))
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": str(landing),
                                 "routing": {"total_shards": SHARDS, "default_shard_count": 2},
                                 "dedupe": ENGINES[engine]}, env={})
    Router(spark, store, cfg).run()
    return cfg, str(landing)


def _exactly_once(spark: SparkSession, store: TableStore, cfg: LakeshardConfig, landing: str) -> None:
    check = check_against_truth(spark, store.read(cfg.table_uri(EVENTS)), landing)
    assert check.exactly_once, check


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["arrow", "spark"])
def test_a_step_of_k_shards_makes_k_events_commits_each_carrying_one_writer_app_id(
    spark: SparkSession, native_store: TableStore, tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg, landing = _routed(spark, native_store, tmp_path, engine)
    events, ids = cfg.table_uri(EVENTS), cfg.table_uri(ID_INDEX)
    writer = ShardWriter(spark, native_store, cfg, list(range(SHARDS)))
    writer.ensure_tables()
    before = native_store.version(events)
    # Each look at a table's schema is a look at its log (a Spark job under Spark Connect): once a table a step,
    # not once a shard's commit.
    looks: Counter[tuple[str, str]] = Counter()
    for name in ("schema", "arrow_schema"):
        real = getattr(native_store, name)
        monkeypatch.setattr(native_store, name, lambda table, real=real, name=name: looks.update([(name, table)])
                            or real(table))
    reports = writer.run()
    assert [r.engine for r in reports] == [engine] and not reports[0].conflict
    assert all(n <= 2 for n in looks.values()), looks
    step_commits = native_store.log_entries(events, start=before + 1)
    # One commit per shard, each carrying exactly its own progress.
    assert sorted(t.app_id for e in step_commits for t in e.app_transactions) == \
        sorted(writer_app_id(s) for s in range(SHARDS))
    assert all(len(e.app_transactions) == 1 for e in step_commits) and len(step_commits) == SHARDS
    assert native_store.transaction_versions(ids, [writer_app_id(s) for s in range(SHARDS)]) == \
        native_store.transaction_versions(events, [writer_app_id(s) for s in range(SHARDS)])
    _exactly_once(spark, native_store, cfg, landing)
    assert native_store.read(ids).count() == native_store.read(events).count()

    # Replayed progress is skipped by Delta's idempotent writes: a new writer over the same shards finds nothing.
    assert ShardWriter(spark, native_store, cfg, list(range(SHARDS))).step() is None


@pytest.mark.slow
def test_a_crash_between_two_shards_commits_leaves_one_done_and_the_next_step_finishes_the_other(
    spark: SparkSession, native_store: TableStore, tmp_path: Path
) -> None:
    cfg, landing = _routed(spark, native_store, tmp_path)
    events_commits = [0]

    def die_before_the_second_shard(table: str) -> None:
        if table == EVENTS:
            events_commits[0] += 1
            if events_commits[0] == 2:
                raise Crash("killed between two shards' events commits")

    with pytest.raises(Crash):
        ShardWriter(spark, native_store, cfg, [0, 1], before_commit=die_before_the_second_shard).run()
    restarted = ShardWriter(spark, native_store, cfg, [0, 1])
    progress = restarted.progress()
    assert progress[0] > 0 and progress[1] == 0  # shard 0 done, shard 1 not
    # Shard 0's IDs were never committed (the crash came before them): the restart rebuilds them first.
    assert native_store.transaction_version(cfg.table_uri(ID_INDEX), writer_app_id(0)) is None
    reports = restarted.run()
    assert [r.shards for r in reports] == [(1,)]
    assert restarted.progress() == {0: progress[0], 1: progress[0]}
    ShardWriter(spark, native_store, cfg, [2, 3]).run()
    _exactly_once(spark, native_store, cfg, landing)
    assert native_store.read(cfg.table_uri(ID_INDEX)).count() == native_store.read(cfg.table_uri(EVENTS)).count()


@pytest.mark.slow
def test_a_stale_writer_of_the_same_shards_loses_and_nothing_doubles(
    spark: SparkSession, native_store: TableStore, tmp_path: Path
) -> None:
    cfg, landing = _routed(spark, native_store, tmp_path)
    shards = [0, 1]
    winner = ShardWriter(spark, native_store, cfg, shards)

    def let_the_other_writer_commit_first(table: str) -> None:
        if table == EVENTS and winner.progress()[0] == 0:
            winner.run()

    stale = ShardWriter(spark, native_store, cfg, shards, before_commit=let_the_other_writer_commit_first)
    first = stale.step()
    assert first is not None and first.conflict and first.written == 0
    assert stale.step() is None  # reconciled: nothing left
    ShardWriter(spark, native_store, cfg, [2, 3]).run()
    _exactly_once(spark, native_store, cfg, landing)



@pytest.mark.slow
def test_a_dead_lettered_batch_commits_shard_by_shard_and_a_crash_midway_is_finished_once(
    spark: SparkSession, native_store: TableStore, tmp_path: Path
) -> None:
    """Dead letters on Delta's engine: each shard's letters with its ``dead-letter/<shard>`` alone, then each
    shard's progress with its ``writer/<shard>`` alone (Delta's public writer carries one app id)."""
    from lakeshard.dedupe.faults import RecordLevelFailure
    from lakeshard.landing.reasons import WRITE_FAILED
    from lakeshard.tables import QUARANTINE, ROUTED, dead_letter_app_id

    cfg, _ = _routed(spark, native_store, tmp_path, "spark")
    crashed = [False]

    def unwritable_rows_then_a_crash(table: str) -> None:
        if table == EVENTS:
            raise RecordLevelFailure("RecordLevelFailure: rows too odd to write")
        if table == "dead-letter-progress" and not crashed[0]:
            crashed[0] = True
            raise Crash("killed between the dead-letter commits and the progress commits")

    with pytest.raises(Crash):
        ShardWriter(spark, native_store, cfg, [0, 1], before_commit=unwritable_rows_then_a_crash).run()
    restarted = ShardWriter(spark, native_store, cfg, [0, 1], before_commit=unwritable_rows_then_a_crash)
    restarted.run()  # finishes the dead-lettering first (the batch is not written after all), then the rest
    routed = native_store.version(cfg.table_uri(ROUTED))
    assert restarted.progress() == {0: routed, 1: routed}

    quarantine, events = cfg.table_uri(QUARANTINE), cfg.table_uri(EVENTS)
    letters = [e for e in native_store.log_entries(quarantine, start=0)
               if any(t.app_id.startswith("dead-letter") for t in e.app_transactions)]  # not the router's
    assert {t.app_id for e in letters for t in e.app_transactions} == {dead_letter_app_id(0), dead_letter_app_id(1)}
    assert all(len(e.app_transactions) == 1 for e in letters)
    progress = [e for e in native_store.log_entries(events, start=0) if e.app_transactions]
    assert {t.app_id for e in progress for t in e.app_transactions} == {writer_app_id(0), writer_app_id(1)}
    assert all(len(e.app_transactions) == 1 and not e.changes for e in progress)
    routed_rows = native_store.read(cfg.table_uri(ROUTED)).where("shard IN (0, 1)").count()
    dead = native_store.read(quarantine).where(f"category = '{WRITE_FAILED}'")
    assert dead.count() == routed_rows > 0  # each row once, although the first process died midway
    assert native_store.read(events).count() == 0


def test_rows_that_fail_to_write_by_themselves_are_dead_lettered_shard_by_shard_the_second_round_too(
    spark: SparkSession, native_store: TableStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row Parquet refuses, on Delta's engine: found by bisection, dead-lettered with its shard's app id alone, the
    rest written exactly once; a row refused only once the first is out gets a commit of its own."""
    from refusals import write_with_a_second_round_of_refusals

    cfg, _ = _routed(spark, native_store, tmp_path)
    quarantine = write_with_a_second_round_of_refusals(spark, native_store, cfg, monkeypatch)
    letters = [e for e in native_store.log_entries(quarantine, start=0)
               if any(t.app_id.startswith("dead-letter-rows/") for t in e.app_transactions)]
    assert letters and all(len(e.app_transactions) == 1 for e in letters)  # Delta's public writer carries one
