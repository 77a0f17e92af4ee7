"""Compaction on Delta's own engine: one whole bucket per commit through Delta's public writer (``replaceWhere``,
``dataChange=false``), fragment rows written after the swap commit names the new files.

Runs on the classic session and, listed in ``tests/runtime/test_connect.py``, under Spark Connect.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from lakeshard.compaction import Compactor
from lakeshard.compaction.sample import HOURS, SmallFileTable
from lakeshard.lake.native import public

from .conftest import checksum, small_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakeshard.lake import TableStore


@pytest.fixture
def native_events(spark: SparkSession, native_store: TableStore, tmp_path: Path) -> SmallFileTable:
    """Return a fresh small-file events table on Delta's engine: bucket t1 of both hours, 5 files of 30 rows."""
    table = SmallFileTable(spark, native_store, str(tmp_path / "events"))
    table.append("t1", 5, 30)
    return table


def _bucket_files(store: TableStore, uri: str, hour: str) -> list[str]:
    return sorted(f.path for f in store.files(uri) if f.partition_values.get("hour") == hour)


def test_compaction_swaps_each_whole_bucket_in_a_commit_of_its_own(native_store: TableStore,
                                                                    native_events: SmallFileTable) -> None:
    uri = native_events.uri
    before = checksum(native_store.read(uri))
    start = native_store.version(uri)
    compactor = Compactor(native_store, uri, settings=small_settings())
    report = compactor.run(apply=True)
    assert not report.gave_up and not report.failed
    assert checksum(native_store.read(uri)) == before
    swaps = [e for e in native_store.log_entries(uri, start=start + 1)]
    assert swaps and all({c.file.partition_values["hour"] for c in e.changes} in ({h} for h in HOURS)
                         for e in swaps), "one bucket per commit"
    assert all(not c.data_change for e in swaps for c in e.changes)
    live = native_store.files(uri)
    found = compactor.fragments.read(live).found
    assert {f.path for f in live} == set(found), "every output is described in the fragments table"
    assert all(m.level >= 1 and m.first_key for m in found.values())


def test_an_append_landing_after_lakeshards_log_check_fails_the_swap_which_retries(
        native_store: TableStore, native_events: SmallFileTable, monkeypatch: pytest.MonkeyPatch) -> None:
    """The append commits after the store read the log and before Delta's write starts its transaction:
    replaceWhere would remove its file without its rows; the swap's in-write check fails it instead."""
    uri = native_events.uri
    real = public.PublicCommits.replace_partitions
    appended: list[int] = []

    def append_first(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not appended:
            native_events.append("t1", 1, 7)  # both hours: the bucket being swapped gains a file
            appended.append(native_store.version(uri))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(public.PublicCommits, "replace_partitions", append_first)
    before = native_store.read(uri).count()
    report = Compactor(native_store, uri, settings=small_settings(max_retries=3)).run(apply=True)
    assert appended and not report.gave_up
    assert report.conflicts >= 1, "the first swap must have lost to the append"
    from pyspark.sql import functions as F

    stats = native_store.read(uri).agg(F.count("*").alias("n"), F.countDistinct("event_id").alias("ids")).first()
    assert stats is not None and (stats["n"], stats["ids"]) == (before + 2 * 7, before + 2 * 7)


def test_the_in_write_check_refuses_a_bucket_that_gained_a_file(native_store: TableStore,
                                                                native_events: SmallFileTable) -> None:
    """Without lakeshard's look at the log, Delta's write alone: the stale swap fails and the table is unchanged."""
    from lakeshard.errors import CommitConflict
    from lakeshard.lake.native.public import PublicCommits, whole_partitions_predicate

    uri = native_events.uri
    store: Any = native_store
    state = store._log.state(uri)
    files = _bucket_files(native_store, uri, HOURS[0])
    predicate = whole_partitions_predicate(state, files)
    assert predicate is not None
    rows = store.read_files(uri, [state.files[p] for p in files])
    native_events.append("t1", 1, 7)
    before = checksum(native_store.read(uri))
    with pytest.raises(CommitConflict, match="partitions changed"):
        PublicCommits(store._log).replace_partitions(uri, rows, state, predicate, files, (), None, False)
    assert checksum(native_store.read(uri)) == before


class _Died(BaseException):
    """Stands for the process dying between the swap commit and the fragment rows."""


def test_a_crash_between_the_swap_and_its_fragment_rows_leaves_a_table_readers_and_compaction_handle(
        native_store: TableStore, native_events: SmallFileTable, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = native_events.uri
    before = checksum(native_store.read(uri))
    dying = Compactor(native_store, uri, settings=small_settings())

    def die(*args: Any, **kwargs: Any) -> int:
        raise _Died

    dying.fragments.ensure()  # the fragments table exists: the next write is the swap's rows
    monkeypatch.setattr(dying.fragments, "write", die)
    with pytest.raises(_Died):
        dying.run(apply=True, buckets=[("t1", HOURS[0])])
    assert checksum(native_store.read(uri)) == before
    swapped = [f for f in native_store.files(uri) if f.partition_values["hour"] == HOURS[0]]
    assert len(swapped) == 1, "the swap landed: the bucket's 5 files are one"
    fresh = Compactor(native_store, uri, settings=small_settings())
    nodes = {n.path: n for n in fresh.snapshot()[2]}
    assert nodes[swapped[0].path].level == 0 and nodes[swapped[0].path].first_key is None
    report = fresh.run(apply=True)
    assert not report.gave_up and not report.failed
    assert checksum(native_store.read(uri)) == before


def test_compaction_while_appending_to_the_same_buckets_on_delta_engine(native_store: TableStore,
                                                                        native_events: SmallFileTable) -> None:
    """Appends racing the whole-bucket swaps: appended rows stay, compacted rows are neither lost nor doubled."""
    from .test_concurrency import _assert_exactly_once, _in_thread

    uri = native_events.uri
    before = native_store.read(uri).count()
    thread, errors = _in_thread(lambda: [native_events.append("t1", 1, 11) for _ in range(3)])
    report = Compactor(native_store, uri, settings=small_settings(max_retries=6)).run(apply=True)
    thread.join()
    assert not errors, errors
    assert report.rounds and not report.failed
    _assert_exactly_once(native_store, uri, before + 3 * len(HOURS) * 11)
