"""Shard writers (Husky): consume a shard's new ``routed`` commits and commit each event to ``events`` once.

Everything a writer needs to resume is in the lakehouse, so writers are stateless:

* **Progress** is the app transaction ``writer/<shard>`` → the ``routed`` version consumed, committed in
  the same Delta commit as the events (as kafka-delta-ingest stores Kafka offsets).
* **IDs** of committed events live in the ``event_ids`` table, partitioned by ``(shard, interval)``
  (interval = the event's UTC hour), each with a 128-bit hash of its key, so checking a batch against them
  reads two ``long`` columns of the few partitions the batch touches. Delta cannot commit two tables at once,
  so the protocol is: the ``events`` commit is authoritative; the ``event_ids`` commit follows with the same
  app transactions; a writer that finds ``event_ids`` behind ``events`` for a shard (a crash between the two)
  first rebuilds those IDs from the committed events (they carry ``shard`` and ``routed_version``) before it
  dedupes anything.
* **ID cache**: intervals once read stay in an in-memory LRU (:mod:`lakeshard.dedupe.cache`) bounded in
  bytes, so a steady stream pages in only the intervals it has not seen; the reports count hits and page-ins.
* **Retention**: IDs are remembered for ``dedupe.id_retention_hours`` of event time behind the newest hour
  committed to the shard. An event older than that is written without being checked against the index (a
  duplicate of it is not detected), and :meth:`ShardWriter.expire_ids` deletes the index partitions past it.
* **Expectations**: a ``gate`` (the pipeline runner's expectation gate) sees each step's new events right
  before the ``events`` commit and returns the ones to commit; the rest count as ``rejected``. Their IDs
  still go to ``event_ids``, so a later copy of a rejected event is a duplicate, not a second rejection.
* **Conflicts**: the ``events`` commit is prepared against the version the writer read its progress at;
  a second writer that committed the same shard's progress meanwhile makes it fail with
  :class:`~lakeshard.errors.CommitConflict`. The loser drops its batch and its cached IDs of those shards,
  re-reads the committed progress and goes on from there (Husky's reconciliation) — no duplicate, nothing
  lost. A writer that finds its shards' progress moved by someone else drops their cached IDs the same way.

* **Memory gate**: a step consumes routed commits only up to ``dedupe.max_batch_bytes`` of Parquet, and up to
  ``dedupe.arrow_max_bytes`` when that is set (at least one commit), so a writer that fell far behind catches
  up in bounded slices, each run in the driver.
* **Faults are not bad data** (:mod:`lakeshard.dedupe.faults`): a step failing on an infrastructure fault is
  retried with exponential backoff for ``dedupe.retry_total_seconds``, then the run stops with
  :class:`~lakeshard.dedupe.faults.WriterStepFailed`, progress unchanged. Only rows proven unwritable (a failed
  write bisected in a scratch directory: rows that fail alone while the rest writes) go to ``quarantine``,
  before the step is done again without them.

* **Two execution paths, one result.** A step whose new routed files hold at most
  ``dedupe.arrow_max_bytes`` (default 64 MiB) runs in the driver process: pyarrow reads the files, numpy
  hashes the keys (:mod:`lakeshard.dedupe.keyhash`, bit for bit Spark's ``xxhash64``, so the ID index and the
  cache are shared by both paths), an Arrow group-by keeps the first row of each key, pyarrow writes one
  sorted Parquet file per ``(tenant, hour)`` (and per ``(shard, interval)`` of IDs) into the store's write
  directory, and the store commits them exactly as it commits Spark's files (``append(write=...)``: same add
  actions, app transactions, metadata and conflict check). Bigger steps run as Spark jobs; on the driver
  path an expectation gate's checks run with pyarrow when each is in the subset of Spark SQL
  :mod:`lakeshard.pipelines.arrow_rules` evaluates exactly as Spark does, else on the step's new events handed
  to Spark as one Arrow table. ID page-ins and the repair of a lagging index read with pyarrow on both paths
  (the repair falls back to Spark past the same bound); dead letters are written by Spark.
  :attr:`WriteReport.engine` says which path a step took.

* **One entry for a batch in memory**: a batch the router planned as ``fused`` (docs/decisions.md, record 19)
  never goes to ``routed``: the router hands its routed rows to :meth:`ShardWriter.deliver`, which drains
  ``routed`` first (so no ``writer/<shard>`` commit can add IDs the batch's check did not see), then runs the
  driver-side step on the rows for every shard at once and commits ``events``, then ``event_ids``, each with the
  app transaction ``fused`` → the batch (rows carry ``routed_version = -batch``, which the ``writer/<shard>``
  repair never selects). A batch whose ``events`` commit is in but whose IDs are not is completed by rebuilding
  its IDs from ``events`` (:meth:`~lakeshard.dedupe.index.IdIndex.repair_fused`). A shard's damaged ID file met by
  the batch's check hands the batch back (None, before any commit of it): the router commits it to ``routed`` with
  ``router`` → the batch, so a replay takes that path again and a batch is delivered one way only.

* **Commit coalescing**: one writer owning many shards commits them all in one Delta commit (their files and
  app transactions), and one step takes every routed commit waiting (up to the memory gate); a following
  writer may also wait for ``dedupe.commit_min_bytes`` or ``dedupe.commit_max_wait_seconds`` (:meth:`step`).

The writer is a façade over the parts that own its state (the only one that reaches into them):
:mod:`~lakeshard.dedupe.feed` (progress, coalescing,
the memory gate, new routed files, routed-file expiry), :mod:`~lakeshard.dedupe.index` (the ID cache, page-in,
remember, repair, merge, expiry), :mod:`~lakeshard.dedupe.engines` (the Spark and Arrow steps behind one
interface), :mod:`~lakeshard.dedupe.deadletters` and :mod:`~lakeshard.dedupe.report`.

Not built: coalescing the commits of several writer *processes* into one Delta commit
(delta-dotnet's single committer of files flushed by many replicas).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING

from lakeshard.config import LakeshardConfig
from lakeshard.dedupe.cache import IdCache, Interval
from lakeshard.dedupe.commit import commits_per_shard
from lakeshard.dedupe.deadletters import DeadLetters, newly_unwritable, quarantine_rows
from lakeshard.dedupe.engines import ArrowStep, ClosedBuckets, Gate, SparkStep, Step, StepContext, StepEngine
from lakeshard.dedupe.faults import RecordLevelFailure, RetryPolicy, retry_step
from lakeshard.dedupe.feed import RoutedFeed
from lakeshard.dedupe.index import IdIndex
from lakeshard.dedupe.keyhash import key_hash_columns
from lakeshard.dedupe.report import WriteReport
from lakeshard.errors import DamagedDataFile, LakeshardError
from lakeshard.lake import CommitResult, FileInfo, TableSpec, TableStore, check_data_file, damaged_in_spark
from lakeshard.tables import (
    BUCKETS,
    EVENTS,
    EVENTS_SCHEMA,
    FUSED_APP_ID,
    ID_INDEX,
    ID_INDEX_KEYED_SCHEMA,
    ID_INDEX_PARTITIONING,
    ID_INDEX_PROPERTIES,
    QUARANTINE,
    ROUTED,
    ROUTER_APP_ID,
    USER_TABLE_SHAPES,
    writer_app_id,
)
from lakeshard.tables import ID_INDEX_SCHEMA as ID_SCHEMA

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

__all__ = [
    "EVENTS", "EVENTS_SCHEMA", "ID_INDEX", "ID_SCHEMA", "ShardWriter", "WriteReport",
    "key_hash_columns", "writer_app_id",
]


class ShardWriter:
    """Writes the routed events of ``shards`` to ``events`` exactly once; restartable at any point.

    Example::

        writer = ShardWriter(spark, store, cfg, shards=[0, 1, 2, 3])
        for report in writer.run():
            print(report.written, report.duplicates_in_index)
    """

    def __init__(
        self,
        spark: SparkSession | None,
        store: TableStore,
        cfg: LakeshardConfig,
        shards: Sequence[int],
        *,
        before_commit: Callable[[str], None] | None = None,
        gate: Gate | None = None,
        clock: Callable[[], datetime] | None = None,
        on_delivered: Callable[[pa.Table], None] | None = None,
    ) -> None:
        if not shards:
            raise ValueError("a writer needs at least one shard")
        self._spark = spark
        self.store = store
        self.shards = tuple(sorted(set(shards)))
        self.routed_uri = cfg.table_uri(ROUTED)
        self.events_uri = cfg.table_uri(EVENTS)
        self.ids_uri = cfg.table_uri(ID_INDEX)
        self.retry_policy = RetryPolicy(cfg.dedupe.retry_initial_seconds, cfg.dedupe.retry_max_delay_seconds,
                                        cfg.dedupe.retry_total_seconds)
        self.arrow_max_bytes = cfg.dedupe.arrow_max_bytes
        self.cfg = cfg
        self.failures = 0
        self.reports: list[WriteReport] = []  # every step of :meth:`run` and :meth:`deliver`, in order
        clock = clock or (lambda: datetime.now(UTC))
        # Called with the table name right before each commit (and "page-in" before reading IDs): the crash
        # tests stop the process there.
        before_commit = before_commit or (lambda table: None)
        self._before_commit = before_commit
        self._ready = False
        # Sees the routed rows of each batch :meth:`deliver` committed (the route flow counts its expectations on them).
        self._on_delivered = on_delivered or (lambda rows: None)
        self.feed = RoutedFeed(store, self.shards, routed_uri=self.routed_uri, events_uri=self.events_uri,
                               dedupe=cfg.dedupe, clock=clock, before_commit=before_commit,
                               one_version_per_step=commits_per_shard(store))
        self.index = IdIndex(store, self.shards, ids_uri=self.ids_uri, events_uri=self.events_uri,
                             retention=timedelta(hours=cfg.dedupe.id_retention_hours),
                             cache_bytes=cfg.dedupe.id_cache_bytes, arrow_max_bytes=self.arrow_max_bytes,
                             spark=lambda: self.spark, before_commit=before_commit)
        self.dead_letters = DeadLetters(store, self.shards, quarantine_uri=cfg.table_uri(QUARANTINE),
                                        events_uri=self.events_uri, before_commit=before_commit)
        buckets = ClosedBuckets(store, cfg.table_uri(BUCKETS))
        context = StepContext(store, lambda: self.spark, self.routed_uri, self.events_uri, self.ids_uri, self.feed,
                              self.index, buckets, gate, clock, before_commit)
        self.spark_step = SparkStep(context)
        self.arrow_step = ArrowStep(context)

    @property
    def spark(self) -> SparkSession:
        """The session big steps run on: the one given, else the store's (started when first needed)."""
        return self._spark if self._spark is not None else self.store.spark

    @property
    def cache(self) -> IdCache:
        """The in-memory cache of ID intervals (:attr:`IdIndex.cache`)."""
        return self.index.cache

    @property
    def conflicts(self) -> int:
        """How many commit races this writer lost to another writer of its shards."""
        return self.feed.conflicts

    @property
    def deferred(self) -> int:
        """How many steps waited for more routed data to coalesce (``step(flush=False)``)."""
        return self.feed.deferred

    @property
    def commit_min_bytes(self) -> int:
        """With ``step(flush=False)``, routed commits wait while they hold less than this (see :meth:`step`)."""
        return self.feed.commit_min_bytes

    @commit_min_bytes.setter
    def commit_min_bytes(self, value: int) -> None:
        self.feed.commit_min_bytes = value

    @staticmethod
    def table_specs(store: TableStore, cfg: LakeshardConfig) -> list[TableSpec]:
        """Return the tables writers of ``cfg``'s lakehouse write (for :meth:`TableStore.create_all`)."""
        shape = USER_TABLE_SHAPES[EVENTS]
        specs = [TableSpec(cfg.table_uri(EVENTS), shape.schema, tuple(shape.partition_by),
                           description=shape.description)]
        # An index made with the exact keys beside their hash stays as it is (IDs are written in the table's shape).
        ids = cfg.table_uri(ID_INDEX)
        keyed = store.exists(ids) and store.schema(ids).fieldNames() == ID_INDEX_KEYED_SCHEMA.fieldNames()
        if not keyed:
            specs.append(TableSpec(ids, ID_SCHEMA, tuple(ID_INDEX_PARTITIONING), ID_INDEX_PROPERTIES,
                                   "key hashes of committed events, by shard and hour, for deduplication"))
        return specs

    def ensure_tables(self) -> None:
        """Create ``events`` and ``event_ids`` if missing."""
        if self._ready:
            return
        self.store.create_all(self.table_specs(self.store, self.cfg))
        self._ready = True

    def run(self, *, max_steps: int = 1000, flush: bool = True) -> list[WriteReport]:
        """Return the reports of stepping until the shards have consumed every committed routed version
        (with ``flush=False``: until the rest is waiting to be coalesced, see :meth:`step`)."""
        reports = []
        for _ in range(max_steps):
            report = self.step(flush=flush)
            if report is None:
                break
            reports.append(report)
        if reports and not reports[-1].conflict and self.feed.unchecked:
            # Once per run, counted from the table: a writer built per run consumes too little to trigger it.
            expired = self.feed.expire_if_due(self.progress)
            if expired:
                reports[-1] = dataclasses.replace(reports[-1], routed_files_expired=reports[-1].routed_files_expired
                                                  + expired)
        self.reports += reports
        return reports

    def deliver(self, batch: int, routed: pa.Table) -> CommitResult | None:
        """Return the ``events`` commit of fused batch plan ``batch`` (``routed``: its routed rows, in memory), after
        its IDs' commit; skipped when another process had committed the batch's events (then only missing IDs are
        committed). None when the batch goes through ``routed`` instead: a shard's ID file it must read is damaged
        (that shard is stopped, see :attr:`stopped`), or an earlier attempt already handed it over that way.

        Example::

            writer = ShardWriter(spark, store, cfg, shards=range(64))
            Router(spark, store, cfg, handoff=writer, fused=True).run()
            writer.run()  # batches too big for the driver went through routed
            writer.compact_ids()
        """
        started = time.perf_counter()
        self.ensure_tables()
        self.run()
        read_version = self.store.version(self.events_uri)
        in_events = self.store.transaction_version(self.events_uri, FUSED_APP_ID) or 0
        if (self.store.transaction_version(self.ids_uri, FUSED_APP_ID) or 0) >= batch:
            return CommitResult(self.events_uri, read_version, skipped=True)
        if in_events >= batch:
            # The events are in, their IDs are not (a crash between the two commits): rebuilt from ``events``.
            self._before_commit(ID_INDEX)
            self.index.repair_fused(batch)
            return CommitResult(self.events_uri, read_version, skipped=True)
        if self._handed_to_routed(batch):
            return None
        progress = self.progress()
        # Another process's commits (a writer's, or a fused batch's) may hold IDs this cache has not seen.
        self.cache.drop_shards(self.feed.moved_by_others(progress, in_events))
        self.feed.saw(progress)
        self.feed.saw_fused(in_events)
        report = self._written(
            lambda excluded: self.arrow_step.run(Step((), self.shards, -batch, read_version, 0, started, excluded,
                                                      rows=routed, fused=batch)),
            self.shards, -batch, lambda found: self.dead_letters.send_fused(batch, routed, found))
        if isinstance(report, int):
            # One commit delivers every shard, so it cannot leave one out: the batch goes through routed, where the
            # shard writers stop this shard and commit the others. Nothing of the batch is committed yet.
            return None
        self.reports.append(report)
        if not report.conflict:
            self._on_delivered(routed)
        return CommitResult(self.events_uri, self.store.version(self.events_uri), skipped=report.conflict,
                            rows_added=report.written)

    def derive(self, events: pa.Table) -> pa.Table:
        """Return each row's key hashes (``key_hi``, ``key_lo``) of ``events``, which :meth:`deliver`'s step then
        takes instead of hashing the batch itself: the router computes them beside its placements."""
        import pyarrow as pa

        from lakeshard.dedupe.keyhash import key_hashes

        hi, lo = key_hashes(events)
        return pa.table({"key_hi": hi, "key_lo": lo})

    def _handed_to_routed(self, batch: int) -> bool:
        """Return whether fused batch plan ``batch`` went through ``routed`` (``router`` → ``batch`` there).

        Only the newest plan is ever delivered and ``routed``'s ``router`` version never passes the newest plan,
        so it reaches ``batch`` only when this batch's rows were committed there: a replay then goes the same way.
        """
        uri = self.routed_uri
        return self.store.exists(uri) and (self.store.transaction_version(uri, ROUTER_APP_ID) or 0) >= batch

    def progress(self) -> dict[int, int]:
        """Return, per shard, the routed version whose events are committed (0 = none yet)."""
        self.ensure_tables()
        return self.feed.progress()

    def step(self, *, flush: bool = True) -> WriteReport | None:
        """Return the report of consuming the shards' new routed commits, or None when there are none.

        With ``flush=False`` (a writer that keeps following the stream) new commits also wait — None, counted in
        :attr:`deferred` — while they hold less than ``dedupe.commit_min_bytes`` and the oldest of them is
        younger than ``dedupe.commit_max_wait_seconds``: commits coalesced by size and latency.
        """
        started = time.perf_counter()
        self.ensure_tables()
        read_version = self.store.version(self.events_uri)
        progress = self.progress()
        fused = self.feed.fused_progress()
        # Progress moved by someone else (a fused batch: any shard's): what this writer cached may be incomplete.
        self.cache.drop_shards(self.feed.moved_by_others(progress, fused))
        self.feed.saw_fused(fused)
        if self.dead_letters.finish(progress):
            return self.step()  # read the version and progress again: our own commit is not a concurrent one
        self.feed.saw(progress)
        repaired = self.repair_ids(progress)
        intake = self.feed.next_intake(progress, flush=flush)
        if intake is None:
            return None
        todo, routed_version, new_files = intake.shards, intake.routed_version, intake.files
        engine = self._engine_for(new_files)

        def attempt(excluded: dict[tuple[object, ...], str]) -> WriteReport:
            try:
                return engine.run(Step(new_files, todo, routed_version, read_version, repaired, started, excluded))
            except Exception as exc:
                if (found := self._damaged_routed_file(exc, new_files)) is None:
                    raise
                raise found from None

        def whole(exc: RecordLevelFailure) -> WriteReport | None:
            if exc.keys and engine is self.arrow_step:
                return None  # the rows are named: they go to quarantine one by one
            return self.dead_letters.send(self.spark_step.batch(new_files, routed_version), todo, routed_version,
                                          exc.reason[:1000], started, progress=self.progress,
                                          cache_bytes=self.cache.stats().bytes)

        def letter(found: dict[tuple[object, ...], str]) -> int:
            self._before_commit("dead-letter-rows")
            return quarantine_rows(self.store, self.routed_uri, self.dead_letters.quarantine_uri, new_files, found,
                                   todo, routed_version)

        report = self._written(attempt, todo, routed_version, letter, whole)
        if isinstance(report, int):  # isolated to its shard: the others' step is done again without it
            return self.step(flush=flush)
        # Both commits are in: merging sealed intervals' ID files and expiring consumed routed files is
        # housekeeping, outside the retries (an error here is not the batch's; the next step goes on from
        # the committed progress).
        if not report.conflict:
            # Both decided from the tables (the event_ids listing, the live routed files), so a writer built for
            # one short run keeps them bounded as a long-lived one does.
            merged = self.index.compact()
            expired = self.feed.expire_if_due(self.progress) if self.feed.consumed(len(new_files)) else 0
            if merged or expired:
                report = dataclasses.replace(report, id_files_merged=merged, routed_files_expired=expired,
                                             seconds=time.perf_counter() - started)
        return report

    def _written(self, attempt: Callable[[dict[tuple[object, ...], str]], WriteReport], shards: Sequence[int],
                 routed_version: int, letter: Callable[[dict[tuple[object, ...], str]], int],
                 whole: Callable[[RecordLevelFailure], WriteReport | None] = lambda exc: None) -> WriteReport | int:
        """Return the report of ``attempt`` (given the rows proven unwritable so far) under the retry policy, or the
        shard a damaged file stopped (the feed stops it and its cache is dropped; the caller goes on without it).

        Rows a commit proves unwritable go to quarantine first (``letter``: a crash then redoes the step and finds
        the same rows), then the step is done again without them; a later round's rows get a commit of their own.
        A failure ``whole`` takes (rows it cannot name) ends the step with ``whole``'s report instead.
        """
        excluded: dict[tuple[object, ...], str] = {}
        lettered = 0
        while True:
            try:
                report = retry_step(partial(attempt, excluded), self.retry_policy, shards=shards,
                                    routed_version=routed_version, on_fault=self._count_failure)
                break
            except DamagedDataFile as exc:
                shard = exc.partition_values.get("shard")
                if shard is None or not shard.isdigit() or int(shard) not in shards:
                    raise
                self.feed.stop(int(shard), exc)
                self.cache.drop_shards([int(shard)])
                return int(shard)
            except RecordLevelFailure as exc:
                if (ended := whole(exc)) is not None:
                    return ended
                found = newly_unwritable(exc, excluded)
                excluded.update(found)
                lettered += letter(found)
        if excluded:
            report = dataclasses.replace(report, rows_in=report.rows_in + lettered, dead_lettered=lettered,
                                         error=next(iter(excluded.values())))
        return report

    @property
    def stopped(self) -> dict[int, DamagedDataFile]:
        """The shards this writer stopped because a file their steps read is damaged (a ``routed`` or
        ``event_ids`` file of the shard), with the error naming it; the other shards went on."""
        return dict(self.feed.stopped)

    def _damaged_routed_file(self, exc: Exception, files: Sequence[FileInfo]) -> DamagedDataFile | None:
        """Return the error naming the routed file of ``files`` a failed step's read names (a Spark job's error
        names it in text), when its footer confirms the damage; None when the failure is not such a file's."""
        if isinstance(exc, LakeshardError):
            return None
        found = damaged_in_spark(self.routed_uri, files, exc)
        if found is None:
            return None
        file = next(f for f in files if f.path == found.path)
        return found if check_data_file(self.routed_uri, file) is not None else None

    def _count_failure(self, exc: BaseException) -> None:
        """A failed attempt: the IDs cached for the step's shards may hold what it added before failing."""
        self.failures += 1
        self.cache.drop_shards(self.shards)

    def _engine_for(self, files: Sequence[FileInfo]) -> StepEngine:
        """Return the engine a step over these routed files runs on: the driver-side (Arrow) one for small steps.

        A Spark job's fixed cost (scheduling, the partition-value join, a shuffle for the file layout) dominates
        a micro-batch. With an expectation gate whose rules need Spark, only its checks run as Spark jobs, on the
        step's new events handed over as one Arrow table.
        """
        if self.arrow_max_bytes > 0 and sum(f.size_bytes for f in files) <= self.arrow_max_bytes:
            return self.arrow_step
        return self.spark_step

    def repair_ids(self, progress: dict[int, int] | None = None) -> int:
        """Return how many IDs were rebuilt from ``events`` for shards whose ``event_ids`` lag behind.

        The ``events`` commit is the truth; this restores agreement after a crash between the two commits.
        """
        return self.index.repair(progress or self.progress())

    def expire_routed(self) -> int:
        """Remove from ``routed`` the files of this writer's shards that their committed progress has passed;
        return how many (see :meth:`RoutedFeed.expire_routed <lakeshard.dedupe.feed.RoutedFeed.expire_routed>`).
        """
        return self.feed.expire_routed(self.progress)

    def compact_ids(self, intervals: Iterable[Interval] | None = None) -> int:
        """Merge the ID files of each sealed interval of these shards into one file sorted by the key hash;
        return how many files were merged away (0 when another commit removed some of them first).

        Each step appends one ID file per ``(shard, interval)`` it wrote to, so an hour of a steady stream
        ends up as dozens of small files, and paging it in costs a file open each. An interval is *sealed*
        once the ``event_ids`` listing holds a newer hour of its shard; after each step's commits the writer
        merges every sealed interval with more than one file (``intervals``: only these), whoever wrote them
        (an earlier run, late events), so a page-in reads about one file per past hour. The swap
        (:meth:`~lakeshard.lake.TableStore.replace_files`, ``dataChange=false``) removes exactly the files it
        read and adds their rows in one commit: the index never loses or doubles an ID,
        and a writer that listed the old files still reads them (they stay on disk until vacuum).
        """
        self.ensure_tables()
        return self.index.compact(intervals)

    def expire_ids(self) -> int:
        """Delete the ID index partitions of these shards older than the retention; return files removed.

        The cutoff is per shard: ``id_retention_hours`` before the newest interval in its index.
        """
        self.ensure_tables()
        return self.index.expire()


class WritersOnDemand:
    """The fused hand-off of a run that plans no fused batch itself (``lakeshard route``): the writers of every shard,
    built by ``build`` only when the router meets a fused batch a stopped run planned, deliver it as a fused run's
    writers do (:meth:`ShardWriter.deliver`), then merge their ID files."""

    def __init__(self, build: Callable[[], ShardWriter]) -> None:
        self._build = build

    def deliver(self, batch: int, routed: pa.Table) -> CommitResult | None:
        writer = self._build()
        result = writer.deliver(batch, routed)
        writer.compact_ids()
        return result

    def derive(self, events: pa.Table) -> pa.Table:
        import pyarrow as pa

        return pa.table({})  # nothing derived ahead: the writers hash a replayed batch's keys themselves
