"""Compaction of the small bookkeeping tables: the ones that gain a file and a log commit on every run.

Every ingest run appends a file to ``landing_batches``, ``routing_metrics``, ``quarantine`` and
``placements``, every flow event one to ``pipeline_events``, every maintenance run one to ``buckets`` and
``chunk_locks``. Their rows are few but their files are not, and every reader pays per file.
:func:`compact_bookkeeping` rewrites such a table, once it holds more than
``maintenance.bookkeeping_max_files`` files, into one file per partition: a ``data_change=False`` swap through
:meth:`~lakeshard.lake.TableStore.replace_files` of exactly the files it read, so readers see the same rows at
every version and a concurrent append (a file the swap does not remove) is kept. A rewrite reads at most
``maintenance.bookkeeping_max_bytes`` of Parquet, smallest files first: files that have grown past that are left
alone, so the driver's memory stays bounded however old the table is. A swap that loses a race
commits nothing and the next run tries again. The rows are read and written with pyarrow in this process:
these tables are small, and a Spark job's fixed cost would dwarf them.

Snapshot loads replay the commits since the table's last checkpoint. delta-rs writes one every 100 commits
(Delta's ``delta.checkpointInterval``) as part of each commit; a table whose newest checkpoint is further
behind than that (written by a writer that skipped it) gets one here. The log is never cleaned up and nothing
is vacuumed: commit info others read stays, and removed files stay for time travel until ``vacuum``.

``events``, ``routed`` and ``event_ids`` are not bookkeeping: they have their own compaction and expiry.
A rewrite of ``fragments`` also drops the rows of files no longer live in their table
(:func:`~lakeshard.compaction.fragment_table.live_fragment_rows`).

Example::

    report = compact_bookkeeping(store, cfg)
    print([(t.table, t.files_before, t.files_after) for t in report.tables])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from lakeshard.compaction.fragment_table import live_fragment_rows
from lakeshard.config import LakeshardConfig
from lakeshard.errors import CommitConflict
from lakeshard.lake import FileInfo, TableStore
from lakeshard.lake.files import write_partitioned
from lakeshard.tables import EVENTS, FRAGMENTS, ID_INDEX, ROUTED, TABLES

__all__ = ["BOOKKEEPING_TABLES", "CHECKPOINT_INTERVAL", "BookkeepingReport", "TableUpkeep", "compact_bookkeeping",
           "small_files"]

# Every table of the catalog but the event data and its ID index, which have compaction and expiry of their own.
BOOKKEEPING_TABLES: tuple[str, ...] = tuple(t for t in TABLES if t not in (EVENTS, ROUTED, ID_INDEX))

# Delta's default ``delta.checkpointInterval``: delta-rs checkpoints every this many commits.
CHECKPOINT_INTERVAL = 100


@dataclass(frozen=True)
class TableUpkeep:
    """What :func:`compact_bookkeeping` did to one table."""

    table: str
    files_before: int
    files_after: int
    skipped: str | None = None  # why nothing was rewritten (small enough, no table yet)
    conflict: bool = False  # the swap lost a race and committed nothing (retried next run)
    version: int | None = None  # the swap's commit
    checkpoint: int | None = None  # the version a checkpoint was written at, when one was missing


@dataclass(frozen=True)
class BookkeepingReport:
    """Per bookkeeping table, what one run of :func:`compact_bookkeeping` did."""

    tables: tuple[TableUpkeep, ...]

    @property
    def rewritten(self) -> int:
        """Return how many tables were rewritten."""
        return sum(1 for t in self.tables if t.version is not None)


def compact_bookkeeping(store: TableStore, cfg: LakeshardConfig, *,
                        tables: Sequence[str] = BOOKKEEPING_TABLES, max_files: int | None = None) -> BookkeepingReport:
    """Return what rewriting each of ``tables`` with more than ``max_files`` live files (default
    ``cfg.maintenance.bookkeeping_max_files``) into one file per partition did; tables that do not exist yet
    are skipped.

    Raises:
        TableStoreError: a read or commit failed for another reason than a lost race.
    """
    limit = cfg.maintenance.bookkeeping_max_files if max_files is None else max_files
    budget = cfg.maintenance.bookkeeping_max_bytes
    return BookkeepingReport(tuple(_upkeep(store, cfg.table_uri(name), name, limit, budget) for name in tables))


def small_files(files: Sequence[FileInfo], budget: int) -> list[FileInfo]:
    """Return the smallest of ``files`` whose sizes add up to at most ``budget`` bytes (none if fewer than two)."""
    chosen: list[FileInfo] = []
    total = 0
    for f in sorted(files, key=lambda f: (f.size_bytes, f.path)):
        if total + f.size_bytes > budget:
            break
        chosen.append(f)
        total += f.size_bytes
    return chosen if len(chosen) > 1 else []


def _upkeep(store: TableStore, uri: str, name: str, limit: int, budget: int) -> TableUpkeep:
    if not store.exists(uri):
        return TableUpkeep(name, 0, 0, skipped="no table yet")
    version = store.version(uri)
    files = store.files(uri, version=version)
    chosen = small_files(files, budget) if len(files) > limit else []
    if chosen:
        upkeep = _rewrite(store, uri, name, version, files, chosen)
    else:
        why = f"{len(files)} files <= {limit}" if len(files) <= limit else f"fewer than two files fit {budget} bytes"
        upkeep = TableUpkeep(name, len(files), len(files), skipped=why)
    checkpoint = _ensure_checkpoint(store, uri)
    return upkeep if checkpoint is None else replace(upkeep, checkpoint=checkpoint)


def _rewrite(store: TableStore, uri: str, name: str, version: int, live: Sequence[FileInfo],
             chosen: Sequence[FileInfo]) -> TableUpkeep:
    rows = store.read_arrow(uri, chosen)
    if name == FRAGMENTS:
        rows = live_fragment_rows(store, uri, rows)
    schema, parts = store.arrow_schema(uri), store.partition_columns(uri)
    try:
        result = store.replace_files(uri, [f.path for f in chosen], None, data_change=False, read_version=version,
                                     metadata={"lakeshard.operation": "compact_bookkeeping"},
                                     write=lambda target: write_partitioned(rows, target, schema, parts))
    except CommitConflict:
        return TableUpkeep(name, len(live), len(live), conflict=True)
    return TableUpkeep(name, len(live), len(live) - result.files_removed + result.files_added,
                       version=result.version)


def _ensure_checkpoint(store: TableStore, uri: str) -> int | None:
    """Return the version a checkpoint was written at, when the newest one is more than an interval behind."""
    latest = store.version(uri)
    newest = max(store.checkpoint_versions(uri), default=-1)
    if latest - newest < CHECKPOINT_INTERVAL:
        return None
    return store.create_checkpoint(uri)
