"""Compaction on real Delta tables: rows preserved exactly, sorted disjoint outputs, metadata in the same commit."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow.parquet as pq
import pytest

from lakeshard.compaction import EVENTS_SORT_SCHEMA, CompactionError, Compactor, read_fragments
from lakeshard.compaction.fragments import FRAGMENTS_KEY
from lakeshard.compaction.outliers import OutlierSplit
from lakeshard.compaction.sort_schema import key_of
from lakeshard.lake import FileInfo
from lakeshard.pruning import may_contain
from lakeshard.query import read_events

from .conftest import HOURS, AppendEvents, checksum, small_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakeshard.lake import TableStore


def _rows_in_file(root: str, f: FileInfo) -> list[dict[str, Any]]:
    return pq.read_table(f"{root}/{unquote(f.path)}", columns=list(EVENTS_SORT_SCHEMA.columns)).to_pylist()


def assert_sorted_and_disjoint(store: TableStore, uri: str, files: list[FileInfo]) -> None:
    """Every file is sorted by the sort schema; files of one bucket, level and lane (outlier or not) do not
    overlap."""
    fragments = read_fragments(store, uri, files)
    ranges: dict[tuple[Any, ...], list[tuple[Any, Any]]] = {}
    for f in files:
        keys = [key_of([r[c] for c in EVENTS_SORT_SCHEMA.columns]) for r in _rows_in_file(uri, f)]
        assert keys == sorted(keys), f"{f.path} is not sorted"
        meta = fragments.get(unquote(f.path))
        if meta is not None:
            assert (meta.first, meta.last) == (keys[0], keys[-1])
            bucket = (f.partition_values["tenant_id"], f.partition_values["hour"], meta.level, meta.outlier)
            ranges.setdefault(bucket, []).append((keys[0], keys[-1]))
    for spans in ranges.values():
        spans.sort()
        for (_, hi), (lo, _) in itertools.pairwise(spans):
            assert hi < lo, "two outputs of one bucket, level and lane overlap"


@pytest.mark.parametrize("sorted_inputs", [True, False], ids=["arrow-merge", "unsorted-spark-fallback"])
def test_compaction_preserves_rows_sorts_and_describes_outputs(store: TableStore, sorted_inputs: bool,
                                                                events_table: tuple[str, AppendEvents]) -> None:
    """Rows (checksum over all columns) survive; outputs are sorted, disjoint, and carry regexes in the swap commit.

    Sorted inputs go through the streaming merge; unsorted ones (written before ingest sorted) through Spark.
    """
    uri, append = events_table
    append("t1", 6, 60, sort=sorted_inputs)
    append("t2", 2, 30)  # too few files: this tenant's buckets stay as they are
    before = checksum(store.read(uri))
    files_before = store.files(uri)
    compactor = Compactor(store, uri, settings=small_settings())
    plan = compactor.plan()
    assert {t.bucket[0] for t in plan.tasks} == {"t1"}
    report = compactor.run(apply=True)
    assert report.applied and report.rounds and not report.gave_up
    after_files = store.files(uri)
    assert checksum(store.read(uri)) == before
    assert len(after_files) < len(files_before)
    assert {f.path for f in files_before if f.partition_values["tenant_id"] == "t2"} <= {f.path for f in after_files}
    assert_sorted_and_disjoint(store, uri, after_files)
    # Every file compaction added is described by the very commit that added it, and the swap is dataChange=false.
    for r in report.rounds:
        commit = next(c for c in store.history(uri) if c.version == r.version)
        assert FRAGMENTS_KEY in commit.custom_metadata
    log = (store.history(uri)[0])
    assert log.operation  # the log is readable after the swaps
    fragments = read_fragments(store, uri, after_files)
    compacted = [f for f in after_files if unquote(f.path) in fragments]
    assert compacted and all(fragments[unquote(f.path)].level >= 1 for f in compacted)
    for f in compacted:
        meta = fragments[unquote(f.path)]
        rows = _rows_in_file(uri, f)
        assert meta.rows == len(rows)
        for col in EVENTS_SORT_SCHEMA.string_columns:
            assert all(may_contain(meta.columns[col], r[col]) for r in rows)


def test_readers_at_every_version_see_the_same_rows(store: TableStore, events_table: tuple[str, AppendEvents]) -> None:
    """Time travel to each version from the last append on gives the same multiset: swaps change no data."""
    uri, append = events_table
    append("t1", 5, 40)
    v0 = store.version(uri)
    before = checksum(store.read(uri))
    Compactor(store, uri, settings=small_settings()).run(apply=True)
    assert store.version(uri) > v0
    for v in range(v0, store.version(uri) + 1):
        assert checksum(store.read(uri, version=v)) == before, f"version {v} differs"


def test_before_commit_failure_leaves_table_unchanged(store: TableStore,
                                                      events_table: tuple[str, AppendEvents]) -> None:
    """A compaction dying between writing its outputs and committing leaves the same files and rows."""
    uri, append = events_table
    append("t1", 4, 40)
    files, version, rows = store.files(uri), store.version(uri), checksum(store.read(uri))

    def die(_new: object) -> None:
        raise RuntimeError("killed before commit")

    with pytest.raises(RuntimeError, match="killed before commit"):
        Compactor(store, uri, settings=small_settings(), before_commit=die).run(apply=True)
    assert store.version(uri) == version
    assert {f.path for f in store.files(uri)} == {f.path for f in files}
    assert checksum(store.read(uri)) == rows


def test_compaction_refuses_a_table_without_buckets(spark: Any, store: TableStore, tmp_path: Any) -> None:
    """A table not partitioned by tenant_id, hour gets a clear error naming the partitioning found."""
    uri = str(tmp_path / "events")
    store.create(uri, spark.range(1).schema)
    with pytest.raises(CompactionError, match=r"partitioned by \['tenant_id', 'hour'\], found \[\]"):
        Compactor(store, uri)


def test_compaction_takes_replace_locks_fences_its_swap_and_leaves_a_locked_bucket_alone(
    store: TableStore, events_table: tuple[str, AppendEvents], tmp_path: Any
) -> None:
    """Each round locks its buckets in one commit and releases them in one; its swap carries their fencing
    tokens; a bucket a replacement holds is given up for this run while the other buckets compact."""
    from lakeshard.versions import Chunk, ChunkLocks
    from lakeshard.versions.locks import replace_app_id

    uri, append = events_table
    append("acme", files=2, rows=10)
    append("zeta", files=2, rows=10)
    locks_uri = str(tmp_path / "chunk_locks")
    replacer = ChunkLocks(store, locks_uri, holder="replacer")
    held = replacer.acquire(Chunk("zeta", HOURS[0]))
    locks = ChunkLocks(store, locks_uri, holder="compactor")
    before = checksum(store.read(uri))
    lock_version = store.version(locks_uri)

    report = Compactor(store, uri, settings=small_settings(), chunk_lock=locks.fenced).run(
        sealed={(t, h) for t in ("acme", "zeta") for h in HOURS})

    assert report.gave_up == [("zeta", HOURS[0])]
    assert "locked for replacement by replacer" in next(r.reason for r in report.rounds if r.gave_up)
    compacted = {(f.partition_values["tenant_id"], f.partition_values["hour"]): 0 for f in store.files(uri)}
    for f in store.files(uri):
        compacted[(f.partition_values["tenant_id"], f.partition_values["hour"])] += 1
    assert compacted == {("acme", HOURS[0]): 1, ("acme", HOURS[1]): 1, ("zeta", HOURS[0]): 2, ("zeta", HOURS[1]): 1}
    assert checksum(store.read(uri)) == before
    for hour in HOURS:  # the committed swap carried the compactor's fencing token of each bucket it compacted
        assert store.transaction_version(uri, replace_app_id(Chunk("acme", hour))) is not None
    assert store.transaction_version(uri, replace_app_id(Chunk("zeta", HOURS[0]))) is None
    # One round took the three free buckets' locks in one commit and released them in one (the refused
    # attempt on all four committed nothing).
    assert store.version(locks_uri) == lock_version + 2
    assert [s.chunk for s in locks.held()] == [Chunk("zeta", HOURS[0])]
    assert replacer.release(held)


def test_rare_values_go_to_one_outlier_file_per_bucket_and_are_never_missed(
        spark: SparkSession, store: TableStore, events_table: tuple[str, AppendEvents]) -> None:
    """With an outlier split, the rare env (~2% of a bucket) is only in each bucket's outlier file, whose
    regex is the only one to accept it; a needle reads one file per bucket and finds every row; a common
    value reads the outlier file too; rows are preserved and each lane is sorted and disjoint."""
    from datetime import UTC, datetime

    from pyspark.sql import functions as F

    uri, append = events_table
    append("t1", 8, 60)
    before = checksum(store.read(uri))
    Compactor(store, uri, settings=small_settings(outliers=OutlierSplit(fraction=0.05))).run(apply=True)
    files = store.files(uri)
    assert checksum(store.read(uri)) == before
    assert_sorted_and_disjoint(store, uri, files)
    fragments = read_fragments(store, uri, files)
    for hour in HOURS:
        in_bucket = [f for f in files if f.partition_values["hour"] == hour]
        metas = [fragments[unquote(f.path)] for f in in_bucket]
        assert sum(m.outlier for m in metas) == 1 and len(metas) >= 4
        for f, meta in zip(in_bucket, metas, strict=True):
            holds = "pre.view|1" in {r["env"] for r in _rows_in_file(uri, f)}
            assert holds == meta.outlier == may_contain(meta.columns["env"], "pre.view|1")
    start, end = datetime(2026, 1, 1, 10, tzinfo=UTC), datetime(2026, 1, 1, 12, tzinfo=UTC)
    df, report = read_events(spark, store, uri, tenant="t1", start=start, end=end, predicates={"env": "pre.view|1"})
    expected = store.read(uri).where(F.col("env") == "pre.view|1").select("event_id").collect()
    assert expected and sorted(r[0] for r in df.select("event_id").collect()) == sorted(r[0] for r in expected)
    assert len(report.read) == len(HOURS)
    # A common status is in the outlier files too: they are read on top of the regular files holding it.
    _, common = read_events(spark, store, uri, tenant="t1", start=start, end=end, predicates={"status": "info"})
    assert set(report.read) <= set(common.read)


def test_merges_too_big_for_a_threads_share_run_alone_and_stream(
        store: TableStore, events_table: tuple[str, AppendEvents], monkeypatch: pytest.MonkeyPatch) -> None:
    """With a budget of twice a bucket's decoded input, side-by-side in-memory merges are refused (a share is
    too small), and each bucket then merges alone, streaming; rows survive, outputs sorted and disjoint."""
    from lakeshard.compaction import executor
    from lakeshard.compaction.merge import OverBudget

    uri, append = events_table
    append("t1", 6, 60)
    before = checksum(store.read(uri))
    decoded: dict[str, int] = {}
    for f in store.files(uri):
        hour = f.partition_values["hour"]
        decoded[hour] = decoded.get(hour, 0) + pq.read_table(f"{uri}/{unquote(f.path)}").nbytes
    calls: list[tuple[str, str]] = []
    real = executor.merge_sorted_files

    def spy(*args: Any, **kwargs: Any) -> Any:
        try:
            stats = real(*args, **kwargs)
        except OverBudget:
            calls.append((kwargs["strategy"], "over budget"))
            raise
        calls.append((kwargs["strategy"], "in memory" if stats.in_memory else "streamed"))
        return stats

    monkeypatch.setattr(executor, "merge_sorted_files", spy)
    settings = small_settings(memory_budget_bytes=2 * max(decoded.values()), merge_threads=2)
    report = Compactor(store, uri, settings=settings).run(apply=True)
    assert report.rounds and not report.gave_up
    assert sorted(calls) == [("auto", "streamed")] * 2 + [("memory", "over budget")] * 2
    assert checksum(store.read(uri)) == before
    assert_sorted_and_disjoint(store, uri, store.files(uri))


def test_a_bucket_that_cannot_be_merged_is_reported_and_the_others_still_compact(
        store: TableStore, events_table: tuple[str, AppendEvents]) -> None:
    """One bucket's unreadable input (its Parquet file truncated on disk) fails that bucket only: every other
    bucket compacts in the same run, and the report names the failed bucket and why."""
    uri, append = events_table
    append("t1", 4, 20)
    append("t2", 4, 20)
    broken = next(f for f in store.files(uri) if f.partition_values == {"tenant_id": "t2", "hour": HOURS[0]})
    with open(f"{uri}/{unquote(broken.path)}", "r+b") as handle:
        handle.truncate(100)

    report = Compactor(store, uri, settings=small_settings()).run(apply=True)

    assert [(b, "t2" in reason) for b, reason in report.failed] == [(("t2", HOURS[0]), True)]
    assert report.gave_up == [("t2", HOURS[0])]
    per_bucket = {(t, h): sum(1 for f in store.files(uri) if f.partition_values == {"tenant_id": t, "hour": h})
                  for t in ("t1", "t2") for h in HOURS}
    assert per_bucket == {("t1", HOURS[0]): 1, ("t1", HOURS[1]): 1, ("t2", HOURS[0]): 4, ("t2", HOURS[1]): 1}


@pytest.mark.parametrize("fault", ["locked", "unreadable"])
def test_a_bucket_named_by_the_caller_that_is_locked_or_unreadable_leaves_the_other_named_buckets_compacting(
        store: TableStore, events_table: tuple[str, AppendEvents], tmp_path: Any, fault: str) -> None:
    """Buckets asked for by name: one of them held by another replacement (or with an unreadable input) is
    reported as such, and every other bucket asked for still compacts in the same run."""
    from lakeshard.versions import Chunk, ChunkLocks

    uri, append = events_table
    for tenant in ("north", "south", "west"):
        append(tenant, files=3, rows=12)
    asked = [("north", HOURS[1]), ("south", HOURS[1]), ("west", HOURS[0])]
    locks_uri = str(tmp_path / "chunk_locks")
    if fault == "locked":
        ChunkLocks(store, locks_uri, holder="backfill").acquire(Chunk("south", HOURS[1]))
    else:
        broken = next(f for f in store.files(uri) if f.partition_values == {"tenant_id": "south", "hour": HOURS[1]})
        with open(f"{uri}/{unquote(broken.path)}", "r+b") as handle:
            handle.truncate(64)
    locks = ChunkLocks(store, locks_uri, holder="compactor")

    report = Compactor(store, uri, settings=small_settings(), chunk_lock=locks.fenced).run(
        buckets=asked, sealed=set(asked))

    assert report.gave_up == [("south", HOURS[1])]
    reason = next(r.reason for r in report.rounds if r.gave_up)
    if fault == "locked":
        assert "until its lease expires at" in reason
    else:  # the file at fault, named as every read names a damaged file
        assert reason.startswith(f"DamagedDataFile: {uri}: data file {broken.path} (tenant_id=south, hour={HOURS[1]})")
    files = [(f.partition_values["tenant_id"], f.partition_values["hour"]) for f in store.files(uri)]
    assert {b: files.count(b) for b in asked} == {("north", HOURS[1]): 1, ("south", HOURS[1]): 3,
                                                  ("west", HOURS[0]): 1}
    assert files.count(("north", HOURS[0])) == 3  # not asked for: left as it is
