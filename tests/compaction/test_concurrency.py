"""Compaction racing other commits on the same bucket: every row ends up in the table exactly once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lakeshard.compaction import Compactor

from .conftest import HOURS, AppendEvents, checksum, small_settings

if TYPE_CHECKING:
    from lakeshard.lake import TableStore


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # surfaced by the test below
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def _assert_exactly_once(store: TableStore, uri: str, expected_rows: int) -> None:
    from pyspark.sql import functions as F

    df = store.read(uri)
    stats = df.agg(F.count("*").alias("n"), F.countDistinct("tenant_id", "event_id", "ts").alias("ids")).first()
    assert stats is not None
    assert (stats["n"], stats["ids"]) == (expected_rows, expected_rows)


def test_compaction_while_appending_to_the_same_bucket(store: TableStore,
                                                       events_table: tuple[str, AppendEvents]) -> None:
    """Appends landing during a compaction stay live; compacted rows are neither lost nor doubled."""
    uri, append = events_table
    append("t1", 5, 30)
    compactor = Compactor(store, uri, settings=small_settings(max_retries=5))
    thread, errors = _in_thread(lambda: [append("t1", 2, 20) for _ in range(3)])
    report = compactor.run(apply=True)
    thread.join()
    assert not errors, errors
    assert report.rounds and not report.gave_up
    _assert_exactly_once(store, uri, len(HOURS) * (5 * 30 + 3 * 2 * 20))


def test_two_compactions_of_one_bucket_never_double_rows(store: TableStore,
                                                         events_table: tuple[str, AppendEvents]) -> None:
    """Two compactors racing for the same files: one swap wins, the other retries on what is live or gives up."""
    uri, append = events_table
    append("t1", 5, 30)
    before = checksum(store.read(uri))
    reports = []
    t1, e1 = _in_thread(lambda: reports.append(Compactor(store, uri, settings=small_settings()).run(apply=True)))
    t2, e2 = _in_thread(lambda: reports.append(Compactor(store, uri, settings=small_settings()).run(apply=True)))
    t1.join()
    t2.join()
    assert not e1 and not e2, (e1, e2)
    assert checksum(store.read(uri)) == before
    assert sum(len(r.rounds) for r in reports) >= 1
