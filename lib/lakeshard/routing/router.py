"""The shard router (Husky): landing records → ``routed`` (by shard) + ``quarantine`` + metrics, exactly once.

The route itself (placement window and shard of each event) is :mod:`~lakeshard.routing.spark_route`'s and
:mod:`~lakeshard.routing.arrow_route`'s; :class:`Router` orchestrates a batch: plan, parse, route, commit.

How a run is made exactly once without a transaction spanning tables: the router first commits a
**batch plan** (which landing files batch *n* consists of, :mod:`~lakeshard.routing.plan`) to ``landing_batches``
with the app transaction ``router`` → *n*; that plan is the write-ahead log. Then it appends the batch's routed
events, its quarantined records and its metrics, each commit carrying ``router`` → *n* as well. A
router that starts (or restarts after a crash) finds the newest plan; every table whose ``router``
version is behind it gets that batch replayed from the plan's files, and tables already at it skip
the commit (the app transaction makes a replay a no-op). A plan holds byte ranges of files with their
checksums, and its ``planned_at`` is the clock the parse validates by, so a replay parses the same bytes
by the same clock and reaches the same verdicts. Which bytes a batch takes — files consumed like logs,
growing and rewritten files, held-back tails, symbolic links — is :mod:`lakeshard.routing.lifecycle`'s.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from lakeshard.config import LakeshardConfig
from lakeshard.lake import AppTransaction, CommitResult, FileInfo, TableSpec, TableStore
from lakeshard.landing import LandingFile, parse_landing_arrow, read_landing, scan_landing
from lakeshard.process import SharedJobs, worker_pool
from lakeshard.routing.allocator import ShardAllocator
from lakeshard.routing.arrow_route import route_arrow, routed_rows
from lakeshard.routing.consumed import ConsumedRanges
from lakeshard.routing.errors import RoutingError
from lakeshard.routing.handoff import FusedHandoff
from lakeshard.routing.lifecycle import Intake, plan_intake
from lakeshard.routing.metrics import arrow_metrics, spark_metrics
from lakeshard.routing.plan import PlannedBatch, plan_rows, planned_batch
from lakeshard.routing.spark_route import route
from lakeshard.tables import (
    EVENTS,
    FUSED_APP_ID,
    FUSED_HANDOFF,
    ID_INDEX,
    LANDING_BATCHES,
    LANDING_BATCHES_SCHEMA,
    QUARANTINE,
    QUARANTINE_SCHEMA,
    ROUTED,
    ROUTED_PARTITIONING,
    ROUTED_PROPERTIES,
    ROUTED_SCHEMA,
    ROUTER_APP_ID,
    ROUTING_METRICS,
    USER_TABLE_SHAPES,
)
from lakeshard.tables import ROUTING_METRICS_SCHEMA as METRICS_SCHEMA
from lakeshard.utc import millis

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["RouteReport", "Router"]



@dataclass(frozen=True)
class _Ahead:
    """The plan a router takes next (not committed yet) and its parse, both made on the look-ahead thread while the
    batch before routes and commits: ``parsed`` is None when the plan is not the driver's to parse. The parse's
    files are ``parsing``'s jobs, which the router joins once the batch before is done instead of waiting."""

    batch: int
    landing: str
    now: datetime
    intake: Future[Intake]
    parsed: Future[tuple[pa.Table, pa.Table] | None]
    parsing: SharedJobs[list[pa.RecordBatch]]

    def result(self) -> tuple[pa.Table, pa.Table] | None:
        """Return the parse, parsing on this thread the files the look-ahead thread has not begun."""
        self.parsing.join()
        return self.parsed.result()


@dataclass(frozen=True)
class RouteReport:
    """What one routed batch did: the rows this run committed itself. ``records = routed + quarantined`` always
    holds; rows of the batch that another run had already committed (a router racing this one for the same plan,
    or a crashed run whose commit landed) are counted in ``already_committed`` only, so reports of racing
    processes add up to what the tables hold."""

    batch: int
    files: int
    records: int
    routed: int
    quarantined: int
    quarantine_by_category: dict[str, int]
    replayed: bool  # True when this run finished a batch a previous (crashed) run had planned
    versions: dict[str, int] = field(default_factory=dict)
    bytes: int = 0  # landing bytes the batch covers
    rewritten_files: int = 0  # files routed again from their start because they changed other than by appends
    # Left for a later run when the batch was planned: files with a record still being written, and their bytes.
    held_back_files: int = 0
    held_back_bytes: int = 0
    dangling_links: tuple[str, ...] = ()  # landing links whose target does not exist (read once it does)
    already_committed: int = 0  # rows of the batch whose commit another run had made (skipped here)


class Router:
    """Routes new landing files in batches; safe to crash, restart, or run twice at once.

    Example::

        router = Router(spark, store, cfg)
        for report in router.run():          # every new landing file, in batches
            print(report.batch, report.routed, report.quarantined)

    Given the writers' hand-off (``handoff=ShardWriter(...)``, whose :meth:`~lakeshard.dedupe.ShardWriter.deliver`
    takes a batch in memory) it finishes batches planned as fused; with ``fused=True`` it also plans every batch the
    driver takes that way, handing the routed rows to the writers instead of ``routed`` (docs/decisions.md, record 19).
    """

    def __init__(
        self,
        spark: SparkSession | None,
        store: TableStore,
        cfg: LakeshardConfig,
        *,
        allocator: ShardAllocator | None = None,
        max_batch_files: int = 200,
        max_batch_bytes: int | None = None,
        before_commit: Callable[[str, int], None] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        handoff: FusedHandoff | None = None,
        fused: bool = False,
    ) -> None:
        self._spark = spark
        self.store = store
        self.cfg = cfg
        self.allocator = allocator or ShardAllocator(store, cfg)
        self.max_batch_files = max_batch_files
        # A backlog is cut into batches the driver path takes (routing.arrow_max_bytes; routing.fused_max_bytes for
        # batches this router writes itself): a Spark job's fixed cost is worth paying only for a single file bigger
        # than that, or when the driver path is off (0).
        driver = self._driver_bytes = ((cfg.routing.fused_max_bytes or cfg.routing.arrow_max_bytes) if fused
                                       else cfg.routing.arrow_max_bytes)
        self.max_batch_bytes = max_batch_bytes if max_batch_bytes is not None else (driver if driver > 0 else 2 << 30)
        # A hook called before each commit with (table, batch): the crash tests kill the process there.
        self._before_commit = before_commit or (lambda table, batch: None)
        self._clock = clock  # when a batch is planned: the clock its parse validates by, on every attempt
        self.last_intake: Intake | None = None  # what the latest look at the landing zone found and left
        self._landing = cfg.landing  # the zone of the run in progress
        self._ahead: _Ahead | None = None  # the next batch's intake, parsed while this one commits
        self._more: bool | None = None  # whether the latest plan left bytes for another batch (None: a replay)
        self._parser: ThreadPoolExecutor | None = None
        self.uris = {name: cfg.table_uri(name) for name in (ROUTED, QUARANTINE, LANDING_BATCHES, ROUTING_METRICS)}
        self._consumed = ConsumedRanges(store, self.uris[LANDING_BATCHES])  # what the batch plans consumed
        self._looking = threading.Lock()  # one look at the landing zone at a time (the look ahead's or this one's)
        # The fused hand-off (docs/decisions.md, record 19): ``handoff`` finishes batches planned as fused; with
        # ``fused`` this router also plans every batch the driver takes that way (its process writes events).
        if fused and handoff is None:
            raise RoutingError("a router planning fused batches needs the writers' hand-off (handoff=...)")
        self._handoff = handoff
        self._fused = fused
        self.uris.update({EVENTS: cfg.table_uri(EVENTS), ID_INDEX: cfg.table_uri(ID_INDEX)})
        self._ready = False

    @property
    def spark(self) -> SparkSession:
        """The session big batches run on: the one given, else the store's (started when first needed)."""
        return self._spark if self._spark is not None else self.store.spark

    @staticmethod
    def table_specs(cfg: LakeshardConfig) -> list[TableSpec]:
        """Return the tables a router of ``cfg``'s lakehouse writes (for :meth:`TableStore.create_all`)."""
        uris = {name: cfg.table_uri(name) for name in (ROUTED, QUARANTINE, LANDING_BATCHES, ROUTING_METRICS)}
        # Tables that gained nullable columns (byte ranges, the plan's hand-off, routed rows' batch) grow them when a
        # lakehouse made before opens: no migration step; rows written before read them as null.
        return [
            TableSpec(uris[ROUTED], ROUTED_SCHEMA, tuple(ROUTED_PARTITIONING), ROUTED_PROPERTIES,
                      "landing events with their placement window, shard and router batch", grow=True),
            TableSpec(uris[QUARANTINE], QUARANTINE_SCHEMA, description=USER_TABLE_SHAPES[QUARANTINE].description,
                      grow=True),
            TableSpec(uris[LANDING_BATCHES], LANDING_BATCHES_SCHEMA,
                      description="the router's batch plans: which bytes of which landing files each batch holds",
                      grow=True),
            TableSpec(uris[ROUTING_METRICS], METRICS_SCHEMA,
                      description="events and bytes per window, tenant and shard (autosharder input)"),
        ]

    def ensure_tables(self) -> None:
        """Create the router's tables if missing."""
        if self._ready:
            return
        self.store.create_all(self.table_specs(self.cfg))
        self._ready = True

    def run(self, landing: str | None = None, *, on_batch: Callable[[RouteReport], None] | None = None
            ) -> list[RouteReport]:
        """Return the reports of routing every landing byte not routed yet when the run looks (finishing a crashed
        batch first): batches follow each other until one takes all the zone held when it was planned."""
        reports = []
        try:
            while (report := self.route_once(landing)) is not None:
                reports.append(report)
                if on_batch is not None:
                    on_batch(report)
                if self._more is False:
                    # The batch took all the zone held when it looked: what was written since waits for the next
                    # run (one more look would list the whole zone again to find, most often, nothing).
                    break
        finally:
            self._stop_looking_ahead()
        return reports

    def route_once(self, landing: str | None = None) -> RouteReport | None:
        """Return the report of the next batch (a replay of an unfinished one first), or None when idle."""
        self.ensure_tables()
        self._landing = landing or self.cfg.landing
        ahead, self._ahead = self._ahead, None
        self._more = None
        planned = self.store.transaction_version(self.uris[LANDING_BATCHES], ROUTER_APP_ID) or 0
        if planned and self._unfinished(planned):
            return self._execute(planned, self._planned(planned), replayed=True)
        batch = planned + 1
        if ahead is not None and (ahead.batch != batch or ahead.landing != self._landing):
            ahead.parsed.cancel()
            ahead = None  # another router planned the batch looked ahead at (or another zone is asked for)
        looked = self._looked(ahead) if ahead is not None else None
        now, intake = looked if looked is not None else self._look(self._landing)
        self.last_intake = intake
        self._more = intake.more
        if not intake.ranges:
            return None
        ranges = intake.ranges
        n = len(ranges)
        limit = self._driver_bytes
        fits = limit > 0 and sum(r.file.read_bytes for r in ranges) <= limit
        handoff = FUSED_HANDOFF if self._fused and fits else None
        plan = plan_rows(batch, ranges, now, handoff)
        self._before_commit(LANDING_BATCHES, batch)
        result = self.store.append_arrow(self.uris[LANDING_BATCHES], plan,
                                         app_transactions=[AppTransaction(ROUTER_APP_ID, batch)],
                                         metadata={"batch": batch, "files": n})
        if result.skipped:  # another router planned this batch first: finish its plan instead
            self._more = None
            intake.contents.clear()  # bytes of a plan that was not committed
            return self._execute(batch, self._planned(batch), replayed=True)
        report = self._execute(batch, PlannedBatch([r.file for r in ranges], millis(now), handoff), replayed=False,
                               ahead=ahead if looked is not None else None, contents=intake.contents)
        return dataclasses.replace(report, rewritten_files=sum(r.rewritten for r in ranges),
                                   held_back_files=len(intake.held_back), held_back_bytes=intake.held_back_bytes,
                                   dangling_links=tuple(intake.dangling))

    def _unfinished(self, batch: int) -> bool:
        """Return whether planned batch ``batch`` is missing from a table it reaches.

        ``quarantine`` and ``routing_metrics`` carry ``router`` → the batch whatever its hand-off. A batch through
        ``routed`` is there once ``routed`` carries it; a fused one once ``events`` and ``event_ids`` both carry
        ``fused`` → the batch (only a fused plan ever sets it), so the next batch is never planned while this
        one's IDs are missing.
        """
        version = self.store.transaction_version
        if any((version(self.uris[t], ROUTER_APP_ID) or 0) < batch for t in (QUARANTINE, ROUTING_METRICS)):
            return True
        if (version(self.uris[ROUTED], ROUTER_APP_ID) or 0) >= batch:
            return False
        return not all(self.store.exists(self.uris[t]) and (version(self.uris[t], FUSED_APP_ID) or 0) >= batch
                       for t in (EVENTS, ID_INDEX))

    def _planned(self, batch: int) -> PlannedBatch:
        """Return committed batch plan ``batch``."""
        return planned_batch(self.store.read_table_arrow(self.uris[LANDING_BATCHES],
                                                         where=pc.field("batch") == batch).to_pylist())

    def _look(self, landing: str) -> tuple[datetime, Intake]:
        """Return the clock of the next plan and what it takes of ``landing``."""
        now = self._plan_clock()
        return now, self._next_files(landing, now)

    def _plan_clock(self) -> datetime:
        """Return the clock of a plan, in whole milliseconds: its parse validates by it, on this attempt and on
        any replay."""
        now = self._clock()
        return now.replace(microsecond=now.microsecond // 1000 * 1000)

    def _look_ahead(self, batch: int) -> None:
        """Start planning and parsing the batch after ``batch`` (whose plan is committed) on another thread while
        ``batch`` routes and commits.

        The next plan is taken from the plans committed so far (``batch``'s included) by the clock read here, and
        parsed on the same thread; the next :meth:`route_once` commits exactly that plan and uses that parse, or
        drops both when another router planned that batch meanwhile. Nothing of the next batch is committed before
        ``batch``'s commits are: a crash leaves the log as a router without look-ahead would. Only batches the
        driver path takes are parsed ahead; at most one parse is held beside the batch in hand.
        """
        if self._more is False:
            return  # this batch took all the zone held: nothing to look ahead at
        if self._parser is None:
            self._parser = ThreadPoolExecutor(1, thread_name_prefix="landing-ahead")
        now = self._plan_clock()
        # One thread, so the parse runs after the look it parses and never beside it.
        intake = self._parser.submit(self._next_files, self._landing, now)
        parsing: SharedJobs[list[pa.RecordBatch]] = SharedJobs()
        parsed = self._parser.submit(self._parse_ahead, intake, millis(now), parsing)
        parsed.add_done_callback(lambda _: parsing.close())  # done, failed or cancelled: nothing left to join
        self._ahead = _Ahead(batch + 1, self._landing, now, intake, parsed, parsing)

    @staticmethod
    def _looked(ahead: _Ahead) -> tuple[datetime, Intake] | None:
        """Return the plan the look ahead took, or None when it failed: the look ahead is an optimisation, never
        a reason to lose a batch, so the next batch then looks again (where the problem is raised if it lasts)."""
        try:
            return ahead.now, ahead.intake.result()
        except Exception:
            return None

    def _parse_ahead(self, looked: Future[Intake], now_ms: int, parsing: SharedJobs[list[pa.RecordBatch]]
                     ) -> tuple[pa.Table, pa.Table] | None:
        """Return the parse of the files the look ahead planned; None when the look failed, found nothing or planned
        more than the driver takes."""
        if looked.exception() is not None:
            return None
        files = [r.file for r in looked.result().ranges]
        if not files or sum(f.read_bytes for f in files) > self._driver_bytes:
            return None
        # One thread while the batch in hand's writer step (its Parquet writes on a thread per core) runs: a parse on
        # every core beside it cost CPU and memory and gained no time (docs/routing.md). The router joins the parse
        # once that step is done, so the files left are parsed on both threads.
        events, quarantine = parse_landing_arrow(files, limits=self.cfg.landing_format, now_ms=now_ms,
                                                 contents=looked.result().contents, shared=parsing)
        return events, quarantine

    def _stop_looking_ahead(self) -> None:
        self._ahead = None
        if self._parser is not None:
            self._parser.shutdown(wait=False, cancel_futures=True)
            self._parser = None

    def _next_files(self, landing: str, now: datetime) -> Intake:
        settle = self.cfg.landing_format.settle_seconds
        # A look ahead left running (its batch dropped) and this router's own look share what was consumed.
        with self._looking:
            scan = scan_landing(landing)
            consumed = self._consumed.of({f.identity for f in scan.files})
            # A batch the driver takes is parsed right after this look: the bytes hashed here are the ones parsed.
            return plan_intake(scan, consumed, now=now, settle_seconds=settle, max_files=self.max_batch_files,
                               max_bytes=self.max_batch_bytes, keep_bytes=self._driver_bytes)

    def _added_files(self, version: int) -> list[FileInfo]:
        """Return the data files the ``routed`` commit ``version`` added."""
        entries = self.store.log_entries(self.uris[ROUTED], start=version, end=version)
        return [c.file for e in entries for c in e.changes if c.action == "add"]

    def _execute(self, batch: int, plan: PlannedBatch, *, replayed: bool,
                 ahead: _Ahead | None = None, contents: dict[str, bytes] | None = None) -> RouteReport:
        files, now_ms = plan.files, plan.now_ms
        limit = self.cfg.routing.arrow_max_bytes
        covered = sum(f.read_bytes for f in files)
        if plan.handoff == FUSED_HANDOFF and self._handoff is None:
            raise RoutingError(f"batch {batch} of {self.uris[LANDING_BATCHES]} is planned for the fused hand-off "
                               "(handed to the writers in memory); expected a router with the writers' hand-off "
                               "to finish it, found a route-only router: run `lakeshard ingest` on this lakehouse")
        if plan.handoff == FUSED_HANDOFF or (limit > 0 and covered <= limit):
            # A fused plan fitted the driver when planned: its replay reads the same ranges.
            results, n_events, by_cat = self._execute_in_driver(batch, files, now_ms, ahead, contents,
                                                                fused=plan.handoff == FUSED_HANDOFF)
        else:
            results, n_events, by_cat = self._execute_on_spark(batch, files, now_ms)
        n_quarantined = sum(by_cat.values())
        # Count only what this run's own commits hold: a commit skipped as already made was another run's.
        already = (n_events if results[ROUTED].skipped else 0) + (n_quarantined if results[QUARANTINE].skipped else 0)
        if results[ROUTED].skipped:
            n_events = 0
        if results[QUARANTINE].skipped:
            by_cat, n_quarantined = {}, 0
        return RouteReport(batch=batch, files=len(files), records=n_events + n_quarantined, routed=n_events,
                           quarantined=n_quarantined, quarantine_by_category=by_cat, replayed=replayed,
                           versions={t: r.version for t, r in results.items()}, bytes=covered,
                           already_committed=already)

    def _commit(self, table: str, batch: int, files: Sequence[LandingFile], rows: DataFrame | pa.Table
                ) -> CommitResult:
        """Append ``rows`` (Spark or Arrow) to one of the router's tables, carrying ``router`` → ``batch``."""
        txn = [AppTransaction(ROUTER_APP_ID, batch)]
        meta = {"batch": batch, "files": len(files)}
        self._before_commit(table, batch)
        if isinstance(rows, pa.Table):
            return self.store.append_arrow(self.uris[table], rows, app_transactions=txn, metadata=meta)
        return self.store.append(self.uris[table], rows, app_transactions=txn, metadata=meta)

    def _execute_in_driver(self, batch: int, files: Sequence[LandingFile], now_ms: int,
                           ahead: _Ahead | None = None, contents: dict[str, bytes] | None = None, *,
                           fused: bool = False,
                           ) -> tuple[dict[str, CommitResult], int, dict[str, int]]:
        """Route a small batch in this process: parse (or take the parse looked ahead; ``contents``: the bytes
        its plan kept), place, hash and write with pyarrow (no Spark job); a fused batch's routed rows go to the
        writers' hand-off, not to ``routed`` (its result stands in the report for ``routed``'s)."""
        parsed = ahead.result() if ahead is not None else None
        events, quarantine = (parsed if parsed is not None else
                              parse_landing_arrow(files, limits=self.cfg.landing_format, now_ms=now_ms,
                                                  contents=contents))
        self._look_ahead(batch)
        routed = self._placed(events, fused)
        delivered = None
        if fused:
            assert self._handoff is not None  # checked by _execute
            delivered = self._handoff.deliver(batch, routed)
        if delivered is None:
            # A fused batch the writers cannot take in memory (a shard's damaged file: one commit cannot leave that
            # shard out) goes through routed like any other; routed's ``router`` → batch then records that path.
            delivered = self._commit(ROUTED, batch, files, routed_rows(routed, batch))
        results = {ROUTED: delivered,
                   QUARANTINE: self._commit(QUARANTINE, batch, files, quarantine)}
        metrics = arrow_metrics(routed, batch)
        results[ROUTING_METRICS] = self._commit(ROUTING_METRICS, batch, files, metrics)
        categories = quarantine.group_by("category", use_threads=False).aggregate([([], "count_all")]).to_pylist()
        return results, events.num_rows, {str(r["category"]): int(r["count_all"]) for r in categories}

    def _placed(self, events: pa.Table, fused: bool) -> pa.Table:
        """Return ``events`` placed (:func:`route_arrow`); a fused batch's rows also carry the columns its hand-off
        derives from each row alone (the writers' key hashes), computed on a worker thread beside the placements:
        both are a few tenths of a second of numpy and Arrow that the writer step would otherwise wait for."""
        if not fused or self._handoff is None:
            return route_arrow(events, self.allocator)
        deriving = worker_pool().submit(self._handoff.derive, events)
        try:
            routed = route_arrow(events, self.allocator)
        finally:
            wait([deriving])  # nothing of a failed batch goes on running
        derived = deriving.result()
        for name in derived.column_names:
            routed = routed.append_column(derived.field(name), derived.column(name))
        return routed

    def _execute_on_spark(self, batch: int, files: Sequence[LandingFile], now_ms: int
                          ) -> tuple[dict[str, CommitResult], int, dict[str, int]]:
        from pyspark.sql import functions as F

        results: dict[str, CommitResult] = {}
        with read_landing(self.spark, list(files), limits=self.cfg.landing_format, now_ms=now_ms) as landed:
            routed = route(landed.events, self.allocator).withColumn("batch", F.lit(batch).cast("long"))
            r = results[ROUTED] = self._commit(ROUTED, batch, files, routed)
            results[QUARANTINE] = self._commit(QUARANTINE, batch, files, landed.quarantine)
            # Metrics from the files just committed (four narrow columns of a few files per shard) rather than a
            # cache of every routed row; a replay whose routed commit was already made routes again instead.
            source = routed if r.skipped else self.store.read_files(self.uris[ROUTED], self._added_files(r.version))
            results[ROUTING_METRICS] = self._commit(ROUTING_METRICS, batch, files, spark_metrics(source, batch))
            # Counts come from the parse itself (cached): what the batch holds, whichever run committed it.
            n_events = landed.events.count()
            by_cat = {str(row["category"]): int(row["n"]) for row in
                      landed.quarantine.groupBy("category").agg(F.count(F.lit(1)).alias("n")).collect()}
        return results, n_events, by_cat
