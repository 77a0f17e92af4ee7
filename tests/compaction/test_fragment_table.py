"""Fragment metadata in the ``fragments`` table: it outlives the Delta log, survives a crash before the swap,
migrates from commit info once, and planning reads only the queried buckets' rows, however long the log."""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakeshard.compaction import Compactor, FragmentTable, fragment_table, read_fragments
from lakeshard.compaction.fragment_table import FragmentRead, fragments_uri
from lakeshard.compaction.fragments import FRAGMENTS_KEY
from lakeshard.compaction.sample import event_rows
from lakeshard.config import load_config
from lakeshard.lake import TableStore
from lakeshard.maintenance import compact_bookkeeping
from lakeshard.query import read_events
from lakeshard.tables import FRAGMENTS

from .conftest import HOURS, AppendEvents, checksum, small_settings

NEEDLE = {"env": "pre.view|1"}
START, END = datetime(2026, 1, 1, 10, tzinfo=UTC), datetime(2026, 1, 1, 12, tzinfo=UTC)


class Died(BaseException):
    """A process dying at an injected point (not an error the compactor handles)."""


def _compacted(store: TableStore, uri: str, append: AppendEvents) -> Compactor:
    append("t1", 6, 60)
    append("t2", 2, 30)
    compactor = Compactor(store, uri, settings=small_settings())
    report = compactor.run(apply=True)
    assert report.rounds and not report.gave_up
    assert not compactor.plan().tasks  # converged
    return compactor


def _needle(store: TableStore, uri: str) -> tuple[set[str], int]:
    df, report = read_events(store.spark, store, uri, tenant="t1", start=START, end=END, predicates=NEEDLE)
    return set(report.read), df.count()


def _expire_log(uri: str) -> None:
    """What a month of Delta does to the log: a checkpoint, then every commit file before it is deleted."""
    DeltaTable(uri).alter.set_table_properties({"delta.logRetentionDuration": "interval 1 second"})
    dt = DeltaTable(uri)
    dt.create_checkpoint()
    time.sleep(1.5)  # older than the retention: not a timed assertion, the cleanup's cut-off
    dt.cleanup_metadata()


def _counting(monkeypatch: pytest.MonkeyPatch, store: TableStore, name: str) -> list[int]:
    """Count, per call of ``store.<name>``, how many items it returned (commits, log entries)."""
    calls: list[int] = []
    original: Callable[..., Any] = getattr(store, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        calls.append(len(out))
        return out

    monkeypatch.setattr(store, name, counted)
    return calls


def test_metadata_outlives_the_log_the_needle_reads_the_same_files_and_nothing_merges_again(
        store: TableStore, events_table: tuple[str, AppendEvents]) -> None:
    uri, append = events_table
    _compacted(store, uri, append)
    read_before, found_before = _needle(store, uri)
    assert found_before > 0
    live = store.files(uri)
    levels_before = {p: m.level for p, m in read_fragments(store, uri, live).items()}
    assert levels_before and all(level >= 1 for level in levels_before.values())

    _expire_log(uri)
    assert not any(FRAGMENTS_KEY in c.custom_metadata for c in store.history(uri)), "the log still holds the swaps"

    assert _needle(store, uri) == (read_before, found_before)
    assert {p: m.level for p, m in read_fragments(store, uri, store.files(uri)).items()} == levels_before
    again = Compactor(store, uri, settings=small_settings())
    assert not again.plan().tasks, "compacted files lost their level and range: they would merge again"


def test_a_crash_between_the_fragments_write_and_the_swap_leaves_a_correct_table(
        store: TableStore, events_table: tuple[str, AppendEvents], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """The orphan rows are ignored by readers, and dropped by maintenance once older than the grace."""
    uri, append = events_table
    append("t1", 6, 60)
    rows_before = checksum(store.read(uri))
    files_before = store.files(uri)
    _, found_before = _needle(store, uri)
    compactor = Compactor(store, uri, settings=small_settings())
    real_write = compactor.fragments.write

    def write_then_die(*args: Any, **kwargs: Any) -> int:
        real_write(*args, **kwargs)  # the rows really commit...
        raise Died("killed between the fragments write and the swap")  # ...the swap never does

    monkeypatch.setattr(compactor.fragments, "write", write_then_die)
    with pytest.raises(Died):
        compactor.run(apply=True)

    fragments = store.read_table_arrow(fragments_uri(uri))
    assert fragments.num_rows > 0, "the rows were committed before the crash"
    live = {unquote(f.path) for f in store.files(uri)}
    assert not set(fragments.column("path").to_pylist()) & live, "rows of files that never became live"
    assert {f.path for f in store.files(uri)} == {f.path for f in files_before}
    assert checksum(store.read(uri)) == rows_before
    assert read_fragments(store, uri, store.files(uri)) == {}  # orphan rows are ignored
    assert _needle(store, uri)[1] == found_before

    monkeypatch.undo()
    report = Compactor(store, uri, settings=small_settings()).run(apply=True)
    assert report.rounds and not report.gave_up
    assert checksum(store.read(uri)) == rows_before and _needle(store, uri)[1] == found_before
    described = read_fragments(store, uri, store.files(uri))
    assert described and all(m.level >= 1 for m in described.values())

    cfg = load_config(overrides={"lakehouse": str(tmp_path)}, env={})
    compact_bookkeeping(store, cfg, tables=[FRAGMENTS], max_files=0)
    kept = store.read_table_arrow(fragments_uri(uri)).column("path").to_pylist()
    assert set(kept) > set(described), "rows younger than the grace are kept: their swap may still land"
    monkeypatch.setattr(fragment_table, "FRAGMENT_GRACE", timedelta(0))
    compact_bookkeeping(store, cfg, tables=[FRAGMENTS], max_files=0)
    assert sorted(store.read_table_arrow(fragments_uri(uri)).column("path").to_pylist()) == sorted(described)
    assert read_fragments(store, uri, store.files(uri)) == described


def test_a_lakehouse_with_metadata_only_in_commit_info_migrates_once(
        store: TableStore, events_table: tuple[str, AppendEvents], monkeypatch: pytest.MonkeyPatch) -> None:
    uri, append = events_table
    _compacted(store, uri, append)
    expected = read_fragments(store, uri, store.files(uri))
    shutil.rmtree(fragments_uri(uri))  # a lakehouse compacted before the fragments table existed
    history = _counting(monkeypatch, store, "history")

    first = FragmentTable(store, uri).read(store.files(uri))
    assert first.migrated and first.found == expected and len(history) == 1
    second = FragmentTable(store, uri).read(store.files(uri))
    assert not second.migrated and second.found == expected and len(history) == 1, "history read again"
    monkeypatch.undo()
    _expire_log(uri)
    assert read_fragments(store, uri, store.files(uri)) == expected


def _tiny_commits(store: TableStore, uri: str, n: int, rng: random.Random) -> None:
    """Commit ``n`` one-row appends to other tenants (as writers' flushes do), with pyarrow: cheap commits."""
    schema = store.arrow_schema(uri)
    for i in range(n):
        rows = event_rows(rng, f"other-{i % 7}", HOURS[i % 2], 1, 10_000 + i)
        store.append_arrow(uri, pa.Table.from_pylist(rows, schema=schema))


def _recording(read: Callable[..., FragmentRead], into: list[tuple[int, int]]) -> Callable[..., FragmentRead]:
    def recorded(self: FragmentTable, files: Any) -> FragmentRead:
        out = read(self, files)
        into.append((out.files_read, out.rows_scanned))
        return out

    return recorded


def test_planning_a_needle_query_reads_no_history_and_the_same_rows_with_10_or_200_commits(
        store: TableStore, events_table: tuple[str, AppendEvents], monkeypatch: pytest.MonkeyPatch) -> None:
    uri, append = events_table
    _compacted(store, uri, append)
    _needle(store, uri)  # the first use (migration of a lakehouse without the table) is not what is measured
    rng = random.Random(7)
    costs = []
    for commits in (10, 190):  # 10, then 200 commits since the compaction
        _tiny_commits(store, uri, commits, rng)
        history = _counting(monkeypatch, store, "history")
        entries = _counting(monkeypatch, store, "log_entries")
        reads: list[tuple[int, int]] = []
        monkeypatch.setattr(FragmentTable, "read", _recording(FragmentTable.read, reads))
        _needle(store, uri)
        monkeypatch.undo()
        assert sum(history) == 0 and sum(entries) == 0, f"planning read {sum(history)} commits of the log"
        costs.append(reads)
    assert costs[0] == costs[1] and costs[0][0][1] > 0
