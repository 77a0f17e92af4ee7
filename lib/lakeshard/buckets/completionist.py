"""The completionist (Spotify): closes ``(tenant, hour)`` buckets of ``events`` once they are complete.

Each run observes the buckets (newest file and rows per ``(tenant_id, hour)`` partition, from the
Delta log), measures the backlog (landing files the router has not consumed, and routed rows shard
writers have not committed), plans with :func:`~lakeshard.buckets.planner.plan_closures`, checks the
integrity of every bucket about to close, and commits the new states to the ``buckets`` Delta table.

Integrity check of a closing bucket, over its rows at one ``events`` version: no event key
``(tenant_id, event_id, ts)`` twice, and the rows read equal the rows the log's file statistics
promise. A bucket failing it stays open, with the problem as its reason. The check also yields the
bucket's checksum — an order-independent sum of a 64-bit hash of every row, of a recorded kind
(:mod:`lakeshard.buckets.checksum`) — recorded with the closure, so anyone can later prove a closed bucket
never changed (:meth:`Completionist.verify`, by the formula each bucket closed with).

Closing races the shard writers, whose commits go to another table. A close therefore takes three steps:
the bucket is first committed as ``closing`` (writers treat it as closed from then on: its late rows go to
the open bucket), then checked at the ``events`` version ``V`` read after that, then fenced
(:mod:`lakeshard.buckets.fence`: an ``events`` commit ordered after ``V``, which fails if a writer committed after
``V`` and makes a writer that read "open" before the close lose its commit),
and only then committed as ``closed`` with the checksum. A fence that fails leaves the bucket ``closing``; the
next run checks it again.

Two completionists at once are safe: each ``buckets`` commit carries the app transaction ``completionist`` →
(``buckets`` version read + 1), the allocator's consensus; the loser's run commits nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakeshard.buckets.checksum import CHECKSUM_KINDS, ROWHASH2, BucketCheck, check_buckets, checksum_kind
from lakeshard.buckets.errors import BucketsError
from lakeshard.buckets.planner import Backlog, Bucket, BucketDecision, BucketObservation, plan_closures
from lakeshard.config import LakeshardConfig
from lakeshard.errors import CommitConflict
from lakeshard.lake import AppTransaction, FileInfo, TableStore
from lakeshard.tables import (
    BUCKETS,
    BUCKETS_SCHEMA,
    COMPLETIONIST_APP_ID,
    EVENTS,
    LANDING_BATCHES,
    ROUTED,
    USER_TABLE_SHAPES,
    hour_of,
    writer_app_id,
)
from lakeshard.utc import as_utc, aware
from lakeshard.versions import rows_in

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakeshard.landing import LandingFile

__all__ = [
    "BUCKETS",
    "BUCKETS_SCHEMA",
    "COMPLETIONIST_APP_ID",
    "BucketCheck",
    "BucketState",
    "BucketsError",
    "CompletionReport",
    "Completionist",
    "check_buckets",
    "closed_table",
    "ensure_buckets",
]

_RANK = {"open": 0, "closing": 1, "closed": 2}  # a bucket's rows: the furthest state is its state
_FENCE_ATTEMPTS = 3  # checks of the closing buckets per run, each at a newer events version


@dataclass(frozen=True)
class BucketState:
    """A bucket's current row in ``buckets``: open, or closed with its counts and checksum."""

    tenant_id: str
    hour: str
    state: str
    decided_at: datetime
    reason: str
    rows: int | None = None
    distinct_keys: int | None = None
    checksum: str | None = None
    newest_file_at: datetime | None = None
    events_version: int | None = None


@dataclass(frozen=True)
class CompletionReport:
    """One completionist run: every open bucket's decision, the buckets closed, checks that failed."""

    now: datetime
    backlog: Backlog
    decisions: list[BucketDecision]
    closed: list[BucketState]
    failed_checks: list[BucketCheck] = field(default_factory=list)
    committed_version: int | None = None  # the buckets version written, None for a dry run or a lost race


def ensure_buckets(store: TableStore, buckets_uri: str) -> None:
    """Create the ``buckets`` table at ``buckets_uri`` if missing."""
    shape = USER_TABLE_SHAPES[BUCKETS]
    store.create(buckets_uri, shape.schema, description=shape.description)


def closed_table(store: TableStore, buckets_uri: str) -> pa.Table:
    """Return the ``tenant_id`` and ``hour`` of the closed buckets of the ``buckets`` table at ``buckets_uri``, one
    row each, as Arrow, read in this process (no Spark): no Python object per bucket ever closed (a bucket with a
    closing or closed row is in its furthest state)."""
    import pyarrow.compute as pc

    rows = store.read_table_arrow(buckets_uri, ["tenant_id", "hour", "state"])
    rows = rows.filter(pc.is_in(rows.column("state"), pa.array(["closing", "closed"])))
    return rows.group_by(["tenant_id", "hour"], use_threads=False).aggregate([])


class Completionist:
    """Decides which ``(tenant, hour)`` buckets of ``events`` are complete and closes them, exactly once.

    Args:
        spark, store, cfg: the session, the lakehouse's TableStore and the configuration (lakehouse, landing).
        quiet: how long a bucket must go without a new file before it may close.
        grace: how far past the hour's end the backlog watermark must be.
        clock: the time source (UTC); tests and simulations move it.
        checksum: the checksum kind new closures record (:mod:`lakeshard.buckets.checksum`); closed buckets
            are verified by the kind they recorded, whatever this is.

    Example::

        c = Completionist(spark, store, cfg, quiet=timedelta(minutes=10), grace=timedelta(minutes=15))
        report = c.run()                               # closes what is complete; report.decisions says why
        c.closed_buckets(since=datetime(2026, 1, 1, tzinfo=UTC))   # what hourly jobs may read
    """

    def __init__(
        self,
        spark: SparkSession,
        store: TableStore,
        cfg: LakeshardConfig,
        *,
        quiet: timedelta = timedelta(minutes=10),
        grace: timedelta = timedelta(minutes=15),
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        before_commit: Callable[[str], None] | None = None,
        checksum: str = ROWHASH2,
    ) -> None:
        if quiet < timedelta(0) or grace < timedelta(0):
            raise BucketsError(f"quiet period and grace must not be negative, found {quiet} and {grace}")
        if checksum not in CHECKSUM_KINDS:
            raise BucketsError(f"unknown checksum kind {checksum!r}; known: {', '.join(CHECKSUM_KINDS)}")
        self.spark = spark
        self.store = store
        self.cfg = cfg
        self.quiet = quiet
        self.grace = grace
        self._clock = clock
        self.checksum_kind = checksum
        # Called with "fence" right before the closing fence is committed (tests interleave writers there).
        self._before_commit = before_commit or (lambda step: None)
        self.uri = cfg.table_uri(BUCKETS)
        self.events_uri = cfg.table_uri(EVENTS)
        self.routed_uri = cfg.table_uri(ROUTED)
        self.batches_uri = cfg.table_uri(LANDING_BATCHES)

    def ensure_table(self) -> None:
        """Create ``buckets`` if missing."""
        ensure_buckets(self.store, self.uri)

    # ------------------------------------------------------------------------------------- state
    def states(self, version: int | None = None) -> dict[Bucket, BucketState]:
        """Return each known bucket's current state (a closed row wins over a closing one, which wins over open)."""
        self.ensure_table()
        # Read in this process: the table holds a few small rows per bucket, and the writers ask on every
        # change of it (a Spark job's fixed cost would dwarf the read).
        cols = ["tenant_id", "hour", "state", "decided_at", "reason", "rows", "distinct_keys", "checksum",
                "newest_file_at", "events_version"]
        out: dict[Bucket, BucketState] = {}
        for r in self.store.read_table_arrow(self.uri, cols, version=version).to_pylist():
            s = _state_from_row(r)
            key = (s.tenant_id, s.hour)
            if key not in out or _RANK.get(s.state, 0) > _RANK.get(out[key].state, 0):
                out[key] = s
        return out

    def closed(self) -> set[Bucket]:
        """Return the ``(tenant_id, hour)`` buckets writers must not write into: closed or closing (what
        :func:`~lakeshard.buckets.assign_buckets` takes)."""
        return _keys(self.closed_table())

    def closed_table(self) -> pa.Table:
        """Return the ``tenant_id`` and ``hour`` of the buckets :meth:`closed` gives (:func:`closed_table`)."""
        self.ensure_table()
        return closed_table(self.store, self.uri)

    def closed_buckets(self, since: datetime | None = None) -> list[BucketState]:
        """Return the buckets closed at or after ``since`` (all when None), in closing order.

        This is what a downstream hourly job polls: every bucket listed is complete and will never change.
        """
        since = None if since is None else (aware(since))
        done = [s for s in self.states().values() if s.state == "closed" and (since is None or s.decided_at >= since)]
        return sorted(done, key=lambda s: (s.decided_at, s.hour, s.tenant_id))

    def _not_closed(self, version: int, buckets: Sequence[BucketObservation]
                    ) -> tuple[list[BucketObservation], set[Bucket]]:
        """Return those of ``buckets`` not closed at ``buckets`` version ``version``, and which of them have a row
        there already.

        Buckets close by the thousand a day and never reopen: the table's rows meet the observations in Arrow
        joins, so only buckets still open become Python objects however old the lakehouse is.
        """
        import pyarrow.compute as pc

        if not buckets:
            return [], set()
        rows = self.store.read_table_arrow(self.uri, ["tenant_id", "hour", "state"], version=version)
        keys = ["tenant_id", "hour"]
        closed = rows.filter(pc.equal(rows.column("state"), "closed")).group_by(keys, use_threads=False).aggregate([])
        seen = pa.table({"tenant_id": pa.array([b.tenant_id for b in buckets], rows.schema.field("tenant_id").type),
                         "hour": pa.array([b.hour for b in buckets], rows.schema.field("hour").type),
                         "i": pa.array(range(len(buckets)), pa.int64())})
        still_open = seen.join(closed, keys, join_type="left anti", use_threads=False)
        recorded = still_open.join(rows.group_by(keys, use_threads=False).aggregate([]), keys, join_type="left semi",
                                    use_threads=False)
        return ([buckets[i] for i in sorted(still_open.column("i").to_pylist())], _keys(recorded))

    # ---------------------------------------------------------------------------------- observe
    def observe(self) -> tuple[int, list[BucketObservation], dict[Bucket, list[FileInfo]]]:
        """Return the ``events`` version read, each bucket's observation, and each bucket's live files."""
        if not self.store.exists(self.events_uri):
            return -1, [], {}
        version = self.store.version(self.events_uri)
        files: dict[Bucket, list[FileInfo]] = {}
        for f in self.store.files(self.events_uri, version=version):
            t, h = f.partition_values.get("tenant_id"), f.partition_values.get("hour")
            if t is None or h is None:
                raise BucketsError(f"{self.events_uri}: file {f.path} has no tenant_id/hour partition values")
            files.setdefault((t, h), []).append(f)
        seen = [BucketObservation(t, h, max(f.modification_time for f in fs), rows_in(fs))
                for (t, h), fs in files.items()]
        return version, seen, files

    def backlog(self) -> Backlog:
        """Return the watermark (oldest unconsumed landing input) and the buckets with events still in flight."""
        now = self._clock()
        unconsumed = self._unconsumed_landing()
        in_flight = self._landing_buckets(unconsumed) | self._writer_lag_buckets()
        if not unconsumed:
            return Backlog(now, frozenset(in_flight))
        oldest = min(unconsumed, key=lambda f: f.mtime)
        return Backlog(min(oldest.mtime, now), frozenset(in_flight), oldest.path)

    def _unconsumed_landing(self) -> list[LandingFile]:
        """Return the landing bytes not routed yet: files never planned, planned in a batch ``routed`` lacks, grown
        since, or with a tail still being written (each as the range not routed)."""
        import os

        from lakeshard.routing import unrouted_landing

        landing = self.cfg.landing
        if "://" not in landing and not os.path.exists(landing):
            return []
        return unrouted_landing(self.store, self.cfg, landing)

    def _landing_buckets(self, files: Sequence[LandingFile]) -> set[Bucket]:
        """Return the buckets the unconsumed landing files hold events of (they are parsed: we can look)."""
        from lakeshard.buckets.late import event_hour
        from lakeshard.landing import parse_landing_arrow, read_landing

        if not files:
            return set()
        now_ms = int(self._clock().timestamp() * 1000)
        if self._in_driver(sum(f.read_bytes for f in files)):
            events, _ = parse_landing_arrow(list(files), limits=self.cfg.landing_format, now_ms=now_ms)
            return _buckets_of(events)
        with read_landing(self.spark, list(files), limits=self.cfg.landing_format, now_ms=now_ms) as landed:
            rows = landed.events.select("tenant_id", event_hour().alias("hour")).distinct().collect()
        return {(str(r["tenant_id"]), str(r["hour"])) for r in rows}

    def _in_driver(self, size: int) -> bool:
        """Return whether a look at ``size`` bytes reads in this process (the router's driver-path bound)."""
        limit = self.cfg.routing.arrow_max_bytes
        return limit > 0 and size <= limit

    def _writer_lag_buckets(self) -> set[Bucket]:
        """Return the buckets of routed rows that no shard writer has committed to ``events`` yet."""
        from lakeshard.buckets.late import event_hour

        if not self.store.exists(self.routed_uri):
            return set()
        latest = self.store.version(self.routed_uri)
        live = self.store.files(self.routed_uri, version=latest)
        shards = sorted({int(s) for f in live if (s := f.partition_values.get("shard")) is not None})
        done: dict[int, int] = dict.fromkeys(shards, 0)
        if self.store.exists(self.events_uri):
            committed = self.store.transaction_versions(self.events_uri, [writer_app_id(s) for s in shards])
            done = {s: committed[writer_app_id(s)] or 0 for s in shards}
        # A file is pending for its shard's writer when a routed commit after the writer's progress added it:
        # one read of the log since the slowest writer, not one snapshot per shard.
        lagging = [v for v in done.values() if 0 < v < latest]
        added = self.store.added_since(self.routed_uri, min(lagging), latest) if lagging else {}
        pending: list[FileInfo] = []
        for f in live:
            shard = f.partition_values.get("shard")
            progress = done.get(int(shard), 0) if shard is not None else 0
            if progress == 0 or (progress < latest and added.get(f.path, 0) > progress):
                pending.append(f)
        if not pending:
            return set()
        if self._in_driver(sum(f.size_bytes for f in pending)):
            return _buckets_of(self.store.read_arrow(self.routed_uri, pending, ["tenant_id", "ts"]))
        rows = self.store.read_files(self.routed_uri, pending).select("tenant_id", event_hour().alias("hour"))
        return {(str(r["tenant_id"]), str(r["hour"])) for r in rows.distinct().collect()}

    # -------------------------------------------------------------------------------------- run
    def run(self, *, apply: bool = True) -> CompletionReport:
        """Return the report of one pass: decide every open bucket; with ``apply``, commit the closures."""
        self.ensure_table()
        read_version = self.store.version(self.uri)
        backlog = self.backlog()
        version, seen, files = self.observe()
        seen, known = self._not_closed(read_version, seen)
        now = self._clock()
        decisions = plan_closures(seen, backlog, (), now=now, quiet=self.quiet, grace=self.grace)
        closing = [d for d in decisions if d.close]
        checks = check_buckets(self.store, self.events_uri,
                               {(d.tenant_id, d.hour): files[(d.tenant_id, d.hour)] for d in closing},
                               self.checksum_kind)
        newest = {(b.tenant_id, b.hour): b.newest_file_at for b in seen}
        failed = [c for c in checks.values() if c.problem]
        new_states = []
        for d in decisions:
            key = (d.tenant_id, d.hour)
            check = checks.get(key)
            if d.close and check is not None and not check.problem:
                new_states.append(BucketState(d.tenant_id, d.hour, "closed", now, d.reason, check.rows,
                                              check.distinct_keys, check.checksum, newest[key], version))
            elif key not in known:
                failed_check = check is not None and check.problem
                reason = f"integrity check failed: {check.problem}" if check is not None and failed_check else d.reason
                new_states.append(BucketState(d.tenant_id, d.hour, "open", now, reason, newest_file_at=newest[key]))
        closed_now = [s for s in new_states if s.state == "closed"]
        if not apply or not new_states:
            return CompletionReport(now, backlog, decisions, closed_now if apply else [], failed)
        if closed_now:  # a close that could not be fenced would be unordered against the writers: refuse first
            self.store.check_fence(self.events_uri)
        # First "closing" (writers stop writing into these buckets), then the check and fence, then "closed".
        marked = [dataclasses.replace(s, state="closing", rows=None, distinct_keys=None, checksum=None,
                                      events_version=None) if s.state == "closed" else s for s in new_states]
        committed = self._commit(marked, read_version)
        if committed is None or not closed_now:
            return CompletionReport(now, backlog, decisions, [], failed, committed)
        closed_now, version_closed, refused = self._close(closed_now, committed, files, checks)
        return CompletionReport(now, backlog, decisions, closed_now, failed + refused,
                                committed if version_closed is None else version_closed)

    def _close(self, closing: Sequence[BucketState], buckets_version: int,
               files_checked: Mapping[Bucket, Sequence[FileInfo]], checks_done: Mapping[Bucket, BucketCheck]
               ) -> tuple[list[BucketState], int | None, list[BucketCheck]]:
        """Return the buckets closed (checked at a fresh ``events`` version, fenced, committed as closed), the
        ``buckets`` version that closed them (None: none closed) and the checks that failed.

        The fence is prepared at the newest ``events`` version whose commits since the check changed none of
        the checked buckets (writers keep committing to other buckets meanwhile: their commits only move the
        fence's read version). A commit that changed a checked bucket makes the check stale: it is done again,
        a few times per run; buckets still not closed stay ``closing`` for the next run. A bucket whose live
        files are the ones ``checks_done`` read (``files_checked``) keeps that check: data files never change.
        """
        from lakeshard.buckets.fence import fence_writers

        known = {b: (_paths(fs), checks_done[b]) for b, fs in files_checked.items() if b in checks_done}
        for _ in range(_FENCE_ATTEMPTS):
            checked, _, files = self.observe()
            now_files = {(s.tenant_id, s.hour): files.get((s.tenant_id, s.hour), []) for s in closing}
            stale = {b: fs for b, fs in now_files.items() if b not in known or known[b][0] != _paths(fs)}
            checks = {b: known[b][1] for b in now_files if b not in stale}
            checks.update(check_buckets(self.store, self.events_uri, stale, self.checksum_kind))
            known.update((b, (_paths(now_files[b]), checks[b])) for b in stale)
            refused = [c for c in checks.values() if c.problem]
            good = [dataclasses.replace(s, rows=c.rows, distinct_keys=c.distinct_keys, checksum=c.checksum,
                                        events_version=checked)
                    for s in closing if not (c := checks[(s.tenant_id, s.hour)]).problem]
            if not good:
                return [], None, refused
            buckets = {(s.tenant_id, s.hour) for s in good}
            for _ in range(_FENCE_ATTEMPTS * 4):
                latest = self.store.version(self.events_uri)
                if self._changed_since(checked, latest, buckets):
                    break  # a writer committed into a checked bucket: check again
                self._before_commit("fence")
                fenced = fence_writers(self.store, self.events_uri, self._writer_shards(), read_version=latest,
                                       fence_version=buckets_version,
                                       closing=[f"{s.tenant_id}/{s.hour}" for s in good])
                if fenced is not None:
                    committed = self._commit(good, buckets_version)
                    return (good, committed, refused) if committed is not None else ([], None, refused)
        return [], None, []

    def _changed_since(self, checked: int, latest: int, buckets: set[Bucket]) -> bool:
        """Return whether a commit after ``checked`` up to ``latest`` changed the rows of one of ``buckets``
        (a data-changing add or remove in its partition; compaction's rewrites keep the rows)."""
        if latest <= checked:
            return False
        for entry in self.store.log_entries(self.events_uri, start=checked + 1, end=latest):
            for change in entry.changes:
                values = change.file.partition_values
                where = (values.get("tenant_id"), values.get("hour"))
                if change.data_change and (where in buckets or (change.action == "remove" and None in where)):
                    return True
        return False

    def _writer_shards(self) -> set[int]:
        """Return every shard a writer may commit to ``events`` for: the configured ones and any routed to."""
        shards = set(range(self.cfg.routing.total_shards))
        if self.store.exists(self.routed_uri):
            shards |= {int(s) for f in self.store.files(self.routed_uri)
                       if (s := f.partition_values.get("shard")) is not None}
        return shards

    def _commit(self, states: Iterable[BucketState], read_version: int) -> int | None:
        """Commit ``states`` as rows of the buckets table, written by pyarrow in this process (a few hundred
        small rows an hour: a Spark job to write them cost seconds)."""
        states = list(states)
        rows = pa.Table.from_pylist([{f.name: getattr(s, f.name) for f in BUCKETS_SCHEMA.fields} for s in states],
                                    schema=self.store.arrow_schema(self.uri))
        try:
            result = self.store.append_arrow(
                self.uri, rows, app_transactions=[AppTransaction(COMPLETIONIST_APP_ID, read_version + 1)],
                metadata={"closed": sum(1 for s in states if s.state == "closed")}, read_version=read_version)
        except CommitConflict:
            return None  # another completionist committed first; the next run decides again
        return None if result.skipped else result.version

    def verify(self) -> list[tuple[BucketState, BucketCheck]]:
        """Return the closed buckets whose rows differ now from when they closed (empty when all are intact)."""
        states = [s for s in self.states().values() if s.state == "closed"]
        _, _, files = self.observe()
        checks: dict[Bucket, BucketCheck] = {}
        for kind in {checksum_kind(s.checksum) for s in states}:  # each bucket by the formula it closed with
            checks |= check_buckets(self.store, self.events_uri,
                                    {(s.tenant_id, s.hour): files.get((s.tenant_id, s.hour), [])
                                     for s in states if checksum_kind(s.checksum) == kind}, kind)
        now = [(s, checks[(s.tenant_id, s.hour)]) for s in states]
        return [(s, c) for s, c in now if (c.checksum, c.rows) != (s.checksum, s.rows)]


def _buckets_of(rows: pa.Table) -> set[Bucket]:
    """Return the distinct ``(tenant_id, UTC hour of ts)`` buckets of Arrow rows with those two columns."""
    import pyarrow.compute as pc

    hours = pc.floor_temporal(rows.column("ts"), unit="hour")
    pairs = (pa.table({"tenant_id": rows.column("tenant_id"), "hour": hours})
             .group_by(["tenant_id", "hour"], use_threads=False).aggregate([]))
    return {(str(t), hour_of(h)) for t, h in zip(pairs.column("tenant_id").to_pylist(),
                                                  pairs.column("hour").to_pylist(), strict=True)}


def _keys(rows: pa.Table) -> set[Bucket]:
    """Return the ``(tenant_id, hour)`` pairs of Arrow rows with those two columns."""
    return set(zip(rows.column("tenant_id").to_pylist(), rows.column("hour").to_pylist(), strict=True))


def _paths(files: Sequence[FileInfo]) -> frozenset[str]:
    return frozenset(f.path for f in files)


def _state_from_row(r: Mapping[str, Any]) -> BucketState:
    return BucketState(
        str(r["tenant_id"]), str(r["hour"]), str(r["state"]), as_utc(r["decided_at"]), str(r["reason"]),
        None if r["rows"] is None else int(r["rows"]),
        None if r["distinct_keys"] is None else int(r["distinct_keys"]),
        None if r["checksum"] is None else str(r["checksum"]),
        None if r["newest_file_at"] is None else as_utc(r["newest_file_at"]),
        None if r["events_version"] is None else int(r["events_version"]),
    )


