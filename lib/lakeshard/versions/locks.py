"""The replace lock (Druid): one exclusive, leased lock per time chunk, held in the lakehouse.

Only replacements take it — compaction (a replacement from the chunk's own rows) and replacing a chunk
from external data, including replacing it with nothing. Appends never look at it, so ingestion goes on
while a chunk is being compacted; the Delta commit of the replacement carries the appends forward.

How consensus is reached (the allocator's pattern, docs/design.md §1): the lock's state is the newest row of
the chunk in the ``chunk_locks`` Delta table. Every change of it — acquire, renew, release — commits one
row carrying the app transaction ``lock/<hour>/<tenant>`` → the chunk's next *generation*, prepared
against the table version the state was read at. Two processes that read the same state and both try
to change it carry the same app id, so Delta lets exactly one commit; the other re-reads and finds the
winner holding the lock, and fails fast with :class:`ChunkLocked` naming the holder and the expiry.

A holder that dies keeps the lock only until its lease expires; then anyone may take it over (the next
generation). A holder that merely *stalled* past its lease must not overwrite its successor's work, so
every replacement commit carries a fencing token — the app transaction ``replace/<hour>/<tenant>`` →
(generation, sequence) — on the data table: tokens only grow, and Delta refuses a commit whose token is
not newer than the last committed one.
"""

from __future__ import annotations

import bisect
import os
import socket
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from lakeshard.errors import CommitConflict, LakeshardError
from lakeshard.lake import AppTransaction, FileInfo, TableStore
from lakeshard.tables import CHUNK_LOCKS, CHUNK_LOCKS_SCHEMA
from lakeshard.tables import lock_app_id as _lock_app_id
from lakeshard.tables import replace_app_id as _replace_app_id
from lakeshard.utc import as_utc, from_micros
from lakeshard.versions.chunks import Chunk
from lakeshard.versions.errors import VersionsError

if TYPE_CHECKING:
    from pyspark.sql import Row

__all__ = [
    "CHUNK_LOCKS",
    "CHUNK_LOCKS_SCHEMA",
    "ChunkLease",
    "ChunkLocked",
    "ChunkLocks",
    "LockLost",
    "LockState",
    "lock_app_id",
    "replace_app_id",
]

# A fencing token is generation * _SEQ + sequence: up to _SEQ replacement commits per lease generation.
_SEQ = 1 << 20
_ATTEMPTS = 3
_STATE_COLUMNS = ("tenant_id", "hour", "generation", "holder", "state", "unix_micros(acquired_at) AS acquired_us",
                  "unix_micros(expires_at) AS expires_us")


def lock_app_id(chunk: Chunk) -> str:
    """Return the app transaction id whose version is the chunk lock's generation (hour first: it has no ``/``)."""
    return _lock_app_id(chunk.hour, chunk.tenant_id)


def replace_app_id(chunk: Chunk) -> str:
    """Return the app transaction id of the fencing token replacement commits carry on the data table."""
    return _replace_app_id(chunk.hour, chunk.tenant_id)


class ChunkLocked(VersionsError):
    """Another holder has the chunk's replace lock; the message names it and when its lease expires."""

    def __init__(self, chunk: Chunk, state: LockState) -> None:
        self.chunk = chunk
        self.state = state
        super().__init__(
            f"chunk {chunk} is locked for replacement by {state.holder} (generation {state.generation}, since "
            f"{state.acquired_at:%Y-%m-%dT%H:%M:%SZ}) until its lease expires at {state.expires_at:%Y-%m-%dT%H:%M:%SZ}"
        )


class LockLost(VersionsError):
    """The caller's lease expired, or another holder took the chunk over; its replacement must not commit."""


@dataclass(frozen=True)
class LockState:
    """The newest row of a chunk in ``chunk_locks``: who holds (or last held) the lock, and until when."""

    chunk: Chunk
    generation: int
    holder: str
    state: str
    acquired_at: datetime
    expires_at: datetime

    def blocks(self, holder: str, now: datetime) -> bool:
        """Return whether this state keeps ``holder`` from taking the lock at ``now``."""
        return self.state == "held" and self.expires_at > now and self.holder != holder


class ChunkLease:
    """A held replace lock: the chunk, the holder, the generation and the lease's expiry.

    :meth:`fence` gives the app transaction a replacement commit must carry on the data table.
    """

    def __init__(self, state: LockState, clock: Callable[[], datetime]) -> None:
        self.state = state
        self._clock = clock
        self._sequence = 0

    @property
    def chunk(self) -> Chunk:
        """Return the locked chunk."""
        return self.state.chunk

    @property
    def expires_at(self) -> datetime:
        """Return when the lease runs out unless renewed."""
        return self.state.expires_at

    def fence(self) -> AppTransaction:
        """Return the next fencing token for a replacement commit, checking the lease has not run out.

        Raises:
            LockLost: the lease expired (another holder may own the chunk now).
        """
        now = self._clock()
        if now >= self.state.expires_at:
            raise LockLost(f"lease on chunk {self.chunk} held by {self.state.holder} expired at "
                           f"{self.state.expires_at:%Y-%m-%dT%H:%M:%SZ} (now {now:%Y-%m-%dT%H:%M:%SZ}); renew sooner")
        self._sequence += 1
        if self._sequence >= _SEQ:
            raise LockLost(f"lease on chunk {self.chunk}: more than {_SEQ - 1} replacements in one generation; renew")
        return AppTransaction(replace_app_id(self.chunk), self.state.generation * _SEQ + self._sequence)


class ChunkLocks:
    """Exclusive, leased replace locks per ``(tenant_id, hour)``, kept in the ``chunk_locks`` Delta table.

    Args:
        store: the lakehouse's TableStore.
        table: the ``chunk_locks`` table's URI.
        holder: who this process is (shown to anyone it blocks); default ``host:pid:random``.
        lease: how long a lock lasts without renewal; a crashed holder blocks the chunk at most this long.
        clock: the time source (UTC); tests move it.

    Example::

        locks = ChunkLocks(store, cfg.table_uri("chunk_locks"), lease=timedelta(minutes=10))
        with locks.lock("acme", "2026-01-01T10") as lease:    # raises ChunkLocked if someone else has it
            replace_chunk(store, events_uri, lease.chunk, compacted_df, lease=lease, read_version=v)

    ``locks.lock`` is the ``(tenant_id, hour) -> ContextManager`` factory compaction takes.
    """

    def __init__(
        self,
        store: TableStore,
        table: str,
        *,
        holder: str | None = None,
        lease: timedelta = timedelta(minutes=10),
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if lease <= timedelta(0):
            raise LakeshardError(f"a lock lease must be positive, found {lease}")
        self.store = store
        self.table = table
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.lease = lease
        self._clock = clock
        self._ready = False

    def ensure_table(self) -> None:
        """Create ``chunk_locks`` if missing."""
        if not self._ready:
            self.store.create(self.table, CHUNK_LOCKS_SCHEMA,
                              description="replace locks per (tenant, hour) chunk; newest row per chunk wins")
            self._ready = True

    @contextmanager
    def lock(self, tenant_id: str, hour: str) -> Iterator[ChunkLease]:
        """Hold the chunk's replace lock for the ``with`` block; release it afterwards, even on error."""
        lease = self.acquire(Chunk(tenant_id, hour))
        try:
            yield lease
        finally:
            self.release(lease)

    @contextmanager
    def lock_all(self, chunks: Iterable[Chunk]) -> Iterator[list[ChunkLease]]:
        """Hold the replace locks of all ``chunks`` for the ``with`` block (taken and released in one commit each).

        Raises:
            ChunkLocked: another holder's lease is live on one of them (none is taken then).
        """
        leases = self.acquire_all(chunks)
        try:
            yield leases
        finally:
            self.release_all(leases)

    @contextmanager
    def fenced(self, buckets: Iterable[tuple[str, str]]) -> Iterator[list[AppTransaction]]:
        """Hold the locks of ``(tenant_id, hour)`` buckets and yield one fencing token per bucket.

        This is the ``chunk_lock`` a :class:`~lakeshard.compaction.Compactor` takes: the tokens ride on its
        swap commit, so a compactor that stalled past its lease cannot overwrite its successor's work.
        """
        with self.lock_all(Chunk(t, h) for t, h in buckets) as leases:
            yield [lease.fence() for lease in leases]

    def state(self, chunk: Chunk, *, version: int | None = None) -> LockState | None:
        """Return the chunk's lock state at ``version`` (default latest), or None if never locked."""
        return self.states([chunk], version=version).get(chunk)

    def states(self, chunks: Iterable[Chunk], *, version: int | None = None) -> dict[Chunk, LockState]:
        """Return the lock state of each of ``chunks`` ever locked, at ``version`` (default latest), in one read."""
        import pyarrow as pa

        wanted = set(chunks)
        if not wanted:
            return {}
        self.ensure_table()
        # The table gains a file per lock change set for as long as the lakehouse lives, while the chunks asked
        # about are few and recent: only files whose hour statistics reach a wanted hour are read, in this
        # process (a Spark job's fixed cost would dwarf those rows).
        hours = sorted({c.hour for c in wanted})
        files = [f for f in self.store.files(self.table, version=version) if _may_hold(f, hours)]
        if not files:
            return {}
        rows = self.store.read_arrow(self.table, files, ["tenant_id", "hour", "generation", "holder", "state",
                                                         "acquired_at", "expires_at"])
        keys = pa.table({"tenant_id": pa.array([c.tenant_id for c in wanted], rows.schema.field("tenant_id").type),
                         "hour": pa.array([c.hour for c in wanted], rows.schema.field("hour").type)})
        out: dict[Chunk, LockState] = {}
        for r in rows.join(keys, ["tenant_id", "hour"], join_type="left semi", use_threads=False).to_pylist():
            chunk = Chunk(str(r["tenant_id"]), str(r["hour"]))
            if chunk not in out or int(r["generation"]) > out[chunk].generation:
                out[chunk] = LockState(chunk, int(r["generation"]), str(r["holder"]), str(r["state"]),
                                       as_utc(r["acquired_at"]), as_utc(r["expires_at"]))
        return out

    def held(self) -> list[LockState]:
        """Return every chunk lock held now (lease not expired), oldest first."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        self.ensure_table()
        newest = Window.partitionBy("tenant_id", "hour").orderBy(F.col("generation").desc())
        rows = (self.store.read(self.table).withColumn("_n", F.row_number().over(newest)).where("_n = 1")
                .where(F.col("state") == "held").selectExpr(*_STATE_COLUMNS).collect())
        now = self._clock()
        states = [_state_from_row(r) for r in rows]
        return sorted((s for s in states if s.expires_at > now), key=lambda s: s.acquired_at)

    def acquire(self, chunk: Chunk) -> ChunkLease:
        """Return a lease on the chunk's replace lock, taking it over if the last holder's lease expired.

        Raises:
            ChunkLocked: another holder's lease is live (fails at once; nothing waits).
        """
        return self.acquire_all([chunk])[0]

    def acquire_all(self, chunks: Iterable[Chunk]) -> list[ChunkLease]:
        """Return leases on all ``chunks`` (in sorted order), taken together in one commit or not at all.

        Raises:
            ChunkLocked: another holder's lease is live on one of them (fails at once; nothing waits).
        """
        wanted = sorted(set(chunks), key=lambda c: (c.tenant_id, c.hour))
        if not wanted:
            return []
        self.ensure_table()
        for _ in range(_ATTEMPTS):
            version = self.store.version(self.table)
            current = self.states(wanted, version=version)
            now = self._clock()
            for chunk in wanted:
                state = current.get(chunk)
                if state is not None and state.blocks(self.holder, now):
                    raise ChunkLocked(chunk, state)
            new = [LockState(c, (current[c].generation if c in current else 0) + 1, self.holder, "held", now,
                             now + self.lease) for c in wanted]
            if self._commit(new, version):
                return [ChunkLease(s, self._clock) for s in new]
        # Every attempt lost a race: someone holds one now (or keeps changing them); report who.
        now = self._clock()
        for chunk, state in sorted(self.states(wanted).items(), key=lambda kv: (kv[0].tenant_id, kv[0].hour)):
            if state.blocks(self.holder, now):
                raise ChunkLocked(chunk, state)
        what = f"chunk {wanted[0]}" if len(wanted) == 1 else f"{len(wanted)} chunks (first {wanted[0]})"
        raise LockLost(f"could not take the lock on {what}: {_ATTEMPTS} concurrent changes in a row")

    def renew(self, lease: ChunkLease) -> ChunkLease:
        """Return a fresh lease (new generation, new expiry) on a lock this holder still owns.

        Raises:
            LockLost: the lease expired and someone else took the chunk, or the lock was released.
        """
        version, current = self._owned(lease, "renew")
        now = self._clock()
        new = LockState(lease.chunk, current.generation + 1, self.holder, "held", current.acquired_at,
                        now + self.lease)
        if not self._commit([new], version):
            raise LockLost(f"lock on chunk {lease.chunk} changed while renewing it")
        return ChunkLease(new, self._clock)

    def release(self, lease: ChunkLease) -> bool:
        """Release the lock; return False when there was nothing to release (another holder took it over)."""
        return self.release_all([lease]) == 1

    def release_all(self, leases: Sequence[ChunkLease]) -> int:
        """Release the locks of ``leases`` this holder still owns, in one commit; return how many it released."""
        if not leases:
            return 0
        version = self.store.version(self.table)
        current = self.states([lease.chunk for lease in leases], version=version)
        done = []
        for lease in leases:
            now = current.get(lease.chunk)
            if now is not None and now.generation == lease.state.generation and now.holder == self.holder:
                done.append(LockState(lease.chunk, now.generation + 1, self.holder, "released", now.acquired_at,
                                      self._clock()))
        # A lost race means another holder changed one of these chunks: it took over an expired lease.
        return len(done) if done and self._commit(done, version) else 0

    def _owned(self, lease: ChunkLease, doing: str) -> tuple[int, LockState]:
        version = self.store.version(self.table)
        current = self.state(lease.chunk, version=version)
        if current is None or current.generation != lease.state.generation or current.holder != self.holder:
            who = ("nobody" if current is None
                   else f"{current.holder} (generation {current.generation}, {current.state})")
            raise LockLost(f"cannot {doing} the lock on chunk {lease.chunk}: generation {lease.state.generation} "
                           f"of {self.holder} is no longer current; now {who}")
        return version, current

    def _commit(self, states: Sequence[LockState], read_version: int) -> bool:
        """Commit ``states`` as their chunks' next generations; return False when a concurrent change won."""
        recorded = self._clock()
        rows = [(s.chunk.tenant_id, s.chunk.hour, s.generation, s.holder, s.state, s.acquired_at, s.expires_at,
                 recorded) for s in states]
        df = self.store.spark.createDataFrame(rows, CHUNK_LOCKS_SCHEMA).coalesce(1)
        what = str(states[0].chunk) if len(states) == 1 else f"{len(states)} chunks"
        try:
            result = self.store.append(
                self.table, df,
                app_transactions=[AppTransaction(lock_app_id(s.chunk), s.generation) for s in states],
                metadata={"chunk": what, "state": states[0].state, "holder": self.holder},
                read_version=read_version,
            )
        except CommitConflict:
            return False
        return not result.skipped


def _may_hold(file: FileInfo, hours: Sequence[str]) -> bool:
    """Return whether a ``chunk_locks`` file may hold a row of one of ``hours`` (sorted), by its statistics."""
    low, high = file.min_values.get("hour"), file.max_values.get("hour")
    if not isinstance(low, str) or not isinstance(high, str):
        return True
    i = bisect.bisect_left(hours, low)
    return i < len(hours) and hours[i] <= high




def _state_from_row(r: Row) -> LockState:
    # Timestamps travel as epoch microseconds: collect() would turn them into naive local times.
    return LockState(Chunk(str(r["tenant_id"]), str(r["hour"])), int(r["generation"]), str(r["holder"]),
                     str(r["state"]), from_micros(int(r["acquired_us"])), from_micros(int(r["expires_us"])))
