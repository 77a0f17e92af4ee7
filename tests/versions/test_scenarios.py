"""The Druid proposal's scenarios on real Delta tables, with a task failing in the middle of each.

Every test checks the proposal's promise at *every* table version: a query sees whole commits only —
each ingestion batch is entirely in or entirely out, and no row appears twice (no duplicate, no gap).
A "crash" is a task dying after it wrote its Parquet files and before it committed them; a dead
replacer keeps its lock (nothing releases it) until the lease runs out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _chunk_table import CHUNK_TABLE_SCHEMA, Rows, ids
from pyspark.sql import SparkSession

from lakeshard.errors import CommitConflict
from lakeshard.lake import TableStore
from lakeshard.lake.embedded import EmbeddedTableStore
from lakeshard.versions import Chunk, ChunkLocked, ChunkLocks, ChunkVersions, read_chunk, replace_chunk

H10 = "2026-01-01T10"
ACME10 = Chunk("acme", H10)


class Crash(Exception):
    """Stands in for a task's process dying between writing its files and committing them."""


class Interleaving(EmbeddedTableStore):
    """The embedded store with a hook between writing a commit's Parquet files and committing them."""

    def __init__(self, spark: SparkSession, after_write: Callable[[], None]) -> None:
        super().__init__(spark)
        self.after_write = after_write

    def _write_files(self, shape: Any, df: Any, write: Any, data_change: bool) -> Any:
        written = super()._write_files(shape, df, write, data_change)
        self.after_write()
        return written


def _die() -> None:
    raise Crash("task died after writing its files")


def _ids_of(prefix: str, n: int) -> set[str]:
    return {f"{prefix}-{i}" for i in range(n)}


def _assert_whole_commits_at_every_version(
    store: TableStore, uri: str, batches: Mapping[str, set[str]], since: int = 1
) -> list[frozenset[str]]:
    """Assert each version shows every batch entirely or not at all, without duplicates; return what it shows."""
    seen = []
    for v in range(since, store.version(uri) + 1):
        got = ids(read_chunk(store.spark, store, uri, ACME10, v))
        assert len(got) == len(set(got)), f"duplicates at version {v}"
        present = frozenset(name for name, rows in batches.items() if rows & set(got))
        assert set(got) == set().union(*(batches[n] for n in present)), f"a partial batch at version {v}"
        seen.append(present)
    return seen


def _table(store: TableStore, tmp_path: Path, name: str) -> str:
    uri = str(tmp_path / name)
    store.create(uri, CHUNK_TABLE_SCHEMA, partition_by=["tenant_id", "hour"])
    return uri


def _ingest_s1_to_s4(store: TableStore, uri: str, rows: Rows) -> dict[str, set[str]]:
    for s in ("s1", "s2", "s3", "s4"):
        store.append(uri, rows("acme", H10, s, 3))
    return {s: _ids_of(s, 3) for s in ("s1", "s2", "s3", "s4")}


@pytest.mark.parametrize("i1_fails", [False, True])
def test_concurrent_ingestion_into_one_chunk(
    spark: SparkSession, store: TableStore, rows: Rows, tmp_path: Path, i1_fails: bool
) -> None:
    uri = _table(store, tmp_path, "events")
    # I1 writes its files; meanwhile I2 runs start to finish; then I1 commits (or dies).
    i2 = lambda: store.append(uri, rows("acme", H10, "i2", 4))  # noqa: E731
    i1 = Interleaving(spark, lambda: (i2(), _die() if i1_fails else None))
    if i1_fails:
        with pytest.raises(Crash):
            i1.append(uri, rows("acme", H10, "i1", 5))
        on_disk = len(list(Path(uri).rglob("*.parquet")))
        assert on_disk == 2  # I1's orphan and I2's file; only I2's is in the log
        assert ids(read_chunk(spark, store, uri, ACME10)) == sorted(_ids_of("i2", 4))
        store.append(uri, rows("acme", H10, "i1", 5))  # the retried task
    else:
        i1.append(uri, rows("acme", H10, "i1", 5))
    seen = _assert_whole_commits_at_every_version(store, uri, {"i1": _ids_of("i1", 5), "i2": _ids_of("i2", 4)})
    assert seen == [frozenset({"i2"}), frozenset({"i1", "i2"})]  # V1 = I2's segments; V2 = V1 plus I1's


def _compact(store: TableStore, uri: str, lease: Any, read_at: int, **kw: Any) -> None:
    compacted = read_chunk(store.spark, store, uri, ACME10, read_at).coalesce(1)
    replace_chunk(store, uri, ACME10, compacted, lease=lease, read_version=read_at, data_change=False, **kw)


def test_ingestion_and_compaction_end_the_same_in_either_order(
    spark: SparkSession, store: TableStore, rows: Rows, tmp_path: Path
) -> None:
    finals = {}
    for order in ("ingestion_first", "compaction_first"):
        uri = _table(store, tmp_path, order)
        batches = _ingest_s1_to_s4(store, uri, rows)
        locks = ChunkLocks(store, str(tmp_path / f"locks-{order}"), holder=f"c1-{order}")
        with locks.lock("acme", H10) as lease:  # C1 starts at V4 and locks the chunk
            read_at = store.version(uri)
            with pytest.raises(ChunkLocked):  # a second compaction C2 of the chunk fails at once
                ChunkLocks(store, str(tmp_path / f"locks-{order}"), holder="c2").acquire(ACME10)
            if order == "ingestion_first":
                store.append(uri, rows("acme", H10, "s5", 2))  # I3 completes: V5
                _compact(store, uri, lease, read_at)  # C1 completes: V6 drops S1-S4, keeps I3's, adds S7
            else:
                # I3 has written its files when C1 completes (V5); I3 then commits V6.
                c1 = lambda u=uri, v=read_at: _compact(store, u, lease, v)  # noqa: E731
                Interleaving(spark, c1).append(uri, rows("acme", H10, "s5", 2))
        batches["s5"] = _ids_of("s5", 2)
        _assert_whole_commits_at_every_version(store, uri, batches)
        v6 = ChunkVersions(store, uri, ACME10).snapshot()
        assert v6.version == 6 and len(v6.files) == 2 and v6.rows == 14  # the compacted file + I3's file
        finals[order] = sorted(tuple(r) for r in read_chunk(spark, store, uri, ACME10).drop("ts").collect())
    assert finals["ingestion_first"] == finals["compaction_first"]
    assert len(finals["ingestion_first"]) == 14


def test_replace_with_nothing_needs_no_tombstone_and_an_append_in_flight_retries(
    spark: SparkSession, store: TableStore, rows: Rows, tmp_path: Path
) -> None:
    uri = _table(store, tmp_path, "events")
    batches = _ingest_s1_to_s4(store, uri, rows)
    store.append(uri, rows("zeta", H10, "z", 2))
    locks = ChunkLocks(store, str(tmp_path / "locks"), holder="r1")
    before = store.version(uri)
    result = replace_chunk(store, uri, ACME10, None, locks=locks)
    assert (result.files_added, result.files_removed) == (0, 4)
    emptied = ChunkVersions(store, uri, ACME10).show(result.version)
    assert emptied.added == () and len(emptied.dropped) == 4 and emptied.rows_dropped == 12
    assert read_chunk(spark, store, uri, ACME10).count() == 0
    assert ids(read_chunk(spark, store, uri, ACME10, before)) == sorted(set().union(*batches.values()))
    assert read_chunk(spark, store, uri, "zeta/2026-01-01T10").count() == 2  # other chunks untouched

    # An append in flight while a data-changing replacement commits: delta-rs prepares every append as if it
    # had read the whole table, so the append loses with a conflict (nothing of it visible) and is retried —
    # the Druid order "replacement first, then ingestion". (A compaction, dataChange=false, does not do this.)
    store.append(uri, rows("acme", H10, "s5", 2))
    read_at = store.version(uri)
    in_flight = Interleaving(spark, lambda: replace_chunk(store, uri, ACME10, None, locks=locks, read_version=read_at))
    with pytest.raises(CommitConflict, match="concurrent transaction deleted data"):
        in_flight.append(uri, rows("acme", H10, "s6", 3))
    assert read_chunk(spark, store, uri, ACME10).count() == 0
    store.append(uri, rows("acme", H10, "s6", 3))  # the retry (a shard writer re-steps after a conflict)
    assert ids(read_chunk(spark, store, uri, ACME10)) == sorted(_ids_of("s6", 3))


@pytest.mark.parametrize("replacement", ["compaction", "replace_with_nothing"])
def test_a_replacer_dying_mid_task_changes_nothing_and_blocks_only_replacers_until_its_lease_ends(
    spark: SparkSession, store: TableStore, rows: Rows, tmp_path: Path, replacement: str
) -> None:
    uri = _table(store, tmp_path, "events")
    batches = _ingest_s1_to_s4(store, uri, rows)
    locks_uri = str(tmp_path / "locks")
    dead = ChunkLocks(store, locks_uri, holder="dead-compactor", lease=timedelta(minutes=5))
    lease = dead.acquire(ACME10)  # nothing will ever release it: the process dies holding it
    read_at = store.version(uri)
    with pytest.raises(Crash):
        if replacement == "compaction":
            compacted = read_chunk(spark, store, uri, ACME10, read_at).coalesce(1)
            replace_chunk(Interleaving(spark, _die), uri, ACME10, compacted, lease=lease, read_version=read_at,
                          data_change=False)
        else:
            replace_chunk(store, uri, ACME10, None, lease=lease, before_commit=_die)
    assert store.version(uri) == read_at  # nothing committed
    store.append(uri, rows("acme", H10, "s5", 2))  # ingestion goes on regardless
    batches["s5"] = _ids_of("s5", 2)
    with pytest.raises(ChunkLocked, match="by dead-compactor"):
        replace_chunk(store, uri, ACME10, None, locks=ChunkLocks(store, locks_uri, holder="next"))
    later = lease.expires_at + timedelta(seconds=1)
    successor = ChunkLocks(store, locks_uri, holder="next", clock=lambda: later)
    read_at = store.version(uri)
    with successor.lock("acme", H10) as held:
        _compact(store, uri, held, read_at)
    seen = _assert_whole_commits_at_every_version(store, uri, batches)
    assert seen[-1] == frozenset(batches) and len(ChunkVersions(store, uri, ACME10).snapshot().files) == 1


def test_ingestion_dying_mid_task_during_a_compaction_loses_nothing_once_retried(
    spark: SparkSession, store: TableStore, rows: Rows, tmp_path: Path
) -> None:
    uri = _table(store, tmp_path, "events")
    batches = _ingest_s1_to_s4(store, uri, rows)
    locks = ChunkLocks(store, str(tmp_path / "locks"), holder="c1")
    with locks.lock("acme", H10) as lease:
        read_at = store.version(uri)
        with pytest.raises(Crash):
            Interleaving(spark, _die).append(uri, rows("acme", H10, "s5", 2))  # I3 dies with its files written
        _compact(store, uri, lease, read_at)
    assert ids(read_chunk(spark, store, uri, ACME10)) == sorted(set().union(*batches.values()))
    store.append(uri, rows("acme", H10, "s5", 2))  # I3 retried (a writer replays from its committed progress)
    batches["s5"] = _ids_of("s5", 2)
    seen = _assert_whole_commits_at_every_version(store, uri, batches)
    assert seen[-1] == frozenset(batches)
    live = {f.path for f in store.files(uri)}
    orphans = [p for p in Path(uri).rglob("*.parquet") if str(p.relative_to(uri)) not in live]
    assert orphans  # the dead task's files: on disk, never in any version (vacuum removes them)
