"""One writer step, two engines: :class:`SparkStep` (Spark jobs) and :class:`ArrowStep` (pyarrow + numpy in the
driver), behind :class:`StepEngine`.

Both do the same step over a shard writer's new routed files: read them as events (each assigned to its bucket),
keep the first row of each key, ask the ID index which keys it holds, hand the new events to the expectation gate,
commit the kept events with the shards' progress, then the new keys' IDs. The base class holds what the two
share — the commit metadata, the two commits with the lost-race handling, the report; each engine holds only
how it reads, dedupes and writes files. They write the same files (one per ``(tenant, hour)`` sorted by the
table's sort columns; one per ``(shard, interval)`` of IDs sorted by the key hash) and the same index, so a
writer may switch engines between steps.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

import numpy as np

from lakeshard.dedupe.commit import Layout, ShardCommits, StepRows, append_shard, commits_per_shard
from lakeshard.dedupe.faults import event_keys, write_or_blame
from lakeshard.dedupe.feed import RoutedFeed
from lakeshard.dedupe.index import IdIndex, own_hour, own_hour_arrow
from lakeshard.dedupe.keyhash import first_of_each_key, key_hash_columns
from lakeshard.dedupe.report import IndexCheck, WriteReport, step_report
from lakeshard.errors import CommitConflict
from lakeshard.lake import AppTransaction, FileInfo, TableStore
from lakeshard.runtime import arrow_dataframe
from lakeshard.tables import (
    EVENT_COLUMNS,
    EVENT_KEY,
    EVENT_KEY_HASH,
    EVENTS,
    EVENTS_DISTINCT_COLUMNS,
    EVENTS_PARTITIONING,
    EVENTS_SORT_COLUMNS,
    FUSED_APP_ID,
    ID_INDEX,
    ROUTED_SCHEMA,
    hour_of,
    writer_app_id,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["ArrowStep", "ClosedBuckets", "Gate", "SparkStep", "Step", "StepContext", "StepEngine"]

# How a step's rows are laid out in ``events`` and in the ID index: one file per partition value, sorted.
EVENTS_LAYOUT = Layout(tuple(EVENTS_PARTITIONING), tuple(EVENTS_SORT_COLUMNS))
IDS_LAYOUT = Layout(("shard", "interval"), ("key_hi", "key_lo"))
# A routed row's landing order: its router batch (null: routed before rows carried it, so earlier), then its landing
# file and line. Of the copies of one key in a writer step the first in that order is kept (first_of_each_key).
LANDED = ("batch", "source_file", "line_number")

class Gate(Protocol):
    """The expectation gate a writer hands each step's new events to (the pipeline's
    :class:`~lakeshard.pipelines.context.ExpectationGate`); it may raise to stop the step."""

    def __call__(self, df: DataFrame, app_transactions: Sequence[AppTransaction] = ()) -> DataFrame:
        """Return the events of ``df`` to commit."""

    def keep_arrow(self, rows: pa.Table, app_transactions: Sequence[AppTransaction] = ()) -> pa.Table | None:
        """Return the events of ``rows`` to commit, or None when the gate's rules need Spark (call it instead)."""


@dataclass(frozen=True)
class Step:
    """One step's work: the new routed ``files`` of shards ``todo`` up to ``routed_version``, committed against
    ``events`` as read at ``read_version``."""

    files: Sequence[FileInfo]
    todo: tuple[int, ...]
    routed_version: int
    read_version: int
    repaired: int  # IDs the step rebuilt before it began, for the report
    started: float  # perf_counter at the step's start, for the report
    excluded: Mapping[tuple[object, ...], str]  # rows proven unwritable (already dead-lettered) -> the reason
    # The fused hand-off (docs/decisions.md, record 19): the routed rows of batch plan ``fused``, given in memory
    # instead of ``files``; ``routed_version`` is then ``-fused`` and both commits carry ``fused`` -> the batch.
    rows: pa.Table | None = None
    fused: int = 0


class ClosedBuckets:
    """The closed ``(tenant_id, hour)`` buckets, read again (as Arrow) only when the ``buckets`` table moved."""

    def __init__(self, store: TableStore, buckets_uri: str) -> None:
        self.store = store
        self.buckets_uri = buckets_uri
        self._closed: tuple[int, pa.Table] | None = None  # (buckets version, closed buckets' tenant_id and hour)

    def get(self, hours: Collection[str] | None = None, *, from_hour: str | None = None) -> set[tuple[str, str]]:
        """Return the closed buckets (none before the completionist first ran); given ``hours``, only those of
        these hours and, with ``from_hour``, of every hour from it on (where a late event's open bucket is).

        Only the buckets asked for become Python objects: every bucket ever closed (tenants x hours, thousands a
        day) made each writer step dearer the older the lakehouse.
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        from lakeshard.buckets import closed_table

        if not self.store.exists(self.buckets_uri):
            return set()
        version = self.store.version(self.buckets_uri)
        if self._closed is None or self._closed[0] != version:
            self._closed = (version, closed_table(self.store, self.buckets_uri))
        rows = self._closed[1]
        if hours is not None:
            keep = pc.is_in(rows.column("hour"), pa.array(sorted(set(hours)), pa.string()))
            if from_hour is not None:
                keep = pc.or_(keep, pc.greater_equal(rows.column("hour"), pa.scalar(from_hour, pa.string())))
            rows = rows.filter(keep)
        return set(zip(rows.column("tenant_id").to_pylist(), rows.column("hour").to_pylist(), strict=True))


@dataclass(frozen=True)
class StepContext:
    """What both engines of a writer work with: its store and tables, its feed, index and closed buckets, the
    expectation gate, the clock and the crash seam (``before_commit``)."""

    store: TableStore
    spark: Callable[[], SparkSession]
    routed_uri: str
    events_uri: str
    ids_uri: str
    feed: RoutedFeed
    index: IdIndex
    buckets: ClosedBuckets
    gate: Gate | None
    clock: Callable[[], datetime]
    before_commit: Callable[[str], None]


class StepEngine(ABC):
    """Runs one writer step (:meth:`run`); the commits, their metadata and the report are shared."""

    name: str

    def __init__(self, context: StepContext) -> None:
        self.store = context.store
        self._spark = context.spark
        self.routed_uri = context.routed_uri
        self.events_uri = context.events_uri
        self.ids_uri = context.ids_uri
        self.feed = context.feed
        self.index = context.index
        self.buckets = context.buckets
        self._gate = context.gate
        self._clock = context.clock
        # Called with the table name right before each commit: the crash tests stop the process there.
        self._before_commit = context.before_commit

    @abstractmethod
    def run(self, step: Step) -> WriteReport:
        """Return the report of deduplicating the step's routed files and committing what is new."""

    @staticmethod
    def transactions(step: Step) -> list[AppTransaction]:
        """Return the app transactions both commits of ``step`` carry: each shard's progress, or the batch plan
        a fused step delivers (one app transaction per commit, which the native adapter can carry)."""
        if step.fused:
            return [AppTransaction(FUSED_APP_ID, step.fused)]
        return [AppTransaction(writer_app_id(s), step.routed_version) for s in step.todo]

    @staticmethod
    def ids_metadata(step: Step) -> dict[str, object]:
        """Return the ``event_ids`` commit's metadata: the shards, and the batch plan of a fused step."""
        return {"shards": list(step.todo), **({"fused": step.fused} if step.fused else {})}

    @staticmethod
    def metadata(step: Step, rows_in: int, n_unique: int, n_new: int, kept: int) -> dict[str, object]:
        """Return the ``events`` commit's metadata: what the step counted."""
        return {"shards": list(step.todo), "routed_version": step.routed_version, "rows_in": rows_in,
                **({"fused": step.fused} if step.fused else {}),
                "duplicates_in_batch": rows_in - n_unique, "duplicates_in_index": n_unique - n_new,
                "rejected": n_new - kept}

    def commit(self, step: Step, append_events: Callable[[], bool], append_ids: Callable[[], None],
               new_keys: pa.Table, rows: StepRows) -> bool:
        """Commit the events (``append_events``: returns whether the store skipped it as already committed),
        then the IDs (``append_ids``) and remember ``new_keys``; return whether the race was lost.

        A lost race (a conflict, or progress already committed) writes no IDs: another writer committed this
        progress first, so what this writer cached of these shards is dropped and the next step re-reads the
        committed progress and pages the IDs in again (Husky's reconciliation).

        On a store whose commit carries one app transaction, a shard writer's ``rows`` are committed shard by shard
        instead (:meth:`_commit_per_shard`); a fused step's commits carry one app transaction
        already (``fused`` -> the batch).
        """
        if commits_per_shard(self.store) and not step.fused:
            return self._commit_per_shard(step, rows, new_keys)
        conflict = False
        try:
            self._before_commit(EVENTS)
            conflict = append_events()
        except CommitConflict:
            conflict = True
        if conflict:
            self.feed.lost_race()
            self.index.cache.drop_shards(step.todo)
            return True
        if step.fused:
            self.feed.committed_fused(step.fused)
        else:
            self.feed.committed(step.todo, step.routed_version)
        self._before_commit(ID_INDEX)
        append_ids()
        self.index.remember(new_keys)
        return False

    def _commit_per_shard(self, step: Step, rows: StepRows, new_keys: pa.Table) -> bool:
        """Commit ``step``'s rows shard by shard (:mod:`lakeshard.dedupe.commit`); return whether a race was lost.

        Shards whose events landed get their IDs committed and their new keys remembered; a lost shard (another
        writer committed its progress first) has its cached IDs dropped, as a lost step's are.
        """
        import pyarrow as pa
        import pyarrow.compute as pc


        commits = ShardCommits(self.store, self._before_commit)
        committed, lost = commits.events(self.events_uri, rows.events,
                                         EVENTS_LAYOUT, step.todo,
                                         step.routed_version, metadata=rows.metadata, read_version=step.read_version,
                                         seam=EVENTS,
                                         buckets=self.buckets.buckets_uri if self.store.writes_guard_closing else None)
        if committed:
            self.feed.committed(committed, step.routed_version)
            commits.ids(self.ids_uri, rows.ids, IDS_LAYOUT, dict.fromkeys(committed, step.routed_version), metadata={},
                        seam=ID_INDEX)
            self.index.remember(new_keys.filter(pc.is_in(new_keys.column("shard"),
                                                         pa.array(committed, new_keys.schema.field("shard").type))))
        if lost:
            self.feed.lost_race()
            self.index.cache.drop_shards(lost)
        return bool(lost)

    def report(self, step: Step, *, rows_in: int, n_unique: int, n_new: int, kept: int, check: IndexCheck,
               conflict: bool) -> WriteReport:
        """Return the step's report (see :func:`lakeshard.dedupe.report.step_report`)."""
        return step_report(step.todo, step.routed_version, rows_in=rows_in, n_unique=n_unique, n_new=n_new,
                           kept=kept, check=check, conflict=conflict, repaired=step.repaired,
                           cache_bytes=self.index.cache.stats().bytes, started=step.started, engine=self.name)


class SparkStep(StepEngine):
    """A step as Spark jobs: for batches too big for the driver."""

    name = "spark"

    def batch(self, files: Sequence[FileInfo], routed_version: int) -> DataFrame:
        """Return the routed rows as events: ``interval`` = the event's own hour (where its ID lives), ``hour``
        and ``late`` = the bucket it is written to (its own hour, or its tenant's open one if that is closed)."""
        return self.assign(self.routed_events(files, routed_version))

    def routed_events(self, files: Sequence[FileInfo], routed_version: int) -> DataFrame:
        """Return the routed rows as events with ``interval`` (the event's own hour) and their landing order
        (:data:`LANDED`), before bucket assignment."""
        from pyspark.sql import functions as F

        rows = (self.store.read_files(self.routed_uri, files) if files
                else self._spark().createDataFrame([], ROUTED_SCHEMA))
        return rows.select(
            *[F.col(name) for name in EVENT_COLUMNS],
            *[F.col(c) if c in rows.columns else F.lit(None).cast("long").alias(c) for c in LANDED],
            F.col("shard"),
            F.lit(routed_version).cast("long").alias("routed_version"),
            own_hour().alias("interval"),
        )

    def assign(self, events: DataFrame) -> DataFrame:
        """Return ``events`` (with ``interval``) with ``hour`` and ``late``: see :func:`assign_buckets`.

        Only the closed buckets among the events' (tenant, own hour) pairs are broadcast: reading the pairs is
        a small job (cheap when ``events`` is cached), broadcasting every bucket ever closed grows with history.
        """
        from lakeshard.buckets import assign_buckets

        closed = self.buckets.get()
        pairs = None
        if closed:
            pairs = {(str(r["tenant_id"]), str(r["interval"]))
                     for r in events.select("tenant_id", "interval").distinct().collect()}
        return assign_buckets(events, closed, now=self._clock(), pairs=pairs)

    def run(self, step: Step) -> WriteReport:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        # Cached before the buckets are assigned: the pairs read for the assignment come from the cache.
        routed = self.routed_events(step.files, step.routed_version).withColumns(key_hash_columns())
        routed = routed.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            rows_in = routed.count()
            batch = self.assign(routed)
            # Of each key, the copy that came first in landing order (as the Arrow step keeps; nulls last), in the
            # events' column order: an aggregate, as dropDuplicates was, not a sort of the batch.
            order = [F.coalesce(F.col(LANDED[0]), F.lit(0)), *[F.col(c) for c in LANDED[1:]]]
            landed = F.struct(*[x for c in order for x in (c.isNull(), c)])
            copy = F.struct(*[c for c in batch.columns if c not in (*EVENT_KEY_HASH, *LANDED)], *EVENT_KEY_HASH)
            unique = (batch.groupBy(*EVENT_KEY).agg(F.min_by(copy, landed).alias("_copy")).select("_copy.*")
                      .persist(StorageLevel.MEMORY_AND_DISK))
            # The keys of a micro-batch are small: the index check runs on the driver, against the cache.
            keys = unique.select("shard", "interval", *EVENT_KEY_HASH).toArrow()
            check = self.index.check(keys)
            duplicate_rows = keys.filter(check.duplicate)
            survivors = unique
            if duplicate_rows.num_rows:
                known = self._spark().createDataFrame(duplicate_rows.select(list(EVENT_KEY_HASH)).to_pandas())
                survivors = unique.join(F.broadcast(known), list(EVENT_KEY_HASH), "left_anti")
            n_unique, n_new = keys.num_rows, keys.num_rows - duplicate_rows.num_rows
            txns = self.transactions(step)
            new_events = survivors.drop(*EVENT_KEY_HASH, "interval")
            if self._gate is not None:  # the gate counts and filters: read the survivors once
                new_events = new_events.persist(StorageLevel.MEMORY_AND_DISK)
            kept = new_events if self._gate is None else self._gate(new_events, txns)
            written = n_new if kept is new_events else kept.count()
            meta = self.metadata(step, rows_in, n_unique, n_new, written)

            def append_events() -> bool:
                # One file per (tenant, hour) — not one per task and partition value — each sorted by the table's
                # sort schema, so compaction merges instead of sorting.
                ordered = (kept.repartition("tenant_id", "hour")
                           .sortWithinPartitions("tenant_id", "hour", *EVENTS_SORT_COLUMNS))
                return self.store.append(self.events_uri, ordered, app_transactions=txns, metadata=meta,
                                         read_version=step.read_version).skipped

            def append_ids() -> None:
                # Sorted by the hash within each (shard, interval), as the driver path writes them: a page-in
                # then merges sorted runs.
                ids = (survivors.select(*self.index.columns())
                       .repartition("shard", "interval").sortWithinPartitions("shard", "interval", *EVENT_KEY_HASH))
                self.store.append(self.ids_uri, ids, app_transactions=txns, metadata=self.ids_metadata(step))

            conflict = self.commit(step, append_events, append_ids, keys.filter(~check.duplicate),
                                   StepRows(kept, survivors.select(*self.index.columns()), meta))
            new_events.unpersist()
            unique.unpersist()
        finally:
            routed.unpersist()
        return self.report(step, rows_in=rows_in, n_unique=n_unique, n_new=n_new, kept=written, check=check,
                           conflict=conflict)


class ArrowStep(StepEngine):
    """A step in the driver process (pyarrow reads and writes, numpy hashes): no Spark job for small batches."""

    name = "arrow"
    _schema: pa.Schema | None = None  # events' Arrow schema, read once per engine

    def batch(self, files: Sequence[FileInfo], routed_version: int,
              excluded: Mapping[tuple[object, ...], str]) -> pa.Table:
        """Return the routed rows as events, read in the driver, without the rows ``excluded``: the Arrow twin
        of :meth:`SparkStep.batch`."""
        have = self.store.arrow_schema(self.routed_uri).names  # a routed table made before may lack ``batch``
        rows = self.store.read_arrow(self.routed_uri, files,
                                     columns=[*EVENT_COLUMNS, "shard", *[c for c in LANDED if c in have]])
        return self.assign(rows, routed_version, excluded)

    def assign(self, routed: pa.Table, routed_version: int, excluded: Mapping[tuple[object, ...], str]) -> pa.Table:
        """Return routed rows (the event columns and ``shard``, read from ``routed`` or handed over in memory) as
        events assigned to their buckets, without the rows ``excluded``; their landing order (:data:`LANDED`: which
        copy of a key the dedupe keeps) and key hashes computed ahead travel with them."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from lakeshard.buckets import assign_buckets_arrow

        carried = [c for c in (*LANDED, *EVENT_KEY_HASH) if c in routed.column_names]
        rows = routed.select([*EVENT_COLUMNS, "shard", *carried])
        if excluded:  # rows proven unwritable, dead-lettered already
            rows = rows.filter(pa.array([k not in excluded for k in event_keys(rows)], pa.bool_()))
        own = own_hour_arrow(rows.column("ts"))
        now = self._clock()
        closed = self.buckets.get(pc.unique(own).to_pylist(), from_hour=hour_of(now))  # those the batch can meet
        hour, late = assign_buckets_arrow(rows.column("tenant_id"), own, closed, now=now)
        return (rows.append_column("routed_version", pa.array(np.full(rows.num_rows, routed_version, np.int64)))
                .append_column("interval", own).append_column("hour", hour).append_column("late", late))

    def run(self, step: Step) -> WriteReport:
        """Return the report of one step run in the driver: the same dedupe, files and commits as
        :meth:`SparkStep.run`, with pyarrow and numpy instead of Spark jobs."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from lakeshard.dedupe.keyhash import key_hashes
        from lakeshard.lake import WrittenFile, partition_order, write_partitioned

        batch = (self.batch(step.files, step.routed_version, step.excluded) if step.rows is None
                 else self.assign(step.rows, step.routed_version, step.excluded))
        rows_in = batch.num_rows
        if set(EVENT_KEY_HASH) <= set(batch.column_names):
            hi, lo = (batch.column(c).to_numpy() for c in EVENT_KEY_HASH)
            batch = batch.drop_columns(list(EVENT_KEY_HASH))
        else:
            hi, lo = key_hashes(batch)
        # Within the batch: the copy of each key that came first in landing order (as on Spark).
        landed = [c for c in LANDED if c in batch.column_names]  # a fused step (one batch) has no ``batch``
        first = first_of_each_key(hi, lo, [pc.fill_null(batch.column(c), 0) if c == LANDED[0] else batch.column(c)
                                           for c in landed])
        batch = batch.drop_columns(landed)
        keys = pa.table({"shard": batch.column("shard").take(first), "interval": batch.column("interval").take(first),
                         "key_hi": hi[first], "key_lo": lo[first]})
        check = self.index.check(keys)
        new = ~check.duplicate
        chosen = first[new]
        # The rows written: one gather of the whole rows (long messages, attribute maps), in the order of the
        # events' files (write_partitioned then writes them without gathering them again).
        placed = batch.select([*EVENTS_PARTITIONING, *EVENTS_SORT_COLUMNS]).take(chosen)
        chosen = chosen[partition_order(placed, EVENTS_PARTITIONING, EVENTS_SORT_COLUMNS).to_numpy()]
        survivors = batch.take(chosen).append_column("key_hi", pa.array(hi[chosen])) \
            .append_column("key_lo", pa.array(lo[chosen]))
        n_unique, n_new = keys.num_rows, survivors.num_rows
        txns = self.transactions(step)
        kept = self._gate_arrow(survivors, txns)
        meta = self.metadata(step, rows_in, n_unique, n_new, kept.num_rows)
        events_schema, ids_schema = self._events_schema(), self.index.arrow_schema()

        # A store that cannot commit files this process wrote (Delta's engine under Spark Connect) takes a fused
        # step's rows, which carry one app transaction, as a DataFrame through Delta's public writer.
        public = not self.store.writes_in_process and len(txns) == 1

        def append_events() -> bool:
            if public:
                return append_shard(self.store, self.events_uri, kept, EVENTS_LAYOUT, txns[0],
                                    metadata=meta, read_version=step.read_version,
                                    buckets=self.buckets.buckets_uri if self.store.writes_guard_closing else None
                                    ).skipped
            return self.store.append(
                self.events_uri, None, app_transactions=txns, metadata=meta, read_version=step.read_version,
                # One file per (tenant, hour), sorted by the sort schema: the layout the Spark path writes.
                # Rows failing alone are named (RecordLevelFailure); any other failure is a fault.
                write=lambda target: write_or_blame(kept, target, lambda rows, to: write_partitioned(
                    rows, to, events_schema, EVENTS_PARTITIONING, EVENTS_SORT_COLUMNS, presorted=True,
                    plain=EVENTS_DISTINCT_COLUMNS))).skipped

        def append_ids() -> None:
            # Every new key's ID, rejected rows' too (as on Spark): a re-sent copy of a row an expectation
            # took is a duplicate, not a second chance.
            if public:
                append_shard(self.store, self.ids_uri, survivors, IDS_LAYOUT, txns[0],
                             metadata=self.ids_metadata(step))
                return

            def write_ids(target: str) -> list[WrittenFile]:
                written = write_partitioned(survivors, target, ids_schema, ["shard", "interval"], EVENT_KEY_HASH,
                                            plain=EVENT_KEY_HASH)
                self.index.wrote(target, written)  # the end-of-run merge takes these from memory
                return written

            self.store.append(self.ids_uri, None, app_transactions=txns, metadata=self.ids_metadata(step),
                              write=write_ids)

        conflict = self.commit(step, append_events, append_ids, keys.filter(new), StepRows(kept, survivors, meta))
        return self.report(step, rows_in=rows_in, n_unique=n_unique, n_new=n_new, kept=kept.num_rows, check=check,
                           conflict=conflict)

    def _gate_arrow(self, survivors: pa.Table, txns: Sequence[AppTransaction]) -> pa.Table:
        """Return the new events an expectation gate keeps (all of them without a gate).

        The gate gets the columns the Spark path hands it. Its rules run on the Arrow table when each is in
        the subset :mod:`lakeshard.pipelines.arrow_rules` evaluates as Spark does; otherwise the events go to
        Spark as one Arrow table and what the gate keeps comes back the same way.
        """
        if self._gate is None:
            return survivors
        events = survivors.drop_columns([*EVENT_KEY_HASH, "interval"])
        kept = self._gate.keep_arrow(events, txns)
        if kept is not None:
            return survivors if kept is events else kept
        handed = arrow_dataframe(self._spark(), events)
        kept_df = self._gate(handed, txns)
        return survivors if kept_df is handed else kept_df.toArrow()

    def _events_schema(self) -> pa.Schema:
        """Return the Arrow schema of ``events`` (read once per writer)."""
        if self._schema is None:
            self._schema = self.store.arrow_schema(self.events_uri)
        return self._schema
