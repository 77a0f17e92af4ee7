"""The compactor: plan, merge each bucket's chosen files in sort order, swap old → new in one commit.

How one round works:

1. The table's live files and their fragment metadata (level, key range: rows of the ``fragments`` table,
   :mod:`~lakeshard.compaction.fragment_table`) feed the planners.
2. Tasks of distinct buckets form a round, merged by one of two engines:

   * ``arrow`` (default): each task's inputs go through :mod:`lakeshard.compaction.merge` in this process:
     one Arrow sort when they fit the memory budget, else the streaming k-way merge of sorted inputs
     (memory bounded by row group x inputs); outputs rotate at ``target_rows`` only where the key changes,
     and rows with values rare in the merge go to outlier outputs (:mod:`~lakeshard.compaction.outliers`).
     Tasks that fit ``memory_budget_bytes / merge_threads`` run ``merge_threads`` at a time (Arrow's
     reads, sorts and writes release the GIL); the others one at a time with the whole budget.
     A round whose inputs must stream but turn out not to be sorted (files written before ingest sorted
     them) falls back to the Spark engine;
   * ``spark``: Spark reads the files (``store.read_files``), range-partitions the rows on
     ``(tenant_id, hour, *sort columns)`` into as many partitions as the tasks want outputs, and sorts
     within each partition (Spark spills past its execution memory). For object stores and inputs that
     are not sorted yet.

   Either way each bucket's outputs are sorted and disjoint in sort order (per lane: outlier outputs
   overlap the regular ones).
3. ``store.replace_files`` writes the outputs and, in ONE Delta commit with ``dataChange=false``, removes
   the inputs and adds the outputs; its ``before_commit`` hook first appends the fragment metadata (level,
   key range, lane, per-column pruning regex) to the ``fragments`` table — from what the arrow merge
   recorded while writing, or by reading the outputs' sort columns (Spark engine) — and puts a copy into the
   swap commit's metadata for diagnostics. Rows of outputs whose swap never lands describe files that are
   never live: readers ignore them.
   On a store whose swaps remove whole partitions (:attr:`~lakeshard.lake.TableStore.swaps_whole_partitions`:
   Delta's public writer, ``replaceWhere``) each bucket is its own round: the task is widened to every live file
   of the bucket, Spark merges it, the commit carries that bucket's fence alone, and the fragment rows are
   appended after the commit, which is what names the new files (docs/decisions.md record 14).
4. A commit that loses a race (:class:`~lakeshard.errors.CommitConflict`: an input was removed, or the
   log moved under it) is retried from step 1 for that round's buckets, up to ``max_retries`` times; then
   those buckets are given up for this run, and nothing of the failed attempts is visible.
5. A round that fails for its data (an unreadable input, a file system refusing a name: :data:`BUCKET_FAULTS`)
   commits nothing; its buckets are then compacted one at a time, so only the bucket at fault fails. It is
   reported (:attr:`CompactionReport.failed`) and left as it is for this run; the others go on.

Appends to the same buckets go on meanwhile: a compaction only removes files it read, so appended files
stay live, and every row is in the table exactly once whichever commit lands first.

``chunk_lock(buckets)`` is an optional factory of context managers (the per-chunk replace locks of
:mod:`lakeshard.versions`, e.g. ``ChunkLocks.fenced``): the compactor holds the locks of a round's buckets
from planning that round to its commit, and its swap carries the fencing tokens the context yields.

Buckets passed as ``sealed`` (closed by the completionist: they receive no more files) do not wait for a
tier to fill: all their small level-0 files merge at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote

import pyarrow as pa

from lakeshard.compaction.errors import CompactionError
from lakeshard.compaction.fragment_table import FragmentTable
from lakeshard.compaction.fragments import (
    FragmentMeta,
    describe_file,
    fragment_meta,
    fragments_metadata,
)
from lakeshard.compaction.merge import MergedFile, MergeError, OverBudget, merge_sorted_files
from lakeshard.compaction.outliers import OutlierSplit
from lakeshard.compaction.planner import (
    Bucket,
    CompactionPlan,
    CompactionTask,
    FileNode,
    LocalityPlanner,
    SizeTieredPlanner,
    plan_compaction,
)
from lakeshard.compaction.scope import compaction_scope, record_compacted
from lakeshard.compaction.sort_schema import SortSchema, sort_schema_for
from lakeshard.errors import CommitConflict, LakeshardError
from lakeshard.lake import AppTransaction, FileInfo, TableStore, check_data_file, partition_directory
from lakeshard.pruning import DEFAULT_MAX_REGEX_CHARS
from lakeshard.versions import ChunkLocked

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lakeshard.config import CompactionConfig

__all__ = [
    "BUCKET_COLUMNS",
    "BUCKET_FAULTS",
    "ChunkLock",
    "CompactionError",
    "CompactionReport",
    "CompactionSettings",
    "Compactor",
    "RoundResult",
]

BUCKET_COLUMNS = ("tenant_id", "hour")
ChunkLock = Callable[[Sequence[Bucket]], AbstractContextManager[Sequence[AppTransaction]]]
"""``buckets -> context manager`` held while the buckets are compacted; it yields the fencing tokens
(app transactions) the swap commit carries."""

BUCKET_FAULTS: tuple[type[BaseException], ...] = (LakeshardError, OSError, pa.ArrowException)
"""Errors a bucket's own files can cause (unreadable or corrupt inputs, names a file system refuses): they fail
that bucket, not the run. Anything else (a bug, an interrupt) stops the run."""


Snapshot = tuple[int, list[FileInfo], list[FileNode]]
"""A table version, its live files and the planner's view of them."""


@dataclass(frozen=True)
class CompactionSettings:
    """Knobs of a compaction run; the defaults follow Husky's (a few dozen files, ~1M-row outputs)."""

    size_tiered: SizeTieredPlanner = field(default_factory=SizeTieredPlanner)
    locality: LocalityPlanner = field(default_factory=LocalityPlanner)
    max_regex_chars: int = DEFAULT_MAX_REGEX_CHARS
    max_retries: int = 3
    include_open: bool = False  # also merge the newest files of buckets still receiving data
    max_rounds: int = 20  # each round may enable the next (tiered outputs overlap on L1); this caps a run
    # "arrow": streaming k-way merge in this process (memory_budget_bytes bounds it; local tables only);
    # "spark": range-partitioned sort in Spark (bounded by Spark's execution memory; any storage).
    engine: Literal["arrow", "spark"] = "arrow"
    memory_budget_bytes: int = 256 * 1024 * 1024
    # Arrow merges of one round run this many at a time when each fits memory_budget_bytes / merge_threads.
    merge_threads: int = 2
    # Rows with values rare in their merge go to outlier outputs (arrow engine); None: one lane only.
    outliers: OutlierSplit | None = field(default_factory=OutlierSplit)

    def __post_init__(self) -> None:
        if self.merge_threads < 1:
            raise CompactionError(f"merge_threads must be >= 1, found {self.merge_threads}")

    @classmethod
    def from_config(cls, cfg: CompactionConfig, **changes: Any) -> CompactionSettings:
        """Return settings from the ``[compaction]`` configuration section, with ``changes`` on top."""
        outliers = (OutlierSplit(cfg.outlier_fraction, cfg.outlier_max_share, cfg.outlier_min_outputs)
                    if cfg.outlier_fraction > 0 else None)
        return cls(memory_budget_bytes=cfg.memory_budget_bytes, merge_threads=cfg.merge_threads,
                   outliers=outliers, **changes)


@dataclass(frozen=True)
class RoundResult:
    """One committed (or abandoned) round: its tasks, the version it created, its retries."""

    tasks: tuple[CompactionTask, ...]
    version: int | None
    files_removed: int
    files_added: int
    rows: int
    attempts: int
    gave_up: bool = False
    reason: str = ""
    failed: bool = False  # gave up on an error of the bucket's files (BUCKET_FAULTS), not on a lost race
    locked: bool = False  # gave up because another replacement holds the bucket's lock (reason: until when)


@dataclass(frozen=True)
class CompactionReport:
    """What a compaction run planned and did."""

    table: str
    plan: CompactionPlan  # the first plan (what ``--apply`` starts from)
    applied: bool
    rounds: tuple[RoundResult, ...] = ()
    # The buckets planned over (lakeshard.compaction.scope): None for every bucket of the table.
    scope: frozenset[Bucket] | None = None

    @property
    def conflicts(self) -> int:
        """Return how many commit attempts lost a race."""
        return sum(r.attempts - (0 if r.gave_up else 1) for r in self.rounds)

    @property
    def gave_up(self) -> list[Bucket]:
        """Return the buckets abandoned: after too many conflicts, because a replacement held their lock, or
        because they failed (see :attr:`failed`)."""
        return sorted({t.bucket for r in self.rounds if r.gave_up for t in r.tasks})

    @property
    def failed(self) -> list[tuple[Bucket, str]]:
        """Return the buckets that could not be compacted for an error of their own files, with the error."""
        return sorted({(t.bucket, r.reason) for r in self.rounds if r.failed for t in r.tasks})


def file_nodes(files: Sequence[FileInfo], fragments: dict[str, FragmentMeta]) -> list[FileNode]:
    """Return planner inputs: each live file with its bucket and, when compaction wrote it, level and range."""
    nodes = []
    for f in files:
        bucket = (str(f.partition_values.get("tenant_id")), str(f.partition_values.get("hour")))
        meta = fragments.get(unquote(f.path))
        rows = f.num_records if f.num_records is not None else (meta.rows if meta else 0)
        nodes.append(FileNode(
            f.path, bucket, rows, f.size_bytes, f.modification_time,
            level=meta.level if meta else 0,
            first_key=meta.first if meta and meta.first_key else None,
            last_key=meta.last if meta and meta.last_key else None,
            outlier=meta.outlier if meta else False,
        ))
    return nodes


class Compactor:
    """Compacts one table's ``(tenant_id, hour)`` buckets: size-tiered, then locality levels.

    Args:
        store: the table store.
        table: the table's URI (partitioned by ``tenant_id, hour``).
        sort_schema: the table's sort order (default: :func:`sort_schema_for` the table's name).
        settings: planner and retry settings.
        chunk_lock: optional ``buckets -> context manager`` held around each round's swap, yielding the
            fencing tokens the swap carries (``ChunkLocks.fenced``).
        before_commit: called with the new files just before each commit (tests use it to die there); with no
            files where the commit itself writes and names them (a store that swaps whole partitions).
        incremental: plan only the buckets that changed since the last run that finished its work (see
            :mod:`lakeshard.compaction.scope`), and record this run's watermark when it finishes its work.

    Example::

        locks = ChunkLocks(store, cfg.table_uri("chunk_locks"))
        compactor = Compactor(store, cfg.table_uri("events"), chunk_lock=locks.fenced)
        report = compactor.run(apply=True, sealed=completionist.closed())
        print(len(report.plan.tasks), "tasks,", report.conflicts, "conflicts")
    """

    def __init__(self, store: TableStore, table: str, *, sort_schema: SortSchema | None = None,
                 settings: CompactionSettings | None = None, chunk_lock: ChunkLock | None = None,
                 before_commit: Callable[[Sequence[FileInfo]], None] | None = None, incremental: bool = False) -> None:
        self.store = store
        self.table = table
        self.sort_schema = sort_schema or sort_schema_for(table)
        self.settings = settings or CompactionSettings()
        self.chunk_lock = chunk_lock
        self._before_commit = before_commit
        self.incremental = incremental
        self._scope: frozenset[Bucket] | None = None  # the buckets this run plans over (None: all)
        self.fragments = FragmentTable(store, table)
        parts = store.partition_columns(table)
        if tuple(parts) != BUCKET_COLUMNS:
            raise CompactionError(f"{table}: compaction needs a table partitioned by {list(BUCKET_COLUMNS)}, "
                                  f"found {parts}")
        self.sort_schema.check(table, [f.name for f in store.schema(table).fields])

    # ------------------------------------------------------------------------------- planning
    def snapshot(self, *, now: datetime | None = None, rescope: bool = False) -> Snapshot:
        """Return the table version, its live files and the planner's view of them (of the buckets in scope;
        with ``rescope``, the scope of an incremental run is first worked out at that version)."""
        version = self.store.version(self.table)
        files = self.store.files(self.table, version=version)
        if rescope:
            self._scope = compaction_scope(self.store, self.table, files, version, now=now or datetime.now(UTC),
                                           size_tiered=self.settings.size_tiered).buckets
        if self._scope is not None:  # only these buckets' files are planned (and their fragments read)
            files = [f for f in files if _bucket_of(f) in self._scope]
        nodes = file_nodes(files, self.fragments.read(files).found)
        return version, files, nodes

    def plan(self, *, buckets: Sequence[Bucket] | None = None, now: datetime | None = None,
             sealed: Collection[Bucket] = ()) -> CompactionPlan:
        """Return the plan for the table as it is now (optionally only for ``buckets``; ``sealed`` ones merge
        all their small files at once)."""
        self._scope = None
        _, _, nodes = self.snapshot()
        return self._plan(nodes, buckets, now, sealed, check=True)

    def _plan(self, nodes: list[FileNode], buckets: Sequence[Bucket] | None, now: datetime | None,
              sealed: Collection[Bucket], *, check: bool = False) -> CompactionPlan:
        """Return the plan over ``nodes`` (of ``buckets`` only, when given); with ``check``, a bucket asked for
        that has no live file is an error. A round plans without it: the buckets it left out (given up, or
        done one at a time) are not among its nodes."""
        if buckets is not None:
            wanted = set(buckets)
            unknown = wanted - {n.bucket for n in nodes}
            if check and unknown:
                raise CompactionError(f"{self.table}: no live files in buckets {sorted(unknown)}")
            nodes = [n for n in nodes if n.bucket in wanted]
        return plan_compaction(nodes, now=now or datetime.now(UTC), size_tiered=self.settings.size_tiered,
                               locality=self.settings.locality, include_open=self.settings.include_open,
                               sealed=sealed)

    # ------------------------------------------------------------------------------ execution
    def run(self, *, apply: bool = True, buckets: Sequence[Bucket] | None = None,
            now: datetime | None = None, sealed: Collection[Bucket] = ()) -> CompactionReport:
        """Plan and (with ``apply``) execute rounds until no task is left or ``max_rounds`` is reached.

        ``sealed``: buckets that receive no more files (closed by the completionist); their small files merge
        without waiting for a tier to fill.
        """
        sealed = frozenset(sealed)
        self._scope = None
        # The scope is read at the snapshot's version: the watermark recorded below is that version.
        snapshot = self.snapshot(now=now, rescope=self.incremental and buckets is None)
        first = self._plan(snapshot[2], buckets, now, sealed, check=True)
        if not apply or not first.tasks:
            if apply:
                self._record(snapshot[0], finished=True)
            return CompactionReport(self.table, first, applied=False, scope=self._scope)
        rounds: list[RoundResult] = []
        abandoned: set[Bucket] = set()
        finished = False
        for n in range(self.settings.max_rounds):
            # The first round starts from the snapshot just planned on (the swap's commit checks it is current).
            results = self._round(buckets, now, abandoned, sealed, snapshot if n == 0 else None)
            if results is None:
                finished = True
                break
            rounds.extend(results)
            abandoned.update(t.bucket for r in results if r.gave_up for t in r.tasks)
        self._record(snapshot[0], finished=finished and not abandoned,
                     ours={r.version for r in rounds if r.version is not None})
        return CompactionReport(self.table, first, applied=True, rounds=tuple(rounds), scope=self._scope)

    def _record(self, version: int, *, finished: bool, ours: Collection[int] = ()) -> None:
        """Record the watermark of an incremental run that left no work behind: the version it planned at, or
        the table's latest when every commit since then was one of this run's swaps (``ours``)."""
        if not (self.incremental and finished) or self._scope == frozenset():
            return  # nothing changed since the watermark (an empty scope): it stays where it is
        latest = self.store.version(self.table)
        record_compacted(self.store, self.table, latest if set(range(version + 1, latest + 1)) <= set(ours)
                         else version)

    def _round(self, buckets: Sequence[Bucket] | None, now: datetime | None, abandoned: set[Bucket],
               sealed: Collection[Bucket], snapshot: Snapshot | None = None,
               only: Bucket | None = None) -> list[RoundResult] | None:
        """Run one round (one task per bucket, or only the bucket ``only``), retrying lost races; return its
        result (one per bucket when a failure made it go one bucket at a time); None when nothing is left."""
        attempts = 0
        while True:
            version, files, nodes = snapshot if snapshot is not None and attempts == 0 else self.snapshot()
            nodes = [n for n in nodes if n.bucket not in abandoned and (only is None or n.bucket == only)]
            tasks = _one_per_bucket(self._plan(nodes, buckets, now, sealed).tasks) if nodes else []
            if not tasks:
                return None
            if self.store.swaps_whole_partitions:
                if len(tasks) > 1:  # one bucket per commit: each is planned, swapped and retried on its own
                    return [r for t in tasks for r in self._round(buckets, now, abandoned, sealed, only=t.bucket)
                            or []]
                tasks = [_whole_bucket(tasks[0], nodes)]
            attempts += 1
            try:
                with self._locks(tasks) as fences:
                    return [self._execute(tasks, version, files, attempts, fences)]
            except ChunkLocked as exc:  # a replacement holds that bucket: leave it to it, compact the others
                locked = [t for t in tasks if t.bucket == (exc.chunk.tenant_id, exc.chunk.hour)]
                return [RoundResult(tuple(locked), None, 0, 0, 0, attempts, gave_up=True, reason=str(exc),
                                    locked=True)]
            except CommitConflict as exc:
                if attempts > self.settings.max_retries:
                    return [RoundResult(tuple(tasks), None, 0, 0, 0, attempts, gave_up=True, reason=str(exc))]
            except BUCKET_FAULTS as exc:
                if len(tasks) == 1:
                    return [RoundResult(tuple(tasks), None, 0, 0, 0, attempts, gave_up=True, failed=True,
                                        reason=f"{type(exc).__name__}: {exc}")]
                # Nothing was committed: find the bucket at fault by compacting each alone.
                return [r for t in tasks for r in self._round(buckets, now, abandoned, sealed, only=t.bucket) or []]

    def _locks(self, tasks: Sequence[CompactionTask]) -> AbstractContextManager[Sequence[AppTransaction]]:
        if self.chunk_lock is None:
            return contextlib.nullcontext(())
        return self.chunk_lock(sorted({t.bucket for t in tasks}))

    def _execute(self, tasks: Sequence[CompactionTask], version: int, files: Sequence[FileInfo],
                 attempts: int, fences: Sequence[AppTransaction]) -> RoundResult:
        if self.store.swaps_whole_partitions:
            return self._swap_whole(tasks[0], version, files, attempts, fences)
        if self.settings.engine == "arrow":
            try:
                return self._swap(tasks, version, files, attempts, fences, spark_engine=False)
            except MergeError as exc:
                if "is not sorted" not in str(exc):
                    raise
                # Files written before ingest sorted them: Spark sorts this round instead of merging.
        return self._swap(tasks, version, files, attempts, fences, spark_engine=True)

    def _swap(self, tasks: Sequence[CompactionTask], version: int, files: Sequence[FileInfo], attempts: int,
              fences: Sequence[AppTransaction], *, spark_engine: bool) -> RoundResult:
        by_path = {f.path: f for f in files}
        inputs = [by_path[p] for t in tasks for p in t.inputs]
        by_bucket = {t.bucket: t for t in tasks}
        merged = self._merged(inputs, sum(t.outputs for t in tasks)) if spark_engine else None
        written: dict[str, MergedFile] = {}  # what the arrow merge recorded, by path relative to the table

        def describe(root: str, new: Sequence[FileInfo]) -> dict[str, str]:
            if self._before_commit is not None:
                self._before_commit(new)
            metas, buckets = [], []
            for f in new:
                bucket = (str(f.partition_values.get("tenant_id")), str(f.partition_values.get("hour")))
                task = by_bucket[bucket]
                buckets.append(bucket)
                out = written.get(f.path)  # as on disk, as the store hands it over
                if out is None:  # written by Spark: read its sort columns back
                    metas.append(describe_file(root, f.path, self.sort_schema, level=task.output_level,
                                               outlier=task.outliers, max_regex_chars=self.settings.max_regex_chars))
                else:
                    metas.append(fragment_meta(f.path, level=task.output_level, rows=out.rows, first=out.first,
                                               last=out.last, distinct=out.distinct, outlier=out.outlier,
                                               max_regex_chars=self.settings.max_regex_chars))
            # Durable first: the swap below makes these files live only once their rows are committed.
            self.fragments.write(metas, buckets)
            return fragments_metadata(metas)

        summary = {"operation": "compaction", "tasks": [
            {"bucket": list(t.bucket), "kind": t.kind, "inputs": len(t.inputs), "rows": t.rows,
             "level": t.output_level, "reason": t.reason} for t in tasks]}
        result = self.store.replace_files(
            self.table, [f.path for f in inputs], merged, data_change=False, app_transactions=fences,
            metadata={"lakeshard.compaction": summary}, read_version=version, before_commit=describe,
            write=None if spark_engine else self._merge_writer(tasks, written, by_path),
        )
        return RoundResult(tuple(tasks), result.version, result.files_removed, result.files_added,
                           result.rows_added, attempts)

    def _swap_whole(self, task: CompactionTask, version: int, files: Sequence[FileInfo], attempts: int,
                    fences: Sequence[AppTransaction]) -> RoundResult:
        """Rewrite one whole bucket (``task``: every live file of it at ``version``) in one commit through the
        store's partition swap, then describe the files that commit added in the ``fragments`` table.

        The commit carries the bucket's fence (its chunk lock's app transaction), so a replay after it landed is
        skipped. The fragment rows come after the commit, which is the first moment the new files' names are
        known; a crash in between leaves live files without rows, which the planner takes as level-0 files of
        unknown key range (merged again by a later round, never wrong).
        """
        by_path = {f.path: f for f in files}
        inputs = [by_path[p] for p in task.inputs]
        if self._before_commit is not None:
            self._before_commit([])  # the new files are named by the commit itself
        summary = {"operation": "compaction", "tasks": [
            {"bucket": list(task.bucket), "kind": task.kind, "inputs": len(task.inputs), "rows": task.rows,
             "level": task.output_level, "reason": task.reason}]}
        result = self.store.replace_files(
            self.table, [f.path for f in inputs], self._merged(inputs, task.outputs), data_change=False,
            app_transactions=fences, metadata={"lakeshard.compaction": summary}, read_version=version)
        if not result.skipped:
            self._describe_added(task, result.version)
        return RoundResult((task,), result.version, result.files_removed, result.files_added, result.rows_added,
                           attempts)

    def _describe_added(self, task: CompactionTask, version: int) -> None:
        """Append the fragment rows of the files the swap at ``version`` added (read back from their sort columns)."""
        root = self.table.rstrip("/")
        added = [c.file for e in self.store.log_entries(self.table, start=version, end=version)
                 for c in e.changes if c.action == "add"]
        metas = [describe_file(root, unquote(f.path), self.sort_schema, level=task.output_level,
                               outlier=task.outliers, max_regex_chars=self.settings.max_regex_chars) for f in added]
        if metas:
            self.fragments.write(metas, [task.bucket] * len(metas))

    def _merge_writer(self, tasks: Sequence[CompactionTask], written: dict[str, MergedFile],
                      inputs: Mapping[str, FileInfo]) -> Callable[[str], None]:
        """Return the store's write function: merge each task's inputs (``inputs``: the live files by path) into
        its partition directory, recording each output's description in ``written`` (by path relative to the
        table). A merge that cannot read its inputs raises :class:`~lakeshard.errors.DamagedDataFile` for the
        input at fault when its footer shows one."""
        budget = self.settings.memory_budget_bytes
        threads = self.settings.merge_threads

        def write(target: str) -> None:
            if "://" in target:
                raise CompactionError(f"{self.table}: the arrow engine writes local tables only; use "
                                      "CompactionSettings(engine='spark') for object stores")
            root = target.rsplit("/", 1)[0]

            def merge(t: CompactionTask, budget: int, strategy: Literal["auto", "memory"]) -> None:
                paths = [f"{root}/{unquote(p)}" for p in t.inputs]  # log paths are URI-encoded
                parts, footer = partition_directory(dict(zip(BUCKET_COLUMNS, t.bucket, strict=True)))
                directory = f"{target}/{parts}"
                # A merge into level 0 stays small: it is not split (outlier files live on the levels).
                split = self.settings.outliers if t.output_level >= 1 else None
                try:
                    os.makedirs(directory, exist_ok=True)
                    stats = merge_sorted_files(paths, self.sort_schema, functools.partial(_part_path, directory),
                                               target_rows=t.target_rows, memory_budget_bytes=budget,
                                               outliers=split, all_outliers=t.outliers, strategy=strategy,
                                               file_metadata=footer)
                except (OSError, pa.ArrowException) as exc:
                    damage = next((d for p in t.inputs if (d := check_data_file(self.table, inputs[p])) is not None),
                                  None)
                    if damage is not None:
                        raise damage from exc
                    raise CompactionError(f"{self.table}: cannot merge bucket {t.bucket[0]!r}/{t.bucket[1]} "
                                          f"({len(paths)} files, e.g. {t.inputs[0]}): {type(exc).__name__}: {exc}"
                                          ) from exc
                for out in stats.files:
                    written[os.path.relpath(out.path, root)] = out

            # Merges that fit a share of the budget in memory run side by side; the others (found out while
            # reading, before writing anything) then run one at a time with all of it, streaming if need be.
            alone = list(tasks)
            if threads > 1 and len(tasks) > 1:
                alone = []
                with ThreadPoolExecutor(max_workers=threads) as pool:
                    futures = [(t, pool.submit(merge, t, budget // threads, "memory")) for t in tasks]
                for t, done in futures:
                    try:
                        done.result()
                    except OverBudget:
                        alone.append(t)
                del futures  # their exceptions' tracebacks reference the merges' frames
            for t in alone:
                merge(t, budget, "auto")

        return write

    def _merged(self, inputs: Sequence[FileInfo], outputs: int) -> DataFrame:
        """Return the inputs' rows range-partitioned into ``outputs`` sorted, disjoint partitions."""
        from pyspark.sql import functions as F

        key = [F.col(c) for c in (*BUCKET_COLUMNS, *self.sort_schema.columns)]
        df = self.store.read_files(self.table, inputs)
        return df.repartitionByRange(max(1, outputs), *key).sortWithinPartitions(*key)


def _bucket_of(f: FileInfo) -> Bucket:
    return str(f.partition_values.get("tenant_id")), str(f.partition_values.get("hour"))


def _part_path(directory: str, n: int) -> str:
    return f"{directory}/part-{n:05d}.parquet"


def _whole_bucket(task: CompactionTask, nodes: Sequence[FileNode]) -> CompactionTask:
    """Return ``task`` widened to every file of its bucket in ``nodes``, merged into the highest level among them:
    a swap that removes whole partitions rewrites all of the bucket into outputs disjoint in sort order."""
    members = sorted((n for n in nodes if n.bucket == task.bucket), key=lambda n: n.path)
    return dataclasses.replace(
        task, inputs=tuple(n.path for n in members), rows=sum(n.rows for n in members),
        size_bytes=sum(n.size_bytes for n in members),
        output_level=max([task.output_level, *(n.level for n in members)]),
        outliers=all(n.outlier for n in members))


def _one_per_bucket(tasks: Sequence[CompactionTask]) -> list[CompactionTask]:
    """Return the first task of each bucket: a round's outputs carry one level per bucket."""
    seen: set[Bucket] = set()
    out = []
    for t in tasks:
        if t.bucket not in seen:
            seen.add(t.bucket)
            out.append(t)
    return out
