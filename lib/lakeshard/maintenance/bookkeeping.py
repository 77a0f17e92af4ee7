"""Compaction of the small bookkeeping tables: the ones that gain a file and a log commit on every run.

Every ingest run appends a file to ``landing_batches``, ``routing_metrics``, ``quarantine`` and
``placements``, every flow event one to ``pipeline_events``, every maintenance run one to ``buckets`` and
``chunk_locks``. Their rows are few but their files are not, and every reader pays per file.
:func:`compact_bookkeeping` rewrites such a table, once it holds more than
``maintenance.bookkeeping_max_files`` files, into one file per partition: a ``data_change=False`` swap through
:meth:`~lakeshard.lake.TableStore.replace_files` of exactly the files it read, so readers see the same rows at
every version and a concurrent append (a file the swap does not remove) is kept. A rewrite reads at most
``maintenance.bookkeeping_max_bytes`` of Parquet, smallest files first, and only files of about the size of
those already chosen (size tiers: a file larger than all smaller chosen files together waits until enough small
ones have gathered), so a merged file is not rewritten on every run and the driver's memory stays bounded
however old the table is. On a store whose swaps replace whole partitions (Delta's public writer:
:func:`whole_partitions`) a rewrite takes whole partitions instead, its rows handed over as a DataFrame.

``routing_metrics`` also expires: rows whose window started more than
``maintenance.routing_metrics_retention_hours`` (never less than the autosharder's and the balancer's longest
look-back) before the table's newest window are dropped (measured from the newest window, not the clock, so a
lakehouse of historical data keeps its last day of metrics for ``--as-of`` planning) — whole files by their
``window_start`` statistics, rows of the files being rewritten — in a ``data_change=True`` commit. A swap that
loses a race
commits nothing and the next run tries again. The rows are read and written with pyarrow in this process:
these tables are small, and a Spark job's fixed cost would dwarf them.

Snapshot loads replay the commits since the table's last checkpoint. delta-rs writes one every 100 commits
(Delta's ``delta.checkpointInterval``) as part of each commit; a table whose newest checkpoint is further
behind than that (written by a writer that skipped it) gets one here. A checkpoint written through a property
change (Delta's public SQL: ``delta.checkpointInterval`` set to 1 for one commit) that did not finish left the
table checkpointing at every commit; the table's interval is given back its value here first
(:meth:`~lakeshard.lake.TableStore.restore_checkpoint_interval`). :func:`clean_logs` deletes commit files past a
table's ``delta.logRetentionDuration``, and once a day :func:`vacuum_tables` deletes the data files of every
table that no version within ``maintenance.vacuum_retention_hours`` references (the files compaction and expiry
removed from the log stay on disk until then, readable by time travel).

Tables read by one column's values rather than whole are rewritten sorted by it, as one file of row groups of
``maintenance.bookkeeping_row_group_rows`` rows (:data:`SORTED_LAYOUTS`): ``placements`` by ``window_start`` (the
allocator asks for a few windows), ``landing_batches`` by the landing file's identity (the router asks for the
files it lists). Each row group's statistics then bound that column, and a read that pushes its filter
(:meth:`~lakeshard.lake.TableStore.read_arrow`'s ``where``) decodes only the row groups that can match, however
many windows or files the table has gathered.

``events``, ``routed`` and ``event_ids`` are not bookkeeping: they have their own compaction and expiry.
A rewrite of ``fragments`` also drops the rows of files no longer live in their table
(:func:`~lakeshard.compaction.fragment_table.live_fragment_rows`).

Example::

    report = compact_bookkeeping(store, cfg)
    print([(t.table, t.files_before, t.files_after) for t in report.tables])
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

from lakeshard.compaction import live_fragment_rows
from lakeshard.config import LakeshardConfig
from lakeshard.errors import CommitConflict
from lakeshard.lake import FileInfo, TableStore, WriteFiles, filesystem, write_partitioned
from lakeshard.sortorder import sort_indices
from lakeshard.tables import (
    EVENTS,
    FRAGMENTS,
    ID_INDEX,
    LANDING_BATCHES,
    PLACEMENTS,
    ROUTED,
    ROUTING_METRICS,
    TABLES,
)

__all__ = ["BOOKKEEPING_TABLES", "CHECKPOINT_INTERVAL", "SORTED_LAYOUTS", "BookkeepingReport", "TableUpkeep",
           "clean_logs", "compact_bookkeeping", "small_files", "vacuum_tables", "whole_partitions", "write_sorted"]

# Every table of the catalog but the event data and its ID index, which have compaction and expiry of their own.
BOOKKEEPING_TABLES: tuple[str, ...] = tuple(t for t in TABLES if t not in (EVENTS, ROUTED, ID_INDEX))

# Per table read by the values of a column: the sort order its rewrite writes (the read's column first), so
# each row group's statistics bound that column. ``landing_batches`` is looked up by a file's identity, its
# ``file_id`` (its ``path`` in plans made before identities); ``batch`` keeps a file's plans in order.
SORTED_LAYOUTS: Mapping[str, tuple[str, ...]] = {
    PLACEMENTS: ("window_start", "tenant_id"),
    LANDING_BATCHES: ("file_id", "path", "batch"),
}

# Delta's default ``delta.checkpointInterval``: delta-rs checkpoints every this many commits.
CHECKPOINT_INTERVAL = 100


@dataclass(frozen=True)
class TableUpkeep:
    """What :func:`compact_bookkeeping` did to one table."""

    table: str
    files_before: int
    files_after: int
    skipped: str | None = None  # why nothing was rewritten (small enough, no table yet)
    expired_files: int = 0  # files dropped whole because every row was past the retention
    conflict: bool = False  # the swap lost a race and committed nothing (retried next run)
    version: int | None = None  # the swap's commit
    checkpoint: int | None = None  # the version a checkpoint was written at, when one was missing
    # delta.checkpointInterval given back its value, left at 1 by a checkpoint that did not finish
    interval_restored: bool = False


@dataclass(frozen=True)
class BookkeepingReport:
    """Per bookkeeping table, what one run of :func:`compact_bookkeeping` did."""

    tables: tuple[TableUpkeep, ...]

    @property
    def rewritten(self) -> int:
        """Return how many tables were rewritten."""
        return sum(1 for t in self.tables if t.version is not None)


def compact_bookkeeping(store: TableStore, cfg: LakeshardConfig, *, tables: Sequence[str] = BOOKKEEPING_TABLES,
                        max_files: int | None = None) -> BookkeepingReport:
    """Return what rewriting each of ``tables`` with more than ``max_files`` live files (default
    ``cfg.maintenance.bookkeeping_max_files``) into one file per partition, and expiring ``routing_metrics``
    rows past their retention (:func:`metrics_retention`) before its newest window, did; tables that do not
    exist yet are skipped.

    Raises:
        TableStoreError: a read or commit failed for another reason than a lost race.
    """
    limit = cfg.maintenance.bookkeeping_max_files if max_files is None else max_files
    budget = cfg.maintenance.bookkeeping_max_bytes
    retention = metrics_retention(cfg)
    group_rows = cfg.maintenance.bookkeeping_row_group_rows
    return BookkeepingReport(tuple(
        _upkeep(store, cfg.table_uri(name), name, limit, budget, retention if name == ROUTING_METRICS else None,
                group_rows)
        for name in tables))


def clean_logs(store: TableStore, cfg: LakeshardConfig, *, tables: Sequence[str] = TABLES) -> dict[str, int]:
    """Return, per table of ``tables`` that exists, how many commit files past its ``delta.logRetentionDuration``
    (and superseded by a checkpoint) :meth:`TableStore.clean_log` deleted. Commits skip delta-rs' own cleanup,
    which lists the whole log after every commit; this is its hourly stand-in, with the same retention."""
    return {name: store.clean_log(uri) for name in tables if store.exists(uri := cfg.table_uri(name))}


def vacuum_tables(store: TableStore, cfg: LakeshardConfig, *, now: datetime, tables: Sequence[str] = TABLES
                  ) -> dict[str, int]:
    """Return, per table of ``tables`` that exists, how many data files :meth:`TableStore.vacuum` deleted (it also
    removes emptied write directories and what killed commits left), with retention
    ``maintenance.vacuum_retention_hours``; nothing unless ``now`` is in the UTC hour
    ``maintenance.vacuum_hour_utc`` (-1: always). Compaction and the writers' expiry of ``routed`` only remove
    files from the log: without this, a lakehouse's storage grows by every file it ever wrote."""
    m = cfg.maintenance
    if m.vacuum_hour_utc >= 0 and now.astimezone(UTC).hour != m.vacuum_hour_utc:
        return {}
    out = {}
    for name in tables:
        if store.exists(uri := cfg.table_uri(name)):
            report = store.vacuum(uri, retention_hours=m.vacuum_retention_hours)
            out[name] = len(report.removed_files)
    return out


def metrics_retention(cfg: LakeshardConfig) -> timedelta:
    """Return how long ``routing_metrics`` rows are kept: the configured retention, never less than what the
    autosharder and the balancer look back over (their windows plus the metrics' allowed staleness)."""
    b = cfg.balancing
    windows = max(b.scale_down_windows, b.lookback_windows) + 2  # the look-back's margin (_newest_windows)
    longest = windows * cfg.routing.window_seconds + b.metrics_max_age_seconds
    return max(timedelta(hours=cfg.maintenance.routing_metrics_retention_hours), timedelta(seconds=longest))


def small_files(files: Sequence[FileInfo], budget: int) -> list[FileInfo]:
    """Return the smallest of ``files`` whose sizes add up to at most ``budget`` bytes, stopping at a file larger
    than those chosen together (it waits for a tier of its size); none if fewer than two."""
    chosen: list[FileInfo] = []
    total = 0
    for f in sorted(files, key=lambda f: (f.size_bytes, f.path)):
        if total + f.size_bytes > budget or (len(chosen) >= 2 and f.size_bytes > total):
            break
        chosen.append(f)
        total += f.size_bytes
    return chosen if len(chosen) > 1 else []


def write_sorted(rows: pa.Table, directory: str, schema: pa.Schema, sort_by: Sequence[str], row_group_rows: int
                 ) -> None:
    """Write ``rows`` of a table without partition columns under ``directory`` as one Parquet file in the table's
    column order and types (``schema``), sorted by ``sort_by`` (ascending, nulls first) in row groups of
    ``row_group_rows`` rows; no rows, no file."""
    if not rows.num_rows:
        return
    order = sort_indices(rows.select(list(sort_by)), sort_by)
    body = rows.select(schema.names).cast(schema).take(order)
    fs, base = filesystem(directory)
    fs.create_dir(base, recursive=True)
    pq.write_table(body, f"{base}/part-00000-{uuid.uuid4().hex[:12]}.parquet", filesystem=fs,
                   row_group_size=row_group_rows)


def _upkeep(store: TableStore, uri: str, name: str, limit: int, budget: int, retention: timedelta | None,
            group_rows: int) -> TableUpkeep:
    if not store.exists(uri):
        return TableUpkeep(name, 0, 0, skipped="no table yet")
    version = store.version(uri)
    files = store.files(uri, version=version)
    newest = max((r[1] for f in files if (r := f.time_range("window_start"))), default=None) if retention else None
    cutoff = None if newest is None or retention is None else newest - retention
    expired = [] if cutoff is None else [f for f in files if (r := f.time_range("window_start")) and r[1] < cutoff]
    gone = {f.path for f in expired}
    kept = [f for f in files if f.path not in gone]
    if store.swaps_whole_partitions:
        chosen, expired = whole_partitions(kept, expired, budget, grown=len(kept) > limit)
    else:
        chosen = small_files(kept, budget) if len(kept) > limit else []
    if chosen or expired:
        upkeep = _rewrite(store, uri, name, version, files, chosen, expired, cutoff, group_rows)
    else:
        why = f"{len(files)} files <= {limit}" if len(files) <= limit else f"fewer than two files fit {budget} bytes"
        upkeep = TableUpkeep(name, len(files), len(files), skipped=why)
    restored = _restore_interval(store, uri)
    checkpoint = _ensure_checkpoint(store, uri)
    return replace(upkeep, checkpoint=checkpoint, interval_restored=restored)


def _rewrite(store: TableStore, uri: str, name: str, version: int, live: Sequence[FileInfo],
             chosen: Sequence[FileInfo], expired: Sequence[FileInfo] = (), cutoff: datetime | None = None,
             group_rows: int = 1024) -> TableUpkeep:
    rows = store.read_arrow(uri, chosen) if chosen else None
    dropped = bool(expired)
    if rows is not None and cutoff is not None:
        fresh = rows.filter(pc.greater_equal(rows.column("window_start"), pa.scalar(cutoff, rows.schema.field(
            "window_start").type)))
        dropped, rows = dropped or fresh.num_rows < rows.num_rows, fresh
    if rows is not None and name == FRAGMENTS:  # rows of files no longer live (past their grace) go
        live_rows = live_fragment_rows(store, uri, rows)
        dropped, rows = dropped or live_rows.num_rows < rows.num_rows, live_rows
    schema, parts = store.arrow_schema(uri), store.partition_columns(uri)
    kept = None if rows is None or rows.num_rows == 0 else rows
    whole = store.swaps_whole_partitions
    try:
        result = store.replace_files(
            uri, [f.path for f in (*chosen, *expired)],
            _dataframe(store, name, kept, schema, parts) if whole and kept is not None else None,
            data_change=dropped, read_version=version,
            metadata={"lakeshard.operation": "compact_bookkeeping", "expired_files": len(expired)},
            write=None if whole or kept is None else _writer(name, kept, schema, parts, group_rows))
    except CommitConflict:
        return TableUpkeep(name, len(live), len(live), conflict=True)
    return TableUpkeep(name, len(live), len(live) - result.files_removed + result.files_added,
                       version=result.version, expired_files=len(expired))


def _writer(name: str, rows: pa.Table, schema: pa.Schema, parts: Sequence[str], group_rows: int) -> WriteFiles:
    """Return the write of a rewrite's rows: sorted in row groups for a table of :data:`SORTED_LAYOUTS` without
    partition columns, else one file per partition."""
    sort_by = SORTED_LAYOUTS.get(name, ()) if not parts else ()
    if sort_by:
        return lambda target: write_sorted(rows, target, schema, sort_by, group_rows)
    return lambda target: write_partitioned(rows, target, schema, parts)


def _dataframe(store: TableStore, name: str, rows: pa.Table, schema: pa.Schema, parts: Sequence[str]) -> DataFrame:
    """Return a rewrite's rows as a DataFrame for a store whose swaps go through Delta's public writer: sorted
    into one file for a table of :data:`SORTED_LAYOUTS` without partition columns, else one file per partition.
    Row groups are then sized by the Parquet writer's bytes, not ``bookkeeping_row_group_rows``."""
    from lakeshard.runtime import arrow_dataframe

    body = rows.select(schema.names).cast(schema)
    sort_by = SORTED_LAYOUTS.get(name, ()) if not parts else ()
    if sort_by:
        body = body.take(sort_indices(body.select(list(sort_by)), sort_by))
    df = arrow_dataframe(store.spark, body)
    return df.repartition(*parts) if parts else df.coalesce(1)


def whole_partitions(kept: Sequence[FileInfo], expired: Sequence[FileInfo], budget: int, *, grown: bool
                     ) -> tuple[list[FileInfo], list[FileInfo]]:
    """Return (files to rewrite, expired files to drop) in whole partitions, for a store whose swap replaces
    whole partitions (Delta's public writer: ``replaceWhere``): every partition holding an expired file, and
    (``grown``: the table has too many files) every partition of more than one file, smallest partitions
    first while their Parquet bytes add up to at most ``budget`` (a partition past it is left as it is)."""
    by_partition: dict[tuple[tuple[str, str | None], ...], list[FileInfo]] = {}
    for f in (*kept, *expired):
        by_partition.setdefault(tuple(sorted(f.partition_values.items())), []).append(f)
    gone = {f.path for f in expired}
    wanted = [files for files in by_partition.values()
              if any(f.path in gone for f in files) or (grown and len(files) > 1)]
    chosen: list[FileInfo] = []
    dropped: list[FileInfo] = []
    total = 0
    for files in sorted(wanted, key=lambda fs: (not any(f.path in gone for f in fs), sum(f.size_bytes for f in fs))):
        size = sum(f.size_bytes for f in files)
        if total + size > budget:
            continue
        total += size
        chosen += [f for f in files if f.path not in gone]
        dropped += [f for f in files if f.path in gone]
    return chosen, dropped


def _ensure_checkpoint(store: TableStore, uri: str) -> int | None:
    """Return the version a checkpoint was written at, when the newest one is more than an interval behind (None
    too when writing it lost a race with a commit: the next run tries again)."""
    latest = store.version(uri)
    newest = max(store.checkpoint_versions(uri), default=-1)
    if latest - newest < CHECKPOINT_INTERVAL:
        return None
    try:
        return store.create_checkpoint(uri)
    except CommitConflict:
        return None


def _restore_interval(store: TableStore, uri: str) -> bool:
    """Return whether the table's checkpoint interval was given back the value an interrupted checkpoint left at 1
    (:meth:`TableStore.restore_checkpoint_interval`); False too when that lost a race: the next run tries again."""
    try:
        return store.restore_checkpoint_interval(uri)
    except CommitConflict:
        return False
