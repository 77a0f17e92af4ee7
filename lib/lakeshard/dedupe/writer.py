"""Shard writers (Husky): consume a shard's new ``routed`` commits and commit each event to ``events`` once.

Everything a writer needs to resume is in the lakehouse, so writers are stateless:

* **Progress** is the app transaction ``writer/<shard>`` → the ``routed`` version consumed, committed in
  the same Delta commit as the events (as kafka-delta-ingest stores Kafka offsets).
* **IDs** of committed events live in the ``event_ids`` table, partitioned by ``(shard, interval)``
  (interval = the event's UTC hour), so checking a batch against them reads only the few partitions the
  batch touches. Delta cannot commit two tables at once, so the protocol is: the ``events`` commit is
  authoritative; the ``event_ids`` commit follows with the same app transactions; a writer that finds
  ``event_ids`` behind ``events`` for a shard (a crash between the two) first rebuilds those IDs from the
  committed events (they carry ``shard`` and ``routed_version``) before it dedupes anything.
* **Expectations**: a ``gate`` (the pipeline runner's expectation gate) sees each step's new events right
  before the ``events`` commit and returns the ones to commit; the rest count as ``rejected``. Their IDs
  still go to ``event_ids``, so a later copy of a rejected event is a duplicate, not a second rejection.
* **Conflicts**: the ``events`` commit is prepared against the version the writer read its progress at;
  a second writer that committed the same shard's progress meanwhile makes it fail with
  :class:`~lakeshard.errors.CommitConflict`. The loser drops its batch, re-reads the committed progress
  and goes on from there (Husky's reconciliation) — no duplicate, nothing lost.

Not built yet (see the issue notes): the in-memory LRU of ID intervals (each batch pages its intervals
in from storage), batched commits across many writers, the memory gate, ID expiry by retention.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from lakeshard.config import LakeshardConfig
from lakeshard.errors import CommitConflict
from lakeshard.lake import AppTransaction, FileInfo, TableStore
from lakeshard.landing.schema import EVENT_SCHEMA
from lakeshard.routing.router import ROUTED

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["EVENTS", "EVENTS_SCHEMA", "ID_INDEX", "ID_SCHEMA", "ShardWriter", "WriteReport", "writer_app_id"]

EVENTS = "events"
ID_INDEX = "event_ids"
KEY = ["tenant_id", "event_id", "ts"]
_LINEAGE = {"source_file", "line_number"}

EVENTS_SCHEMA = StructType([
    *[f for f in EVENT_SCHEMA.fields if f.name not in _LINEAGE],
    StructField("shard", IntegerType(), False),
    StructField("routed_version", LongType(), False),  # the routed version whose consumption committed it
    StructField("hour", StringType(), False),  # UTC hour of ts, "YYYY-MM-DDTHH": a file never spans two
])
ID_SCHEMA = StructType([
    StructField("shard", IntegerType(), False),
    StructField("interval", StringType(), False),
    StructField("tenant_id", StringType(), False),
    StructField("event_id", StringType(), False),
    StructField("ts", EVENT_SCHEMA["ts"].dataType, False),
    StructField("routed_version", LongType(), False),
])


def writer_app_id(shard: int) -> str:
    """Return the app transaction id that carries a shard writer's progress."""
    return f"writer/{shard}"


@dataclass(frozen=True)
class WriteReport:
    """One writer step. ``rows_in = written + duplicates_in_batch + duplicates_in_index + rejected`` always holds
    (``rejected``: left out by the expectation gate; 0 without one)."""

    shards: tuple[int, ...]
    routed_version: int
    rows_in: int
    duplicates_in_batch: int
    duplicates_in_index: int
    written: int
    intervals_paged_in: int
    conflict: bool  # lost a commit race: nothing written, progress re-read from the lakehouse
    ids_repaired: int  # IDs rebuilt from committed events before this step (after a crash)
    seconds: float
    rejected: int = 0


class ShardWriter:
    """Writes the routed events of ``shards`` to ``events`` exactly once; restartable at any point.

    Example::

        writer = ShardWriter(spark, store, cfg, shards=[0, 1, 2, 3])
        for report in writer.run():
            print(report.written, report.duplicates_in_index)
    """

    def __init__(
        self,
        spark: SparkSession,
        store: TableStore,
        cfg: LakeshardConfig,
        shards: Sequence[int],
        *,
        before_commit: Callable[[str], None] | None = None,
        gate: Callable[[DataFrame, Sequence[AppTransaction]], DataFrame] | None = None,
    ) -> None:
        if not shards:
            raise ValueError("a writer needs at least one shard")
        self.spark = spark
        self.store = store
        self.shards = tuple(sorted(set(shards)))
        self.routed_uri = cfg.table_uri(ROUTED)
        self.events_uri = cfg.table_uri(EVENTS)
        self.ids_uri = cfg.table_uri(ID_INDEX)
        self.conflicts = 0
        # Called with the table name right before each commit: the crash tests stop the process there.
        self._before_commit = before_commit or (lambda table: None)
        # Given (new events, this step's app transactions), returns the events to commit; may raise to stop.
        self._gate = gate
        self._ready = False

    def ensure_tables(self) -> None:
        """Create ``events`` and ``event_ids`` if missing."""
        if self._ready:
            return
        self.store.create(self.events_uri, EVENTS_SCHEMA, partition_by=["tenant_id", "hour"],
                          description="each event exactly once; one tenant and one hour per file")
        self.store.create(self.ids_uri, ID_SCHEMA, partition_by=["shard", "interval"],
                          description="IDs of committed events, by shard and hour, for deduplication")
        self._ready = True

    def run(self, *, max_steps: int = 1000) -> list[WriteReport]:
        """Return the reports of stepping until the shards have consumed every committed routed version."""
        reports = []
        for _ in range(max_steps):
            report = self.step()
            if report is None:
                break
            reports.append(report)
        return reports

    def progress(self) -> dict[int, int]:
        """Return, per shard, the routed version whose events are committed (0 = none yet)."""
        self.ensure_tables()
        return {s: self.store.transaction_version(self.events_uri, writer_app_id(s)) or 0 for s in self.shards}

    def step(self) -> WriteReport | None:
        """Return the report of consuming the shards' new routed commits, or None when there are none."""
        started = time.perf_counter()
        self.ensure_tables()
        read_version = self.store.version(self.events_uri)
        progress = self.progress()
        repaired = self.repair_ids(progress)
        routed_version = self.store.version(self.routed_uri) if self.store.exists(self.routed_uri) else 0
        todo = tuple(s for s in self.shards if progress[s] < routed_version)
        if not todo:
            return None
        new_files = self._new_routed_files(todo, progress, routed_version)
        batch = self._batch(new_files, routed_version)
        return self._dedupe_and_commit(batch, todo, routed_version, read_version, repaired, started)

    # ------------------------------------------------------------------------------------------ reading
    def _new_routed_files(self, todo: Sequence[int], progress: dict[int, int], version: int) -> list[FileInfo]:
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
        from pyspark.sql import functions as F

        if not files:
            return self.spark.createDataFrame([], EVENTS_SCHEMA)
        rows = self.store.read_files(self.routed_uri, files)
        return rows.select(
            *[F.col(f.name) for f in EVENT_SCHEMA.fields if f.name not in _LINEAGE],
            F.col("shard"),
            F.lit(routed_version).cast("long").alias("routed_version"),
            F.date_format("ts", "yyyy-MM-dd'T'HH").alias("hour"),
        )

    def _index_rows(self, intervals: set[tuple[int, str]]) -> DataFrame | None:
        """Return the committed IDs of these (shard, interval) partitions: one columnar read, or None."""
        wanted = [f for f in self.store.files(self.ids_uri)
                  if (int(f.partition_values["shard"] or -1), f.partition_values["interval"]) in intervals]
        if not wanted:
            return None
        return self.store.read_files(self.ids_uri, wanted).select(*KEY)

    # ----------------------------------------------------------------------------------------- writing
    def _dedupe_and_commit(self, batch: DataFrame, todo: tuple[int, ...], routed_version: int,
                           read_version: int, repaired: int, started: float) -> WriteReport:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        batch = batch.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            rows_in = batch.count()
            # Used three times (intervals, count, anti-join): deduplicate once.
            unique = batch.dropDuplicates(KEY).persist(StorageLevel.MEMORY_AND_DISK)
            intervals = {(int(r["shard"]), str(r["hour"])) for r in unique.select("shard", "hour").distinct().collect()}
            index = self._index_rows(intervals)
            survivors = unique if index is None else unique.join(index, KEY, "left_anti")
            survivors = survivors.persist(StorageLevel.MEMORY_AND_DISK)
            try:
                n_unique, n_new = unique.count(), survivors.count()
                txns = [AppTransaction(writer_app_id(s), routed_version) for s in todo]
                kept = survivors if self._gate is None else self._gate(survivors, txns)
                written = n_new if kept is survivors else kept.count()
                meta = {"shards": list(todo), "routed_version": routed_version, "rows_in": rows_in,
                        "duplicates_in_batch": rows_in - n_unique, "duplicates_in_index": n_unique - n_new,
                        "rejected": n_new - written}
                conflict = False
                try:
                    self._before_commit(EVENTS)
                    result = self.store.append(self.events_uri, kept, app_transactions=txns,
                                               metadata=meta, read_version=read_version)
                    conflict = result.skipped
                except CommitConflict:
                    conflict = True
                if conflict:
                    # Another writer committed this progress first: drop the batch; the next step re-reads.
                    self.conflicts += 1
                    written = 0
                else:
                    ids = survivors.select("shard", F.col("hour").alias("interval"), *KEY, "routed_version")
                    self._before_commit(ID_INDEX)
                    self.store.append(self.ids_uri, ids, app_transactions=txns, metadata={"shards": list(todo)})
            finally:
                survivors.unpersist()
                unique.unpersist()
        finally:
            batch.unpersist()
        return WriteReport(
            shards=todo, routed_version=routed_version, rows_in=rows_in, duplicates_in_batch=rows_in - n_unique,
            duplicates_in_index=0 if conflict else n_unique - n_new, written=written,
            intervals_paged_in=len(intervals), conflict=conflict, ids_repaired=repaired,
            seconds=time.perf_counter() - started, rejected=0 if conflict else n_new - written,
        )

    def repair_ids(self, progress: dict[int, int] | None = None) -> int:
        """Return how many IDs were rebuilt from ``events`` for shards whose ``event_ids`` lag behind.

        The ``events`` commit is the truth; this restores agreement after a crash between the two commits.
        """
        from pyspark.sql import functions as F

        progress = progress or self.progress()
        lag = {s: self.store.transaction_version(self.ids_uri, writer_app_id(s)) or 0 for s in self.shards}
        behind = [s for s in self.shards if lag[s] < progress[s]]
        if not behind:
            return 0
        oldest = min(lag[s] for s in behind)
        # File statistics narrow the read to files that can hold these shards' newer events.
        candidates = [f for f in self.store.files(self.events_uri)
                      if _may_hold(f, "routed_version", oldest + 1, None)
                      and any(_may_hold(f, "shard", s, s) for s in behind)]
        if not candidates:
            rows = self.spark.createDataFrame([], ID_SCHEMA)
        else:
            events = self.store.read_files(self.events_uri, candidates)
            cond = F.lit(False)
            for s in behind:
                cond = cond | ((F.col("shard") == s) & (F.col("routed_version") > lag[s])
                               & (F.col("routed_version") <= progress[s]))
            rows = events.where(cond).select("shard", F.col("hour").alias("interval"), *KEY, "routed_version")
        rows = rows.persist()
        try:
            n = rows.count()
            txns = [AppTransaction(writer_app_id(s), progress[s]) for s in behind]
            self.store.append(self.ids_uri, rows, app_transactions=txns, metadata={"repair": True})
        finally:
            rows.unpersist()
        return n


def _may_hold(f: FileInfo, column: str, low: int | None, high: int | None) -> bool:
    """Return whether a file's min/max statistics allow a value of ``column`` within [low, high]."""
    lo, hi = f.min_values.get(column), f.max_values.get(column)
    if lo is None or hi is None:
        return True
    return (low is None or int(hi) >= low) and (high is None or int(lo) <= high)
