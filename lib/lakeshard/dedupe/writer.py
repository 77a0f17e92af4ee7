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

* **Memory gate**: a step consumes routed commits only up to ``dedupe.max_batch_bytes`` of Parquet (at least
  one commit), so a writer that fell far behind catches up in bounded slices.
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
  path an expectation gate's checks (Spark SQL) run on the step's new events handed to Spark as one Arrow
  table. ID page-ins and the repair of a lagging index read with pyarrow on both paths (the repair falls back
  to Spark past the same bound); dead letters are written by Spark. :attr:`WriteReport.engine` says which
  path a step took.

* **Commit coalescing**: one writer owning many shards commits them all in one Delta commit (their files and
  app transactions), and one step takes every routed commit waiting (up to the memory gate); a following
  writer may also wait for ``dedupe.commit_min_bytes`` or ``dedupe.commit_max_wait_seconds`` (:meth:`step`).

Not built (see the issue notes): coalescing the commits of several writer *processes* into one Delta commit
(delta-dotnet's single committer of files flushed by many replicas).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import numpy as np

from lakeshard.config import LakeshardConfig
from lakeshard.dedupe.cache import IdCache, IdInterval, Interval, hash_order
from lakeshard.dedupe.faults import (
    RecordLevelFailure,
    RetryPolicy,
    event_keys,
    quarantine_rows,
    retry_step,
    write_or_blame,
)
from lakeshard.errors import CommitConflict, TableStoreError
from lakeshard.lake import BYTES_ADDED, AppTransaction, CommitInfo, FileInfo, TableStore
from lakeshard.landing.reasons import WRITE_FAILED
from lakeshard.landing.schema import EVENT_SCHEMA, QUARANTINE_RAW_LIMIT_BYTES, QUARANTINE_SCHEMA
from lakeshard.routing.router import ROUTED_SCHEMA
from lakeshard.tables import (
    BUCKETS,
    EVENTS,
    EVENTS_PARTITIONING,
    EVENTS_SORT_COLUMNS,
    HOUR_FORMAT,
    ID_INDEX,
    ID_INDEX_PARTITIONING,
    QUARANTINE,
    ROUTED,
    SPARK_HOUR_FORMAT,
    dead_letter_app_id,
    writer_app_id,
)
from lakeshard.tables.schemas import EVENTS_SCHEMA, ID_INDEX_PROPERTIES
from lakeshard.tables.schemas import ID_INDEX_SCHEMA as ID_SCHEMA

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "EVENTS", "EVENTS_SCHEMA", "ID_INDEX", "ID_SCHEMA", "ShardWriter", "WriteReport", "key_hash_columns",
    "writer_app_id",
]

KEY = ["tenant_id", "event_id", "ts"]
HASH = ["key_hi", "key_lo"]
_LINEAGE = {"source_file", "line_number"}



def key_hash_columns() -> dict[str, Column]:
    """Return the two 64-bit halves of the event key's hash as Spark columns (``key_hi``, ``key_lo``).

    Spark's ``xxhash64`` chains its inputs; a constant first input gives the second half a different seed.
    """
    from pyspark.sql import functions as F

    return {"key_hi": F.xxhash64(*KEY), "key_lo": F.xxhash64(F.lit("lakeshard/key-lo"), *KEY)}


@dataclass(frozen=True)
class WriteReport:
    """One writer step: ``rows_in = written + duplicates_in_batch + duplicates_in_index + rejected +
    dead_lettered`` always holds (``rejected``: left out by the expectation gate; 0 without one).

    A lost commit race (``conflict``) writes nothing and counts nothing as a duplicate: the same rows come
    back in a later step, so they stay accounted for exactly once.
    """

    shards: tuple[int, ...]
    routed_version: int
    rows_in: int
    duplicates_in_batch: int
    duplicates_in_index: int
    written: int
    intervals_paged_in: int  # intervals missing from the ID cache, read from the event_ids table
    interval_hits: int  # intervals answered from the ID cache
    ids_paged_in: int
    page_in_seconds: float
    unchecked_expired: int  # events older than the ID retention: written without an index check
    conflict: bool  # lost a commit race: nothing written, progress re-read from the lakehouse
    ids_repaired: int  # IDs rebuilt from committed events before this step (after a crash)
    cache_bytes: int
    seconds: float
    rejected: int = 0
    dead_lettered: int = 0  # rows sent to quarantine: the step proved them unwritable (RecordLevelFailure)
    error: str = ""  # the last failure, when the step was dead-lettered
    engine: str = "spark"  # "arrow": the step ran in the driver process (pyarrow + numpy), no Spark job
    id_files_merged: int = 0  # ID files of sealed intervals merged into one per interval after the commits
    routed_files_expired: int = 0  # consumed files removed from ``routed`` after the commits (see expire_routed)


@dataclass(frozen=True)
class _IndexCheck:
    duplicate: np.ndarray  # per unique batch key: already in the index
    expired: np.ndarray  # per unique batch key: older than the retention, not checked
    misses: int
    hits: int
    ids_paged_in: int
    page_in_seconds: float


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
        gate: Callable[[DataFrame, Sequence[AppTransaction]], DataFrame] | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        if not shards:
            raise ValueError("a writer needs at least one shard")
        self._spark = spark
        self.store = store
        self.shards = tuple(sorted(set(shards)))
        self.routed_uri = cfg.table_uri(ROUTED)
        self.events_uri = cfg.table_uri(EVENTS)
        self.ids_uri = cfg.table_uri(ID_INDEX)
        self.retention = timedelta(hours=cfg.dedupe.id_retention_hours)
        self.cache = IdCache(cfg.dedupe.id_cache_bytes)
        self.max_batch_bytes = cfg.dedupe.max_batch_bytes
        self.commit_min_bytes = cfg.dedupe.commit_min_bytes
        self.commit_max_wait_seconds = cfg.dedupe.commit_max_wait_seconds
        self.retry_policy = RetryPolicy(cfg.dedupe.retry_initial_seconds, cfg.dedupe.retry_max_delay_seconds,
                                        cfg.dedupe.retry_total_seconds)
        self.arrow_max_bytes = cfg.dedupe.arrow_max_bytes
        self.routed_expire_files = cfg.dedupe.routed_expire_files
        self.quarantine_uri = cfg.table_uri(QUARANTINE)
        self.buckets_uri = cfg.table_uri(BUCKETS)
        self.cfg = cfg
        self._clock = clock or (lambda: datetime.now(UTC))
        self.failures = 0
        self.conflicts = 0
        self.deferred = 0  # steps that waited for more routed data to coalesce (step(flush=False))
        # Called with the table name right before each commit (and "page-in" before reading IDs): the crash
        # tests stop the process there.
        self._before_commit = before_commit or (lambda table: None)
        # Given (new events, this step's app transactions), returns the events to commit; may raise to stop.
        self._gate = gate
        self._ready = False
        self._known_progress: dict[int, int] = {}  # what this writer last saw committed, per shard
        self._newest_hour: dict[int, str] = {}  # per shard, the newest interval committed to the index
        self._closed: tuple[int, set[tuple[str, str]]] | None = None  # (buckets version, closed buckets)
        self._schemas: tuple[pa.Schema, pa.Schema] | None = None  # events', event_ids' Arrow schemas
        self._sealed: set[Interval] = set()  # intervals the stream moved past since their files were last merged
        self._consumed = 0  # routed files consumed since this writer last expired routed data
        self._excluded: dict[tuple[object, ...], str] = {}  # this step's rows proven unwritable -> the reason

    @property
    def spark(self) -> SparkSession:
        """The session big steps run on: the one given, else the store's (started when first needed)."""
        return self._spark if self._spark is not None else self.store.spark

    def ensure_tables(self) -> None:
        """Create ``events`` and ``event_ids`` if missing."""
        if self._ready:
            return
        self.store.create(self.events_uri, EVENTS_SCHEMA, partition_by=EVENTS_PARTITIONING,
                          description="each event exactly once; one tenant and one hour per file")
        self.store.create(self.ids_uri, ID_SCHEMA, partition_by=ID_INDEX_PARTITIONING, properties=ID_INDEX_PROPERTIES,
                          description="IDs of committed events, by shard and hour, for deduplication")
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
        return reports

    def progress(self) -> dict[int, int]:
        """Return, per shard, the routed version whose events are committed (0 = none yet)."""
        self.ensure_tables()
        done = self.store.transaction_versions(self.events_uri, [writer_app_id(s) for s in self.shards])
        return {s: done[writer_app_id(s)] or 0 for s in self.shards}

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
        # Progress moved by someone else: what this writer cached for those shards may be incomplete.
        self.cache.drop_shards(s for s in self.shards if self._known_progress.get(s, progress[s]) != progress[s])
        if self._finish_dead_letters(progress):
            return self.step()  # read the version and progress again: our own commit is not a concurrent one
        self._known_progress = dict(progress)
        repaired = self.repair_ids(progress)
        latest = self.store.version(self.routed_uri) if self.store.exists(self.routed_uri) else 0
        if all(progress[s] >= latest for s in self.shards):
            return None
        oldest = min(progress.values())
        coalesce = not flush and self.commit_min_bytes > 0
        # The routed commits this step may take, read once for the coalescing rule and the memory gate.
        waiting = self._routed_commits(oldest, latest) if coalesce or latest - oldest > 1 else []
        if coalesce and self._coalescing(waiting):
            self.deferred += 1
            return None
        routed_version = self._intake_version(oldest, latest, waiting)
        todo = tuple(s for s in self.shards if progress[s] < routed_version)
        new_files = self._new_routed_files(todo, progress, routed_version)
        arrow = self._runs_in_driver(new_files)
        def attempt() -> WriteReport:
            if arrow:
                return self._dedupe_and_commit_arrow(new_files, todo, routed_version, read_version, repaired,
                                                     started)
            return self._dedupe_and_commit(self._batch(new_files, routed_version), todo, routed_version,
                                           read_version, repaired, started)

        self._excluded, lettered = {}, 0
        while True:
            try:
                report = retry_step(attempt, self.retry_policy, shards=todo, routed_version=routed_version,
                                    on_fault=self._count_failure)
                break
            except RecordLevelFailure as exc:
                if not exc.keys or not arrow:
                    return self._dead_letter(self._batch(new_files, routed_version), todo, routed_version,
                                             exc.reason[:1000], started)
                # Those rows go to quarantine first (a crash then redoes the step, finding the same rows); the
                # step is done again without them.
                self._excluded.update(dict.fromkeys(exc.keys, exc.reason[:1000]))
                self._before_commit("dead-letter-rows")
                lettered = quarantine_rows(self.store, self.routed_uri, self.quarantine_uri, new_files,
                                           self._excluded, todo, routed_version)
        if self._excluded:
            report = dataclasses.replace(report, rows_in=report.rows_in + lettered, dead_lettered=lettered,
                                         error=next(iter(self._excluded.values())))
        # Both commits are in: merging sealed intervals' ID files and expiring consumed routed files is
        # housekeeping, outside the retries (an error here is not the batch's; the next step goes on from
        # the committed progress).
        if not report.conflict:
            self._consumed += len(new_files)
            # Taken before merging: the merge's listing may seal more intervals, which the next step merges.
            sealed, self._sealed = self._sealed, set()
            merged = self.compact_ids(sealed) if sealed else 0
            expired = (self.expire_routed() if self.routed_expire_files
                       and self._consumed >= self.routed_expire_files else 0)
            if merged or expired:
                report = dataclasses.replace(report, id_files_merged=merged, routed_files_expired=expired,
                                             seconds=time.perf_counter() - started)
        return report

    def _count_failure(self, exc: BaseException) -> None:
        """A failed attempt: the IDs cached for the step's shards may hold what it added before failing."""
        self.failures += 1
        self.cache.drop_shards(self.shards)

    def _runs_in_driver(self, files: Sequence[FileInfo]) -> bool:
        """Return whether a step over these routed files takes the driver-side (Arrow) path.

        Small steps do: a Spark job's fixed cost (scheduling, the partition-value join, a shuffle for the
        file layout) dominates a micro-batch. With an expectation gate, only the gate's rule checks run as
        Spark jobs, on the step's new events handed over as one Arrow table.
        """
        return self.arrow_max_bytes > 0 and sum(f.size_bytes for f in files) <= self.arrow_max_bytes

    # ------------------------------------------------------------------------------------------ reading
    def _routed_commits(self, oldest: int, latest: int) -> list[CommitInfo]:
        """Return the routed commits after ``oldest`` up to ``latest``, oldest first."""
        found = self.store.history(self.routed_uri, limit=latest - oldest)
        return sorted((c for c in found if oldest < c.version <= latest), key=lambda c: c.version)

    def _coalescing(self, waiting: Sequence[CommitInfo]) -> bool:
        """Return whether the routed commits ``waiting`` should wait for more (see :meth:`step`)."""
        pending = sum(int(c.custom_metadata.get(BYTES_ADDED, 0)) for c in waiting)
        first = min((c.timestamp for c in waiting), default=self._clock())
        return (pending < self.commit_min_bytes
                and (self._clock() - first).total_seconds() < self.commit_max_wait_seconds)

    def _intake_version(self, oldest: int, latest: int, waiting: Sequence[CommitInfo]) -> int:
        """Return the newest routed version this step consumes: the memory gate on intake.

        Routed commits after ``oldest`` (``waiting``) are taken in order while their bytes (all shards': an upper
        bound of this writer's share) stay within ``max_batch_bytes``; at least one is taken, however large.
        """
        if latest - oldest <= 1:
            return latest
        sizes = {c.version: int(c.custom_metadata.get(BYTES_ADDED, 0)) for c in waiting}
        version, total = oldest + 1, sizes.get(oldest + 1, 0)
        while version < latest and total + sizes.get(version + 1, 0) <= self.max_batch_bytes:
            version += 1
            total += sizes.get(version, 0)
        return version

    def _new_routed_files(self, todo: Sequence[int], progress: dict[int, int], version: int) -> list[FileInfo]:
        """Return the routed files of ``todo`` live at ``version`` that were not live at each shard's progress.

        Read from the commits in between (the log's add and remove actions: cost grows with the new commits,
        not with the table); from two snapshots when the log no longer holds those commits.
        """
        oldest = min(progress[s] for s in todo)
        try:
            entries = self.store.log_entries(self.routed_uri, start=oldest + 1 if oldest else 0, end=version)
        except TableStoreError:
            return self._new_routed_files_by_snapshot(todo, progress, version)
        out: list[FileInfo] = []
        for shard in todo:
            live: dict[str, FileInfo] = {}
            for entry in entries:
                if progress[shard] and entry.version <= progress[shard]:
                    continue
                for change in entry.changes:
                    if change.action != "add":
                        live.pop(change.file.path, None)  # a remove may not repeat the partition values
                    elif change.file.partition_values.get("shard") == str(shard):
                        live[change.file.path] = change.file
            out += live.values()
        return out

    def _new_routed_files_by_snapshot(self, todo: Sequence[int], progress: dict[int, int],
                                      version: int) -> list[FileInfo]:
        def of_shard(files: list[FileInfo], shard: int) -> dict[str, FileInfo]:
            return {f.path: f for f in files if f.partition_values.get("shard") == str(shard)}

        latest = self.store.files(self.routed_uri, version=version)
        seen: dict[int, list[FileInfo]] = {}
        out: list[FileInfo] = []
        for shard in todo:
            done = progress[shard]
            if done and done not in seen:
                seen[done] = self.store.files(self.routed_uri, version=done)
            before = of_shard(seen[done], shard) if done else {}
            out += [f for p, f in of_shard(latest, shard).items() if p not in before]
        return out

    def _batch(self, files: Sequence[FileInfo], routed_version: int) -> DataFrame:
        """Return the routed rows as events: ``interval`` = the event's own hour (where its ID lives), ``hour``
        and ``late`` = the bucket it is written to (its own hour, or its tenant's open one if that is closed)."""
        from pyspark.sql import functions as F

        from lakeshard.buckets import assign_buckets

        rows = (self.store.read_files(self.routed_uri, files) if files
                else self.spark.createDataFrame([], ROUTED_SCHEMA))
        events = rows.select(
            *[F.col(f.name) for f in EVENT_SCHEMA.fields if f.name not in _LINEAGE],
            F.col("shard"),
            F.lit(routed_version).cast("long").alias("routed_version"),
            _own_hour().alias("interval"),
        )
        return assign_buckets(events, self._closed_buckets(), now=self._clock())

    def _closed_buckets(self) -> set[tuple[str, str]]:
        """Return the closed ``(tenant_id, hour)`` buckets (none before the completionist first ran)."""
        from lakeshard.buckets import Completionist

        if not self.store.exists(self.buckets_uri):
            return set()
        # Read the bucket states (a Spark job) only when the table moved since the last step.
        version = self.store.version(self.buckets_uri)
        if self._closed is None or self._closed[0] != version:
            self._closed = (version, Completionist(self.spark, self.store, self.cfg).closed())
        return self._closed[1]

    def _check_index(self, keys: pa.Table) -> _IndexCheck:
        """Return which unique batch keys the ID index already holds, paging missing intervals in."""
        shard = keys.column("shard").to_numpy()
        hour = keys.column("interval").to_numpy(zero_copy_only=False)
        hi, lo = keys.column("key_hi").to_numpy(), keys.column("key_lo").to_numpy()
        groups = _group_indices(shard, hour)
        self._saw_intervals(groups)
        expired = np.zeros(len(hi), dtype=bool)
        live = {}
        for (s, h), idx in groups.items():
            if h < self._cutoff_hour(s):
                expired[idx] = True
            else:
                live[(s, h)] = idx
        missing = self.cache.lookup(live)
        # The step holds every interval it checks, cached or paged in, until the check is done: paging one in
        # may evict another of the same step from a cache smaller than their sum, and an interval not held
        # would pass its duplicates as new.
        pinned = {key: ids for key in live if key not in missing and (ids := self.cache.get(key)) is not None}
        page_started = time.perf_counter()
        paged = self._page_in(missing, pinned) if missing else 0
        page_seconds = time.perf_counter() - page_started if missing else 0.0
        duplicate = np.zeros(len(hi), dtype=bool)
        for key, idx in live.items():
            duplicate[idx] = pinned[key].contains(hi[idx], lo[idx])
        return _IndexCheck(duplicate, expired, len(missing), len(live) - len(missing), paged, page_seconds)

    def _saw_intervals(self, intervals: Iterable[Interval]) -> None:
        """Remember the newest hour seen per shard: the retention cutoff counts back from it. The hour it
        replaces is sealed (the stream moved past it): its ID files are merged after this step's commits."""
        for shard, hour in intervals:
            newest = self._newest_hour.get(shard, "")
            if hour > newest:
                self._newest_hour[shard] = hour
                if newest:
                    self._sealed.add((shard, newest))

    def _cutoff_hour(self, shard: int) -> str:
        newest = self._newest_hour.get(shard)
        if newest is None:
            return ""
        return (datetime.strptime(newest, HOUR_FORMAT) - self.retention).strftime(HOUR_FORMAT)

    def _page_in(self, intervals: set[Interval], into: dict[Interval, IdInterval]) -> int:
        """Read these intervals' key hashes from ``event_ids`` into the cache and ``into``; return how many IDs
        were read.

        Only ``key_hi`` and ``key_lo`` of the intervals' files are read (their partition values say which
        interval a file holds), all files at once on the store's reader threads, no Spark job. Files are
        written sorted by the hash, so building an interval merges sorted runs instead of sorting.
        """
        self._before_commit("page-in")
        files = self.store.files(self.ids_uri)
        self._saw_intervals(_interval_of(f) for f in files)
        wanted: dict[Interval, list[FileInfo]] = {}
        for f in files:
            if (key := _interval_of(f)) in intervals:
                wanted.setdefault(key, []).append(f)
        read = self.store.read_arrow_groups(self.ids_uri, wanted, columns=HASH) if wanted else {}
        total = 0
        for key in sorted(intervals):
            ids = read.get(key)
            if ids is None or not ids.num_rows:
                into[key] = IdInterval.empty()
            else:
                total += ids.num_rows
                into[key] = IdInterval(ids.column("key_hi").to_numpy(), ids.column("key_lo").to_numpy())
            self.cache.put(key, into[key])
        return total

    # ----------------------------------------------------------------------------------------- writing
    def _dedupe_and_commit(self, batch: DataFrame, todo: tuple[int, ...], routed_version: int,
                           read_version: int, repaired: int, started: float) -> WriteReport:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        batch = batch.withColumns(key_hash_columns()).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            rows_in = batch.count()
            unique = batch.dropDuplicates(KEY).persist(StorageLevel.MEMORY_AND_DISK)
            # The keys of a micro-batch are small: the index check runs on the driver, against the cache.
            keys = unique.select("shard", "interval", *HASH).toArrow()
            check = self._check_index(keys)
            duplicate_rows = keys.filter(check.duplicate)
            survivors = unique
            if duplicate_rows.num_rows:
                known = self.spark.createDataFrame(duplicate_rows.select(HASH).to_pandas())
                survivors = unique.join(F.broadcast(known), HASH, "left_anti")
            n_unique, n_new = keys.num_rows, keys.num_rows - duplicate_rows.num_rows
            txns = [AppTransaction(writer_app_id(s), routed_version) for s in todo]
            new_events = survivors.drop(*HASH, "interval")
            if self._gate is not None:  # the gate counts and filters: read the survivors once
                new_events = new_events.persist(StorageLevel.MEMORY_AND_DISK)
            kept = new_events if self._gate is None else self._gate(new_events, txns)
            written = n_new if kept is new_events else kept.count()
            meta = {"shards": list(todo), "routed_version": routed_version, "rows_in": rows_in,
                    "duplicates_in_batch": rows_in - n_unique, "duplicates_in_index": n_unique - n_new,
                    "rejected": n_new - written}
            conflict = False
            try:
                self._before_commit(EVENTS)
                # One file per (tenant, hour) — not one per task and partition value — each sorted by the table's
                # sort schema, so compaction merges instead of sorting.
                ordered = (kept.repartition("tenant_id", "hour")
                           .sortWithinPartitions("tenant_id", "hour", *EVENTS_SORT_COLUMNS))
                result = self.store.append(self.events_uri, ordered, app_transactions=txns,
                                           metadata=meta, read_version=read_version)
                conflict = result.skipped
            except CommitConflict:
                conflict = True
            if conflict:
                self._lost_race(todo)
                written = 0
            else:
                for s in todo:
                    self._known_progress[s] = routed_version
                # Sorted by the hash within each (shard, interval), as the driver path writes them: a page-in
                # then merges sorted runs.
                ids = (survivors.select("shard", "interval", *KEY, "routed_version", *HASH)
                       .repartition("shard", "interval").sortWithinPartitions("shard", "interval", *HASH))
                self._before_commit(ID_INDEX)
                self.store.append(self.ids_uri, ids, app_transactions=txns, metadata={"shards": list(todo)})
                self._remember(keys.filter(~check.duplicate))
            new_events.unpersist()
            unique.unpersist()
        finally:
            batch.unpersist()
        return WriteReport(
            shards=todo, routed_version=routed_version, rows_in=rows_in, duplicates_in_batch=rows_in - n_unique,
            duplicates_in_index=0 if conflict else n_unique - n_new, written=written,
            intervals_paged_in=check.misses, interval_hits=check.hits, ids_paged_in=check.ids_paged_in,
            page_in_seconds=check.page_in_seconds, unchecked_expired=int(check.expired.sum()), conflict=conflict,
            ids_repaired=repaired, cache_bytes=self.cache.stats().bytes, seconds=time.perf_counter() - started,
            rejected=0 if conflict else n_new - written,
        )

    def _arrow_batch(self, files: Sequence[FileInfo], routed_version: int) -> pa.Table:
        """Return the routed rows as events, read in the driver: the Arrow twin of :meth:`_batch`."""
        import pyarrow as pa

        from lakeshard.buckets.late import assign_buckets_arrow

        columns = [f.name for f in EVENT_SCHEMA.fields if f.name not in _LINEAGE]
        rows = self.store.read_arrow(self.routed_uri, files, columns=[*columns, "shard"])
        if self._excluded:  # rows proven unwritable, dead-lettered already
            rows = rows.filter(pa.array([k not in self._excluded for k in event_keys(rows)], pa.bool_()))
        own = _hours(rows.column("ts"))
        hour, late = assign_buckets_arrow(rows.column("tenant_id"), own, self._closed_buckets(), now=self._clock())
        return (rows.append_column("routed_version", pa.array(np.full(rows.num_rows, routed_version, np.int64)))
                .append_column("interval", own).append_column("hour", hour).append_column("late", late))

    def _dedupe_and_commit_arrow(self, files: Sequence[FileInfo], todo: tuple[int, ...], routed_version: int,
                                 read_version: int, repaired: int, started: float) -> WriteReport:
        """Return the report of one step run in the driver: the same dedupe, files and commits as
        :meth:`_dedupe_and_commit`, with pyarrow and numpy instead of Spark jobs."""
        import pyarrow as pa

        from lakeshard.dedupe.keyhash import key_hashes
        from lakeshard.lake.files import write_partitioned

        batch = self._arrow_batch(files, routed_version)
        rows_in = batch.num_rows
        hi, lo = key_hashes(batch)
        # Within the batch: the first row of each exact key (Spark's dropDuplicates keeps one of them too).
        numbered = batch.select(KEY).append_column("__row", pa.array(np.arange(rows_in, dtype=np.int64)))
        first = np.sort(numbered.group_by(KEY, use_threads=False).aggregate([("__row", "min")])
                        .column("__row_min").to_numpy())
        unique = batch.take(first)
        keys = pa.table({"shard": unique.column("shard"), "interval": unique.column("interval"),
                         "key_hi": hi[first], "key_lo": lo[first]})
        check = self._check_index(keys)
        new = ~check.duplicate
        survivors = unique.filter(new).append_column("key_hi", pa.array(hi[first][new])) \
            .append_column("key_lo", pa.array(lo[first][new]))
        n_unique, n_new = keys.num_rows, survivors.num_rows
        txns = [AppTransaction(writer_app_id(s), routed_version) for s in todo]
        kept = self._gate_arrow(survivors, txns)
        meta = {"shards": list(todo), "routed_version": routed_version, "rows_in": rows_in,
                "duplicates_in_batch": rows_in - n_unique, "duplicates_in_index": n_unique - n_new,
                "rejected": n_new - kept.num_rows}
        events_schema, ids_schema = self._arrow_schemas()
        conflict = False
        try:
            self._before_commit(EVENTS)
            result = self.store.append(
                self.events_uri, None, app_transactions=txns, metadata=meta, read_version=read_version,
                # One file per (tenant, hour), sorted by the sort schema: the layout the Spark path writes.
                # Rows failing alone are named (RecordLevelFailure); any other failure is a fault.
                write=lambda target: write_or_blame(kept, target, lambda rows, to: write_partitioned(
                    rows, to, events_schema, EVENTS_PARTITIONING, EVENTS_SORT_COLUMNS)))
            conflict = result.skipped
        except CommitConflict:
            conflict = True
        if conflict:
            self._lost_race(todo)
        else:
            for s in todo:
                self._known_progress[s] = routed_version
            # Every new key's ID, rejected rows' too (as on Spark): a re-sent copy of a row an expectation
            # took is a duplicate, not a second chance.
            self._before_commit(ID_INDEX)
            self.store.append(self.ids_uri, None, app_transactions=txns, metadata={"shards": list(todo)},
                              write=lambda target: write_partitioned(survivors, target, ids_schema,
                                                                     ["shard", "interval"], HASH))
            self._remember(keys.filter(new))
        return WriteReport(
            shards=todo, routed_version=routed_version, rows_in=rows_in, duplicates_in_batch=rows_in - n_unique,
            duplicates_in_index=0 if conflict else n_unique - n_new, written=0 if conflict else kept.num_rows,
            intervals_paged_in=check.misses, interval_hits=check.hits, ids_paged_in=check.ids_paged_in,
            page_in_seconds=check.page_in_seconds, unchecked_expired=int(check.expired.sum()), conflict=conflict,
            ids_repaired=repaired, cache_bytes=self.cache.stats().bytes, seconds=time.perf_counter() - started,
            rejected=0 if conflict else n_new - kept.num_rows, engine="arrow",
        )

    def _gate_arrow(self, survivors: pa.Table, txns: Sequence[AppTransaction]) -> pa.Table:
        """Return the new events an expectation gate keeps (all of them without a gate).

        The gate's rules are Spark SQL: the events go to Spark as one Arrow table (the columns the Spark
        path hands its gate) and what the gate keeps comes back the same way.
        """
        if self._gate is None:
            return survivors
        events = survivors.drop_columns([*HASH, "interval"])
        handed = self.spark.createDataFrame(events)
        kept = self._gate(handed, txns)
        return survivors if kept is handed else kept.toArrow()

    def _arrow_schemas(self) -> tuple[pa.Schema, pa.Schema]:
        """Return the Arrow schemas of ``events`` and ``event_ids`` (read once per writer)."""
        if self._schemas is None:
            self._schemas = (self.store.arrow_schema(self.events_uri), self.store.arrow_schema(self.ids_uri))
        return self._schemas

    def _lost_race(self, todo: Sequence[int]) -> None:
        """Another writer committed this progress first: drop what we cached of these shards; the next step
        re-reads the committed progress and pages the IDs in again (Husky's reconciliation)."""
        self.conflicts += 1
        self.cache.drop_shards(todo)
        self._known_progress.clear()

    def _dead_letter(self, batch: DataFrame, todo: tuple[int, ...], routed_version: int, error: str,
                     started: float) -> WriteReport:
        """Send a batch whose rows cannot be written (a record-level failure) to ``quarantine`` with the reason,
        then commit the progress past it.

        Two commits, each idempotent: the quarantine append carries ``dead-letter/<shard>`` → the routed version,
        and a writer that finds it ahead of its progress (a crash between the two) finishes the job
        (:meth:`_finish_dead_letters`) instead of writing the batch. Rows go as routed, duplicates included:
        feeding them back through the landing zone is safe, the writer dedupes them.
        """
        from pyspark.sql import functions as F

        progress = self.progress()
        rows_in = batch.count()
        if all(progress[s] >= routed_version for s in todo):  # a failed attempt committed after all
            return self._empty_report(todo, routed_version, rows_in, started, conflict=True)
        reason = f"{WRITE_FAILED}: {error}"
        raw = F.to_json(F.struct(*[F.col(f.name) for f in EVENT_SCHEMA.fields if f.name not in _LINEAGE]))
        letters = batch.select(
            F.substring(raw, 1, QUARANTINE_RAW_LIMIT_BYTES).alias("raw"),
            (F.length(raw) > QUARANTINE_RAW_LIMIT_BYTES).alias("raw_truncated"),
            F.col("size_bytes"), F.lit(reason).alias("reason"), F.lit(WRITE_FAILED).alias("category"),
            F.lit(None).cast("string").alias("source_file"), F.lit(None).cast("long").alias("line_number"),
            F.current_timestamp().alias("quarantined_at"))
        self.store.create(self.quarantine_uri, QUARANTINE_SCHEMA,
                          description="records that broke the format or could not be written, with the reason")
        self.store.append(self.quarantine_uri, letters,
                          app_transactions=[AppTransaction(dead_letter_app_id(s), routed_version) for s in todo],
                          metadata={"dead_letter": True, "shards": list(todo), "routed_version": routed_version})
        self._finish_dead_letters(progress)
        report = self._empty_report(todo, routed_version, rows_in, started, conflict=False)
        return dataclasses.replace(report, dead_lettered=rows_in, error=error)

    def _finish_dead_letters(self, progress: dict[int, int]) -> bool:
        """Commit the progress past routed versions already dead-lettered to ``quarantine`` (no events);
        return whether anything was committed (``progress`` is updated in place)."""
        if not self.store.exists(self.quarantine_uri):
            return False
        ahead: dict[int, list[int]] = {}
        letters = self.store.transaction_versions(self.quarantine_uri, [dead_letter_app_id(s) for s in self.shards])
        for s in self.shards:
            lettered = letters[dead_letter_app_id(s)] or 0
            if lettered > progress[s]:
                ahead.setdefault(lettered, []).append(s)
        for version, shards in sorted(ahead.items()):
            self._before_commit("dead-letter-progress")
            self.store.append(self.events_uri, None,  # no rows: the commit carries only the progress
                              app_transactions=[AppTransaction(writer_app_id(s), version) for s in shards],
                              metadata={"dead_lettered": True, "shards": shards, "routed_version": version})
            for s in shards:
                progress[s] = version
        return bool(ahead)

    def _empty_report(self, todo: tuple[int, ...], routed_version: int, rows_in: int, started: float, *,
                      conflict: bool) -> WriteReport:
        return WriteReport(
            shards=todo, routed_version=routed_version, rows_in=rows_in, duplicates_in_batch=0,
            duplicates_in_index=0, written=0, intervals_paged_in=0, interval_hits=0, ids_paged_in=0,
            page_in_seconds=0.0, unchecked_expired=0, conflict=conflict, ids_repaired=0,
            cache_bytes=self.cache.stats().bytes, seconds=time.perf_counter() - started,
        )

    def _remember(self, committed: pa.Table) -> None:
        """Add the keys just committed to the cached intervals they belong to."""
        shard = committed.column("shard").to_numpy()
        hour = committed.column("interval").to_numpy(zero_copy_only=False)
        hi, lo = committed.column("key_hi").to_numpy(), committed.column("key_lo").to_numpy()
        groups = _group_indices(shard, hour)
        for key, idx in groups.items():
            self.cache.add(key, hi[idx], lo[idx])
        self._saw_intervals(groups)

    def repair_ids(self, progress: dict[int, int] | None = None) -> int:
        """Return how many IDs were rebuilt from ``events`` for shards whose ``event_ids`` lag behind.

        The ``events`` commit is the truth; this restores agreement after a crash between the two commits.
        """
        from pyspark.sql import functions as F

        progress = progress or self.progress()
        indexed = self.store.transaction_versions(self.ids_uri, [writer_app_id(s) for s in self.shards])
        lag = {s: indexed[writer_app_id(s)] or 0 for s in self.shards}
        behind = [s for s in self.shards if lag[s] < progress[s]]
        if not behind:
            return 0
        self.cache.drop_shards(behind)  # cached intervals lack the IDs about to be rebuilt
        oldest = min(lag[s] for s in behind)
        # File statistics narrow the read to files that can hold these shards' newer events.
        candidates = [f for f in self.store.files(self.events_uri)
                      if _may_hold(f, "routed_version", oldest + 1, None)
                      and any(_may_hold(f, "shard", s, s) for s in behind)]
        txns = [AppTransaction(writer_app_id(s), progress[s]) for s in behind]
        if self.arrow_max_bytes and sum(f.size_bytes for f in candidates) <= self.arrow_max_bytes:
            return self._repair_ids_arrow(candidates, behind, lag, progress, txns)
        if not candidates:
            rows = self.spark.createDataFrame([], ID_SCHEMA)
        else:
            events = self.store.read_files(self.events_uri, candidates)
            cond = F.lit(False)
            for s in behind:
                cond = cond | ((F.col("shard") == s) & (F.col("routed_version") > lag[s])
                               & (F.col("routed_version") <= progress[s]))
            # Laid out as a step writes IDs: one file per (shard, interval), sorted by hash (a page-in's order).
            rows = (events.where(cond).withColumns(key_hash_columns())
                    .select("shard", _own_hour().alias("interval"), *KEY, "routed_version", *HASH)
                    .repartition("shard", "interval").sortWithinPartitions("shard", "interval", *HASH))
        rows = rows.persist()
        try:
            n = rows.count()
            self.store.append(self.ids_uri, rows, app_transactions=txns, metadata={"repair": True})
        finally:
            rows.unpersist()
        return n

    def _repair_ids_arrow(self, candidates: Sequence[FileInfo], behind: Sequence[int], lag: dict[int, int],
                          progress: dict[int, int], txns: Sequence[AppTransaction]) -> int:
        """Return how many IDs were rebuilt, reading the candidate event files in the driver (no Spark job)."""
        import pyarrow as pa

        from lakeshard.dedupe.keyhash import key_hashes
        from lakeshard.lake.files import write_partitioned

        rows = self.store.read_arrow(self.events_uri, candidates, columns=[*KEY, "shard", "routed_version"])
        shard, version = rows.column("shard").to_numpy(), rows.column("routed_version").to_numpy()
        wanted = np.zeros(rows.num_rows, dtype=bool)
        for s in behind:
            wanted |= (shard == s) & (version > lag[s]) & (version <= progress[s])
        rows = rows.filter(pa.array(wanted))
        hi, lo = key_hashes(rows)
        rows = (rows.append_column("interval", _hours(rows.column("ts")))
                .append_column("key_hi", pa.array(hi)).append_column("key_lo", pa.array(lo)))
        ids_schema = self._arrow_schemas()[1]
        self.store.append(self.ids_uri, None, app_transactions=txns, metadata={"repair": True},
                          write=lambda target: write_partitioned(rows, target, ids_schema, ["shard", "interval"],
                                                                 HASH))
        return int(rows.num_rows)

    def expire_routed(self) -> int:
        """Remove from ``routed`` the files of this writer's shards that their committed progress has passed;
        return how many (0 when a concurrent commit removed one of them first: expired next time).

        A routed file of shard ``s`` is consumed once ``writer/s`` in ``events`` reached a version at which the
        file was live: its rows are in ``events`` (or were dropped as duplicates, or dead-lettered). Those are
        the files live at the shard's progress version and still live now. Progress only moves forward, so a
        file consumed when progress was read stays consumed when the removal commits; a router appending at
        the same time does not conflict (blind appends), and every reader of ``routed`` asks only for files
        added after some shard's progress (the writers' log reads, the completionist's pending rows), which
        this never removes. The files stay on disk until ``routed`` is vacuumed.
        """
        self._consumed = 0
        if not self.store.exists(self.routed_uri):
            return 0
        by_version: dict[int, set[str]] = {}  # progress version -> the shards at it, as partition values
        for shard, version in self.progress().items():
            if version:
                by_version.setdefault(version, set()).add(str(shard))
        live = {f.path for f in self.store.files(self.routed_uri)}
        try:
            doomed = sorted({f.path for version, shards in by_version.items()
                             for f in self.store.files(self.routed_uri, version=version)
                             if str(f.partition_values["shard"]) in shards and f.path in live})
        except TableStoreError:
            return 0  # a progress version the log no longer holds (log cleanup): nothing is removed
        if not doomed:
            return 0
        self._before_commit("routed-expiry")
        try:
            self.store.replace_files(self.routed_uri, doomed, None, data_change=True,
                                     metadata={"expired_consumed": len(doomed), "shards": list(self.shards)})
        except CommitConflict:
            return 0
        return len(doomed)

    def compact_ids(self, intervals: Iterable[Interval] | None = None) -> int:
        """Merge the ID files of each sealed interval of these shards into one file sorted by the key hash;
        return how many files were merged away (0 when another commit removed some of them first).

        Each step appends one ID file per ``(shard, interval)`` it wrote to, so an hour of a steady stream
        ends up as dozens of small files, and paging it in costs a file open each. An interval is *sealed*
        once an interval after it was committed to its shard; the writer merges those the stream just moved
        past after each step's commits (``intervals``: only these), so a page-in reads about one file per
        hour. The swap (:meth:`~lakeshard.lake.TableStore.replace_files`, ``dataChange=false``) removes
        exactly the files it read and adds their rows in one commit: the index never loses or doubles an
        ID, and a writer that listed the old files still reads them (they stay on disk until vacuum).
        """
        from lakeshard.lake.files import write_partitioned

        self.ensure_tables()
        files = self.store.files(self.ids_uri)
        self._saw_intervals(_interval_of(f) for f in files)
        only = None if intervals is None else set(intervals)
        merge: dict[Interval, list[FileInfo]] = {}
        for f in files:
            key = _interval_of(f)
            if key[0] in self.shards and key[1] < self._newest_hour.get(key[0], "") and (only is None or key in only):
                merge.setdefault(key, []).append(f)
        merge = {k: v for k, v in merge.items() if len(v) > 1}
        if not merge:
            return 0
        import pyarrow as pa

        runs = []
        for group in self.store.read_arrow_groups(self.ids_uri, merge).values():
            # Each file is sorted by the hash: a stable sort of the high half merges the runs.
            order = hash_order(group.column("key_hi").to_numpy(), group.column("key_lo").to_numpy())
            runs.append(group if order is None else group.take(pa.array(order)))
        rows = pa.concat_tables(runs)
        ids_schema = self._arrow_schemas()[1]
        doomed = [f.path for group in merge.values() for f in group]
        self._before_commit("id-compaction")
        try:
            self.store.replace_files(
                self.ids_uri, doomed, None, data_change=False,
                metadata={"compacted_intervals": sorted(f"{s}/{h}" for s, h in merge)},
                # The partition sort is stable: each interval keeps its hash order.
                write=lambda target: write_partitioned(rows, target, ids_schema, ["shard", "interval"]))
        except CommitConflict:
            return 0  # an expiry or another writer's merge removed some of these files first: merged next time
        return len(doomed)

    def expire_ids(self) -> int:
        """Delete the ID index partitions of these shards older than the retention; return files removed.

        The cutoff is per shard: ``id_retention_hours`` before the newest interval in its index.
        """
        self.ensure_tables()
        files = self.store.files(self.ids_uri)
        self._saw_intervals(_interval_of(f) for f in files)
        doomed = [f for f in files if (iv := _interval_of(f))[0] in self.shards and iv[1] < self._cutoff_hour(iv[0])]
        if doomed:
            self.store.replace_files(self.ids_uri, [f.path for f in doomed], None, data_change=True,
                                     metadata={"expired_before": {str(s): self._cutoff_hour(s) for s in self.shards}})
            self.cache.drop_shards(self.shards)
        return len(doomed)


def _own_hour() -> Column:
    """The event's own UTC hour, ``YYYY-MM-DDTHH``: the ID index interval, whatever bucket the event lands in."""
    from pyspark.sql import functions as F

    return F.date_format("ts", SPARK_HOUR_FORMAT)


def _hours(ts: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Return each timestamp's UTC hour as ``YYYY-MM-DDTHH`` (what :func:`_own_hour` gives in Spark), formatting
    each distinct hour once: a batch spans a few hours, so this is integer division and a gather."""
    import pyarrow as pa
    import pyarrow.compute as pc

    micros = pc.cast(pc.cast(ts, pa.timestamp("us", tz="UTC")), pa.int64()).to_numpy(zero_copy_only=False)
    hours = np.floor_divide(micros, 3_600_000_000)
    distinct, index = np.unique(hours, return_inverse=True)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    text = [(epoch + timedelta(hours=int(h))).strftime(HOUR_FORMAT) for h in distinct]
    return pc.take(pa.array(text, pa.string()), pa.array(index.reshape(-1)))


def _interval_of(f: FileInfo) -> Interval:
    return int(f.partition_values["shard"] or -1), f.partition_values["interval"] or ""


def _group_indices(shard: np.ndarray, hour: np.ndarray) -> dict[Interval, np.ndarray]:
    """Return the row indices of each distinct ``(shard, hour)`` pair."""
    import pandas as pd

    if not len(shard):
        return {}
    groups = pd.DataFrame({"shard": shard, "hour": hour}).groupby(["shard", "hour"], sort=False).indices
    return {(int(k[0]), str(k[1])): np.asarray(idx, dtype=np.int64)  # type: ignore[index]
            for k, idx in groups.items()}


def _may_hold(f: FileInfo, column: str, low: int | None, high: int | None) -> bool:
    """Return whether a file's min/max statistics allow a value of ``column`` within [low, high]."""
    lo, hi = f.min_values.get(column), f.max_values.get(column)
    if lo is None or hi is None:
        return True
    return (low is None or int(hi) >= low) and (high is None or int(lo) <= high)

