"""Compaction of the small bookkeeping tables: many small appends become one file per partition, rows kept."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from lakeshard.config import LakeshardConfig, MaintenanceConfig
from lakeshard.lake import FileInfo, TableStore
from lakeshard.lake.embedded.log import commit_file_versions
from lakeshard.maintenance import (
    BOOKKEEPING_TABLES,
    clean_logs,
    compact_bookkeeping,
    small_files,
    vacuum_tables,
)
from lakeshard.tables import EVENTS, ID_INDEX, ROUTED

LEDGER = "ledger"
SCHEMA = StructType([StructField("part", StringType(), False), StructField("n", LongType(), False),
                     StructField("shard", IntegerType(), True)])


def _config(tmp_path: Path, test_config: LakeshardConfig, max_files: int = 64) -> LakeshardConfig:
    return replace(test_config, lakehouse=str(tmp_path / "lh"),
                   maintenance=MaintenanceConfig(bookkeeping_max_files=max_files))


def _grow(store: TableStore, uri: str, appends: int, start: int = 0) -> None:
    store.create(uri, SCHEMA, partition_by=("part",))
    for i in range(start, start + appends):
        store.append_arrow(uri, pa.table({"part": [f"p{i % 3}"], "n": [i], "shard": [i % 5]}))


def _rows(store: TableStore, uri: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in store.read_table_arrow(uri).to_pylist())


def test_catalog_bookkeeping_tables_leave_out_the_big_ones() -> None:
    assert not {EVENTS, ROUTED, ID_INDEX} & set(BOOKKEEPING_TABLES)
    assert "pipeline_events" in BOOKKEEPING_TABLES and "landing_batches" in BOOKKEEPING_TABLES


def test_grown_table_is_compacted_to_one_file_per_partition(store: TableStore, test_config: LakeshardConfig,
                                                           tmp_path: Path) -> None:
    cfg = _config(tmp_path, test_config)
    uri = cfg.table_uri(LEDGER)
    _grow(store, uri, 200)
    before = _rows(store, uri)
    assert len(store.files(uri)) == 200
    # delta-rs checkpoints every 100 commits by itself: snapshot loads replay at most ~100 commits.
    assert store.checkpoint_versions(uri)

    report = compact_bookkeeping(store, cfg, tables=(LEDGER,))

    assert len(store.files(uri)) == 3
    assert _rows(store, uri) == before
    (done,) = report.tables
    assert (done.table, done.files_before, done.files_after, done.conflict) == (LEDGER, 200, 3, False)
    assert store.version(uri) - max(store.checkpoint_versions(uri)) < 100

    again = compact_bookkeeping(store, cfg, tables=(LEDGER,))
    version = store.version(uri)
    assert all(t.skipped for t in again.tables)
    assert store.version(uri) == version


def test_small_table_is_left_alone(store: TableStore, test_config: LakeshardConfig, tmp_path: Path) -> None:
    cfg = _config(tmp_path, test_config, max_files=10)
    uri = cfg.table_uri(LEDGER)
    _grow(store, uri, 10)
    version = store.version(uri)
    report = compact_bookkeeping(store, cfg, tables=(LEDGER, "never_created"))
    assert store.version(uri) == version and len(store.files(uri)) == 10
    assert all(t.skipped for t in report.tables)


class _AppendDuringRewrite:
    """The real store, with another writer's append committed between the rewrite's read and its commit."""

    def __init__(self, store: TableStore, uri: str) -> None:
        self._store, self._uri, self.appended = store, uri, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def replace_files(self, table: str, *args: Any, **kwargs: Any) -> Any:
        if not self.appended:
            self._store.append_arrow(self._uri, pa.table({"part": ["p1"], "n": [10_000], "shard": [1]}))
            self.appended = True
        return self._store.replace_files(table, *args, **kwargs)


def test_concurrent_append_during_rewrite_is_kept(store: TableStore, test_config: LakeshardConfig,
                                                  tmp_path: Path) -> None:
    cfg = _config(tmp_path, test_config, max_files=8)
    uri = cfg.table_uri(LEDGER)
    _grow(store, uri, 20)
    expected = sorted([*_rows(store, uri), ("p1", 10_000, 1)])
    racing = _AppendDuringRewrite(store, uri)

    report = compact_bookkeeping(racing, cfg, tables=(LEDGER,))  # type: ignore[arg-type]

    assert racing.appended
    assert _rows(store, uri) == expected
    (done,) = report.tables
    # Either the rewrite committed around the append (3 merged files + the appended one) or it lost the race,
    # committed nothing and is retried next run; the appended row is there either way.
    assert len(store.files(uri)) == (4 if not done.conflict else 21)
    if done.conflict:
        compact_bookkeeping(store, cfg, tables=(LEDGER,))
        assert len(store.files(uri)) == 3 and _rows(store, uri) == expected


def _file(path: str, size: int) -> FileInfo:
    return FileInfo(path, size, None, {}, datetime(2026, 1, 1, tzinfo=UTC))


def test_small_files_take_the_smallest_within_the_byte_budget() -> None:
    files = [_file("big", 1000), _file("a", 10), _file("b", 20), _file("c", 30)]
    assert [f.path for f in small_files(files, 60)] == ["a", "b", "c"]
    assert [f.path for f in small_files(files, 35)] == ["a", "b"]
    assert small_files(files, 15) == []  # one file alone is not worth a rewrite


def test_files_past_the_byte_budget_are_left_alone(store: TableStore, test_config: LakeshardConfig,
                                                  tmp_path: Path) -> None:
    cfg = _config(tmp_path, test_config, max_files=4)
    uri = cfg.table_uri(LEDGER)
    _grow(store, uri, 12)
    merged = compact_bookkeeping(store, cfg, tables=(LEDGER,))
    assert merged.rewritten == 1
    big = {f.path for f in store.files(uri)}
    _grow(store, uri, 12, start=100)
    rows = _rows(store, uri)
    new = [f for f in store.files(uri) if f.path not in big]
    assert max(f.size_bytes for f in new) < min(f.size_bytes for f in store.files(uri) if f.path in big)
    # A budget that fits the new small files but not one more: the merged files are past it and stay.
    tight = replace(cfg, maintenance=MaintenanceConfig(bookkeeping_max_files=4,
                                                       bookkeeping_max_bytes=sum(f.size_bytes for f in new)))
    compact_bookkeeping(store, tight, tables=(LEDGER,))
    files = store.files(uri)
    assert big <= {f.path for f in files} and len(files) == 6
    assert _rows(store, uri) == rows


def test_a_merged_file_waits_for_a_tier_of_its_size_instead_of_being_rewritten_every_run() -> None:
    merged = _file("merged", 1000)
    fresh = [_file(f"new{i:02}", 10) for i in range(40)]
    chosen = small_files([merged, *fresh], 10**9)
    assert [f.path for f in chosen] == [f.path for f in fresh]  # 400 bytes of new files do not drag 1000 along
    more = [_file(f"more{i:03}", 10) for i in range(100)]
    assert "merged" in {f.path for f in small_files([merged, *fresh, *more], 10**9)}  # 1,400 bytes: its tier


def test_routing_metrics_past_their_retention_are_dropped_and_recent_windows_kept(
    store: TableStore, test_config: LakeshardConfig, tmp_path: Path
) -> None:
    from datetime import timedelta

    from lakeshard.tables import ROUTING_METRICS
    from lakeshard.tables.schemas import ROUTING_METRICS_SCHEMA

    cfg = _config(tmp_path, test_config, max_files=2)
    uri = cfg.table_uri(ROUTING_METRICS)
    store.create(uri, ROUTING_METRICS_SCHEMA)
    now = datetime.now(UTC).replace(microsecond=0)
    for hours_ago in (72, 49, 30, 2, 1, 0):
        start = now - timedelta(hours=hours_ago)
        store.append_arrow(uri, pa.table({
            "window_start": pa.array([start], pa.timestamp("us", tz="UTC")), "tenant_id": ["acme"],
            "shard": pa.array([0], pa.int32()), "events": [10], "bytes": [1000], "batch": [hours_ago],
            "routed_at": pa.array([start], pa.timestamp("us", tz="UTC"))}))
    report = compact_bookkeeping(store, cfg, tables=(ROUTING_METRICS,))
    kept = sorted(r["batch"] for r in store.read_table_arrow(uri).to_pylist())
    assert kept == [0, 1, 2]  # the default retention is 24 hours before the newest window
    assert report.tables[0].expired_files == 3 and len(store.files(uri)) == 1


def test_placements_are_rewritten_sorted_by_window_in_small_row_groups(
        store: TableStore, test_config: LakeshardConfig, tmp_path: Path) -> None:
    """The allocator reads the placements of a few windows: each row group of a rewritten file must bound them."""
    import pyarrow.parquet as pq

    from lakeshard.routing.allocator import ShardAllocator
    from lakeshard.tables import PLACEMENTS

    cfg = replace(_config(tmp_path, test_config, max_files=1),
                  maintenance=MaintenanceConfig(bookkeeping_max_files=1, bookkeeping_row_group_rows=10))
    allocator = ShardAllocator(store, cfg)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    windows = [start.replace(minute=5 * w) for w in range(12)]
    for w in reversed(windows):  # allocated out of order: the rewrite sorts
        allocator.resolve([(f"t{i}", w) for i in range(5)])
    uri = cfg.table_uri(PLACEMENTS)
    before = _rows(store, uri)

    compact_bookkeeping(store, cfg, tables=(PLACEMENTS,))

    (merged,) = store.files(uri)
    assert _rows(store, uri) == before
    meta = pq.ParquetFile(f"{uri}/{merged.path}").metadata
    column = meta.schema.to_arrow_schema().get_field_index("window_start")
    spans = [(meta.row_group(g).column(column).statistics.min, meta.row_group(g).column(column).statistics.max)
             for g in range(meta.num_row_groups)]
    assert meta.num_row_groups == 6 and all(meta.row_group(g).num_rows == 10 for g in range(6))
    assert spans == sorted(spans) and all(hi - lo == windows[1] - windows[0] for lo, hi in spans), spans


def test_commits_leave_expired_log_files_to_the_hourly_clean_up(store: TableStore, test_config: LakeshardConfig,
                                                                tmp_path: Path) -> None:
    """delta-rs lists the whole log after every commit to delete the commit files past the log retention: each
    commit paid for 30 days of log. Commits skip that; ``clean_logs`` (compact_books, hourly) deletes the same
    files, those past the retention that a checkpoint supersedes, and the table reads the same."""
    cfg = _config(tmp_path, test_config)
    uri = cfg.table_uri(LEDGER)
    _grow(store, uri, 130)  # delta-rs checkpoints version 100 by itself
    (checkpoint,) = store.checkpoint_versions(uri)
    log = Path(uri.removeprefix("file://")) / "_delta_log"
    month_ago = time.time() - 31 * 86_400
    for v in range(0, 121):  # past the 30-day retention: versions before and after the checkpoint
        os.utime(log / f"{v:020d}.json", (month_ago, month_ago))
    before = _rows(store, uri)

    more = 3
    for i in range(more):  # commits after the files expired delete none of them
        store.append_arrow(uri, pa.table({"part": ["p0"], "n": [1000 + i], "shard": [0]}))
    assert len(commit_file_versions(uri)) == 131 + more

    cleaned = clean_logs(store, cfg, tables=(LEDGER, "never_created"))

    assert cleaned == {LEDGER: checkpoint}, cleaned
    assert commit_file_versions(uri) == set(range(checkpoint, 131 + more))
    assert _rows(store, uri) == sorted([*before, *(("p0", 1000 + i, 0) for i in range(more))])
    assert clean_logs(store, cfg, tables=(LEDGER,)) == {LEDGER: 0}


def test_vacuum_deletes_what_compaction_removed_once_a_day_and_keeps_every_row(
    store: TableStore, test_config: LakeshardConfig, tmp_path: Path
) -> None:
    """The files a compaction removes from the log stay on disk (time travel) until the day's vacuum, which deletes
    exactly them; runs in any other hour of the day delete nothing."""
    cfg = replace(test_config, lakehouse=str(tmp_path / "lh"),
                  maintenance=MaintenanceConfig(bookkeeping_max_files=8, vacuum_hour_utc=5, vacuum_retention_hours=0))
    uri = cfg.table_uri(LEDGER)
    _grow(store, uri, 30)
    before = _rows(store, uri)
    compact_bookkeeping(store, cfg, tables=(LEDGER,))

    def on_disk() -> set[str]:
        return {str(p.relative_to(uri)) for p in Path(uri).rglob("*.parquet")}

    live = {f.path for f in store.files(uri)}
    assert len(on_disk()) == 30 + len(live)  # compaction only removed them from the log
    assert vacuum_tables(store, cfg, now=datetime(2026, 3, 1, 4, 59, tzinfo=UTC), tables=(LEDGER,)) == {}
    assert len(on_disk()) == 30 + len(live)
    time.sleep(0.05)
    assert vacuum_tables(store, cfg, now=datetime(2026, 3, 1, 5, 10, tzinfo=UTC), tables=(LEDGER, "absent")) == {
        LEDGER: 30}
    assert on_disk() == live and _rows(store, uri) == before
