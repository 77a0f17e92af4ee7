"""Faults are not bad data: a writer step that fails on the storage under it retries with backoff, then stops
loudly with its progress unchanged; nothing reaches the quarantine. Faults are injected around the real embedded
Delta store (every commit that happens is a real delta-rs commit)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from lakeshard.config import LakeshardConfig, load_config
from lakeshard.dedupe.faults import RetryPolicy, WriterStepFailed
from lakeshard.dedupe.writer import EVENTS, ShardWriter
from lakeshard.errors import TableStoreError
from lakeshard.lake import TableStore
from lakeshard.routing.router import Router
from lakeshard.synth import SynthSpec, generate_landing
from lakeshard.synth.verify import check_against_truth
from lakeshard.tables import QUARANTINE, ROUTED

FAST = {"retry_initial_seconds": 0.01, "retry_max_delay_seconds": 0.05, "retry_total_seconds": 1.0}


class FaultyStore:
    """The real store, except that ``append`` to one table raises while ``faulty`` says so.

    ``when="before"``: the append fails before anything is written. ``when="after-write"``: the data files are
    written by the real store (its ``write=`` callback runs), then the callback raises, so the store gives up
    before committing: files on disk, nothing in the log.
    """

    def __init__(self, real: TableStore, table: str, faulty: Callable[[], bool], error: Callable[[], Exception],
                 when: str = "before") -> None:
        self._real, self._table, self._faulty, self._error, self._when = real, table, faulty, error, when
        self.raised = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def append(self, table: str, df: Any, **kwargs: Any) -> Any:
        if not table.rstrip("/").endswith("/" + self._table) or not self._faulty():
            return self._real.append(table, df, **kwargs)
        self.raised += 1
        if self._when == "before":
            raise self._error()
        write = kwargs.pop("write")

        def write_then_fail(target: str) -> Any:
            write(target)
            raise self._error()

        return self._real.append(table, df, write=write_then_fail, **kwargs)


def _zone(spark: SparkSession, store: TableStore, tmp_path: Path) -> tuple[LakeshardConfig, str]:
    landing = tmp_path / "landing"
    generate_landing(landing, SynthSpec(events=800, tenants=4, hours=0.5, seed=9, retry_rate=0.1, bad_rate=0.0))
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": str(landing),
                                 "routing": {"total_shards": 2, "default_shard_count": 2}, "dedupe": FAST}, env={})
    Router(spark, store, cfg).run()
    return cfg, str(landing)


def _exactly_once(spark: SparkSession, store: TableStore, cfg: LakeshardConfig, landing: str) -> None:
    check = check_against_truth(spark, store.read(cfg.table_uri(EVENTS)), landing)
    assert check.exactly_once, check


def _quarantined(store: TableStore, cfg: LakeshardConfig) -> int:
    uri = cfg.table_uri(QUARANTINE)
    return store.read(uri).where("category = 'write_failed'").count() if store.exists(uri) else 0


ERRORS: dict[str, Callable[[], Exception]] = {
    "os-error": lambda: OSError("storage blip: connection reset"),
    "memory-error": lambda: MemoryError("cannot allocate"),
    "store-error": lambda: TableStoreError("events: object store returned 503"),
}


@pytest.mark.parametrize("when", ["before", "after-write"])
@pytest.mark.parametrize("error", sorted(ERRORS))
def test_a_fault_for_a_while_is_retried_and_the_step_commits_exactly_once(
    spark: SparkSession, store: TableStore, tmp_path: Path, when: str, error: str
) -> None:
    cfg, landing = _zone(spark, store, tmp_path)
    calls = [0]

    def first_three() -> bool:
        calls[0] += 1
        return calls[0] <= 3

    faulty = FaultyStore(store, EVENTS, first_three, ERRORS[error], when)
    writer = ShardWriter(spark, faulty, cfg, [0, 1])  # type: ignore[arg-type]
    reports = writer.run()
    assert faulty.raised == 3 and writer.failures == 3
    assert sum(r.dead_lettered for r in reports) == 0 and _quarantined(store, cfg) == 0
    assert writer.progress() == {0: store.version(cfg.table_uri(ROUTED)), 1: store.version(cfg.table_uri(ROUTED))}
    _exactly_once(spark, store, cfg, landing)


@pytest.mark.parametrize("when", ["before", "after-write"])
def test_a_fault_that_does_not_go_away_stops_the_run_loudly_with_progress_and_quarantine_unchanged(
    spark: SparkSession, store: TableStore, tmp_path: Path, when: str
) -> None:
    cfg, landing = _zone(spark, store, tmp_path)
    faulty = FaultyStore(store, EVENTS, lambda: True, ERRORS["os-error"], when)
    writer = ShardWriter(spark, faulty, cfg, [0, 1])  # type: ignore[arg-type]
    before = writer.progress()
    with pytest.raises(WriterStepFailed) as failed:
        writer.run()
    message = str(failed.value)
    routed_version = store.version(cfg.table_uri(ROUTED))
    assert "shards [0, 1]" in message and f"routed version {routed_version}" in message
    assert "OSError: storage blip: connection reset" in message and "\n" not in message
    assert failed.value.attempts >= 3 and isinstance(failed.value.__cause__, OSError)
    assert writer.progress() == before == {0: 0, 1: 0}
    assert _quarantined(store, cfg) == 0
    assert store.read(cfg.table_uri(EVENTS)).count() == 0  # the orphan files written are not visible

    # The fault gone, a later run writes the batch, once.
    ShardWriter(spark, store, cfg, [0, 1]).run()
    _exactly_once(spark, store, cfg, landing)
    assert _quarantined(store, cfg) == 0


@pytest.mark.parametrize("error", [
    lambda: ValueError("too many values to unpack (expected 2)"),  # a pyarrow older than a call expects
    lambda: TypeError("sort_indices() got an unexpected keyword argument 'null_placement'"),
    lambda: AttributeError("'Table' object has no attribute 'sort_by'"),
    lambda: KeyError("tenant_id"),
])
@pytest.mark.parametrize("when", ["before", "after-write"])
def test_a_programming_error_stops_the_step_at_once_with_progress_and_quarantine_unchanged(
    spark: SparkSession, store: TableStore, tmp_path: Path, when: str, error: Callable[[], Exception]
) -> None:
    cfg, landing = _zone(spark, store, tmp_path)
    # A retried error would be tried again and again for a minute.
    cfg = dataclasses.replace(cfg, dedupe=dataclasses.replace(cfg.dedupe, retry_total_seconds=60.0))
    faulty = FaultyStore(store, EVENTS, lambda: True, error, when)
    writer = ShardWriter(spark, faulty, cfg, [0, 1])  # type: ignore[arg-type]
    before = writer.progress()
    with pytest.raises(type(error())) as raised:
        writer.run()
    assert not isinstance(raised.value, WriterStepFailed)
    assert faulty.raised == 1 and writer.failures == 0  # never retried
    assert writer.progress() == before and _quarantined(store, cfg) == 0
    assert store.read(cfg.table_uri(EVENTS)).count() == 0
    ShardWriter(spark, store, cfg, [0, 1]).run()  # the bug fixed, the batch is written once
    _exactly_once(spark, store, cfg, landing)


def test_the_engines_own_errors_and_storage_errors_are_retried_python_s_own_kinds_are_not() -> None:
    import json

    import pyarrow as pa

    from lakeshard.dedupe.faults import is_infrastructure_fault

    retried = [OSError("reset"), MemoryError(), TableStoreError("503"), pa.ArrowInvalid("Parquet magic bytes"),
               pa.ArrowIOError("torn"), json.JSONDecodeError("torn log entry", "{", 1), RuntimeError("py4j"),
               UnicodeDecodeError("utf-8", b"\xff", 0, 1, "torn")]
    stopped = [ValueError("x"), TypeError("x"), AttributeError("x"), KeyError("x"), IndexError("x"),
               NameError("x"), AssertionError("x"), NotImplementedError("x"), ModuleNotFoundError("x")]
    assert [type(e).__name__ for e in retried if not is_infrastructure_fault(e)] == []
    assert [type(e).__name__ for e in stopped if is_infrastructure_fault(e)] == []


def test_the_backoff_doubles_up_to_its_cap_and_stops_within_the_budget() -> None:
    clock = [0.0]
    waits = []
    for delay in RetryPolicy(0.5, 4.0, 20.0).delays(lambda: clock[0]):
        waits.append(delay)
        clock[0] += delay
    assert waits == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0]
    assert sum(waits) <= 20.0


def test_lakeshard_ingest_reports_a_lasting_storage_fault_in_one_paragraph_and_exits_non_zero(
    spark: SparkSession, store: TableStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str]
) -> None:
    import lakeshard.lake
    from lakeshard.app.cli import main

    landing = tmp_path / "landing"
    generate_landing(landing, SynthSpec(events=300, tenants=3, hours=0.2, seed=4, bad_rate=0.0))
    real_open = lakeshard.lake.open_lazy_store
    monkeypatch.setattr(lakeshard.lake, "open_lazy_store",
                        lambda cfg: FaultyStore(real_open(cfg), EVENTS, lambda: True, ERRORS["os-error"]))
    monkeypatch.setenv("LAKESHARD_DEDUPE_RETRY_TOTAL_SECONDS", "0.3")
    monkeypatch.setenv("LAKESHARD_DEDUPE_RETRY_INITIAL_SECONDS", "0.05")
    code = main(["ingest", "--lakehouse", str(tmp_path / "lh"), "--landing", str(landing)])
    err = capsys.readouterr().err
    assert code == 2
    assert "Traceback" not in err and err.count("\n") == 1
    assert err.startswith("error: shard writer for shards [") and "OSError: storage blip" in err


def test_rows_that_fail_to_write_by_themselves_are_dead_lettered_and_the_rest_commits_exactly_once(
    spark: SparkSession, store: TableStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lakeshard.lake

    cfg, _ = _zone(spark, store, tmp_path)
    routed = store.read(cfg.table_uri(ROUTED)).where("shard IN (0, 1)")
    poison = sorted({str(r["event_id"]) for r in routed.select("event_id").limit(40).collect()})[:2]
    real_write = lakeshard.lake.write_partitioned

    def write_rejecting_poison(rows: Any, target: str, *args: Any, **kwargs: Any) -> Any:
        if "event_id" in rows.column_names and set(rows.column("event_id").to_pylist()) & set(poison):
            raise ValueError("cannot encode this row")  # a row the file format refuses, wherever it is written
        return real_write(rows, target, *args, **kwargs)

    monkeypatch.setattr(lakeshard.lake, "write_partitioned", write_rejecting_poison)
    reports = ShardWriter(spark, store, cfg, [0, 1]).run()
    poisoned = routed.where(routed.event_id.isin(poison)).count()
    assert sum(r.dead_lettered for r in reports) == poisoned == _quarantined(store, cfg) > 0
    assert all(r.rows_in == r.written + r.duplicates_in_batch + r.duplicates_in_index + r.dead_lettered
               for r in reports)
    events = store.read(cfg.table_uri(EVENTS))
    expected = routed.where(~routed.event_id.isin(poison)).dropDuplicates(["tenant_id", "event_id", "ts"]).count()
    assert events.count() == events.dropDuplicates(["tenant_id", "event_id", "ts"]).count() == expected
    assert "cannot encode this row" in str(store.read(cfg.table_uri(QUARANTINE)).first()["reason"])  # type: ignore[index]
    # Each letter names the landing line it came from, as the routed rows do.
    lines = {(r["source_file"], r["line_number"])
             for r in routed.where(routed.event_id.isin(poison)).select("source_file", "line_number").collect()}
    letters = store.read_table_arrow(cfg.table_uri(QUARANTINE), ["source_file", "line_number"]).to_pylist()
    assert None not in lines and {(r["source_file"], r["line_number"]) for r in letters} == lines


def test_a_row_refused_only_once_another_is_dead_lettered_is_dead_lettered_too(
    spark: SparkSession, store: TableStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from refusals import write_with_a_second_round_of_refusals

    cfg, _ = _zone(spark, store, tmp_path)
    write_with_a_second_round_of_refusals(spark, store, cfg, monkeypatch)


def test_rows_dead_lettered_together_for_different_reasons_each_keep_their_own(
    spark: SparkSession, store: TableStore, tmp_path: Path
) -> None:
    import json
    import random

    from lakeshard.dedupe.deadletters import quarantine_rows

    cfg, _ = _zone(spark, store, tmp_path)
    routed = cfg.table_uri(ROUTED)
    files = [f for f in store.files(routed) if f.partition_values.get("shard") in ("0", "1")]
    rows = store.read_arrow(routed, files, columns=["tenant_id", "event_id", "ts", "source_file", "line_number"])
    picked = random.Random(5).sample(rows.to_pylist(), 6)
    unwritable = {(r["tenant_id"], r["event_id"], r["ts"]): f"reason {i}" for i, r in enumerate(picked)}
    lettered = quarantine_rows(store, routed, cfg.table_uri(QUARANTINE), files, unwritable, [0, 1],
                               store.version(routed))
    letters = store.read_table_arrow(cfg.table_uri(QUARANTINE), ["raw", "reason", "source_file", "line_number"])
    # Copies of a picked key (re-sent events) are dead-lettered with it, each with the key's reason and its own line.
    copies = [r for r in rows.to_pylist() if (r["tenant_id"], r["event_id"], r["ts"]) in unwritable]
    assert lettered == letters.num_rows == len(copies) >= len(picked)
    by_line = {(r["source_file"], r["line_number"]): r for r in letters.to_pylist()}
    for copy in copies:
        letter = by_line[(copy["source_file"], copy["line_number"])]
        assert json.loads(letter["raw"])["event_id"] == copy["event_id"]
        key = (copy["tenant_id"], copy["event_id"], copy["ts"])
        assert letter["reason"] == f"write_failed: {unwritable[key]}"


def test_a_write_that_fails_for_every_row_is_a_fault_not_bad_data(
    spark: SparkSession, store: TableStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lakeshard.lake

    cfg, _ = _zone(spark, store, tmp_path)

    def disk_full(*args: Any, **kwargs: Any) -> None:
        raise OSError("No space left on device")

    monkeypatch.setattr(lakeshard.lake, "write_partitioned", disk_full)
    with pytest.raises(WriterStepFailed, match="No space left on device"):
        ShardWriter(spark, store, cfg, [0, 1]).run()
    assert _quarantined(store, cfg) == 0


def test_bisection_names_only_rows_that_fail_alone() -> None:
    import pyarrow as pa

    from lakeshard.dedupe.faults import unwritable_rows

    rows = pa.table({"event_id": [f"e{i}" for i in range(37)]})

    def refuses(bad: set[str]) -> Callable[[pa.Table], None]:
        def write(part: pa.Table) -> None:
            if set(part.column("event_id").to_pylist()) & bad:
                raise ValueError("refused")
        return write

    assert unwritable_rows(rows, refuses({"e3", "e30"})) == [3, 30]
    assert unwritable_rows(rows, refuses(set())) == []

    def everything_fails(part: pa.Table) -> None:
        raise OSError("disk gone")

    def too_big(part: pa.Table) -> None:
        if part.num_rows > 10:
            raise MemoryError("batch too big")

    assert unwritable_rows(rows, everything_fails) == []  # not about rows
    assert unwritable_rows(rows, too_big) == []  # no row fails alone: about the batch
