"""Compacting the ``events`` table as lakeshard runs it: the ``compact`` flow of the maintenance pipeline and
``lakeshard compact`` both call :func:`compact_events` (same planners, settings and per-chunk replace locks)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from lakeshard.compaction.executor import CompactionReport, CompactionSettings, Compactor
from lakeshard.compaction.planner import LocalityPlanner, SizeTieredPlanner
from lakeshard.tables import CHUNK_LOCKS, EVENTS
from lakeshard.versions import ChunkLocks

if TYPE_CHECKING:
    from lakeshard.compaction.planner import Bucket
    from lakeshard.config import LakeshardConfig
    from lakeshard.lake import TableStore

__all__ = ["compact_events"]


def compact_events(store: TableStore, cfg: LakeshardConfig, *, sealed: Collection[Bucket] = (),
                   buckets: Sequence[Bucket] | None = None, min_files: int = 32,
                   target_rows: int = 1_000_000, include_open: bool = False, apply: bool = True,
                   now: datetime | None = None) -> CompactionReport:
    """Return the report of compacting ``events`` as the ``compact`` flow and ``lakeshard compact`` do:
    ``sealed`` buckets' small files merge at once, others lazily by tier, every round under the replace locks
    of its buckets. A bucket whose files cannot be merged is reported (``report.failed``); the others go on.

    Args:
        store: the table store.
        cfg: the configuration (``[compaction]`` settings, where ``events`` and ``chunk_locks`` live).
        sealed: buckets that receive no more files (the completionist's closed ones).
        buckets: only these buckets (None: the buckets changed since the last run that finished its work,
            :mod:`lakeshard.compaction.scope`).
        min_files: files a tier needs before it merges in a bucket that is not sealed.
        target_rows: rows an output file aims for (both planners).
        include_open: also merge the newest files of buckets still receiving data.
        apply: run the merges; False only plans (nothing is committed).
        now: the clock buckets are judged open or settled by (default: the current time).

    Compacting keeps the number of live files of ``events`` in step with its buckets instead of its writer
    steps (one file per bucket per step). That number is what each embedded commit and snapshot update costs
    (delta-rs keeps every live file's add action in its snapshot; see docs/lake.md), so an ingest that runs
    without this lets its commits slow down as the table grows.

    Example::

        report = compact_events(store, cfg, sealed=Completionist(spark, store, cfg).closed())
    """
    # Both planners aim at the same file size, as `lakeshard compact --target-rows` does.
    settings = CompactionSettings.from_config(
        cfg.compaction, locality=LocalityPlanner(target_rows=target_rows),
        size_tiered=SizeTieredPlanner(min_files=min_files, target_rows=target_rows), include_open=include_open)
    locks = ChunkLocks(store, cfg.table_uri(CHUNK_LOCKS))
    return Compactor(store, cfg.table_uri(EVENTS), settings=settings, chunk_lock=locks.fenced,
                     incremental=buckets is None).run(
        apply=apply, buckets=buckets, sealed=sealed, now=now)
