"""The writers' side of the fused hand-off: a routed batch taken in memory and committed to ``events`` once.

When the router and the writers share a process, a batch planned as ``fused`` (docs/decisions.md, record 19) is not
written to ``routed``: :class:`FusedWriter` takes its routed rows as an Arrow table and runs the driver-side writer
step on them (:class:`~lakeshard.dedupe.engines.ArrowStep`, every shard at once). The protocol:

* Routed batches are drained first: the shard writers consume every unconsumed ``routed`` commit before the fused
  batch's index check, so no ``writer/<shard>`` commit can add IDs the check did not see.
* One app transaction per table: ``events`` is committed with ``fused`` → the batch (against the ``events`` version
  read before the check: a process that committed the batch first wins), then ``event_ids`` with the same; rows
  carry ``routed_version = -batch``, which the ``writer/<shard>`` repair never selects.
* A batch whose ``events`` commit is in but whose IDs are not (a crash between the two) is completed by rebuilding
  its IDs from its rows in ``events`` (:meth:`~lakeshard.dedupe.index.IdIndex.repair_fused`), as a lagging
  ``writer/<shard>`` is: neither a landing file rewritten meanwhile nor the expectation gate can change the answer.
* A shard's damaged ID file met by the batch's index check (:class:`~lakeshard.errors.DamagedDataFile`, before any
  commit of the batch) hands the batch back: the router commits it to ``routed`` with ``router`` → the batch, and
  the shard writers commit every shard but that one, which stays stopped with its rows waiting in ``routed``. A
  replay finds ``routed`` at the batch and takes that path again, so a batch is delivered one way only.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING

from lakeshard.config import LakeshardConfig
from lakeshard.dedupe.deadletters import dead_letter_arrow, letters_transactions, newly_unwritable
from lakeshard.dedupe.engines import Gate, Step
from lakeshard.dedupe.faults import RecordLevelFailure, retry_step
from lakeshard.dedupe.report import WriteReport
from lakeshard.dedupe.writer import ShardWriter
from lakeshard.errors import DamagedDataFile
from lakeshard.lake import CommitResult, TableStore
from lakeshard.tables import FUSED_APP_ID, ID_INDEX, QUARANTINE, ROUTER_APP_ID

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

__all__ = ["FusedWriter"]


class FusedWriter:
    """Commits fused batches handed over by the router (:class:`~lakeshard.routing.handoff.FusedHandoff`) for
    ``shards`` (every shard of the ring), and drains ``routed`` with the same shard writers.

    Example::

        writer = FusedWriter(spark, store, cfg, shards=range(64))
        Router(spark, store, cfg, handoff=writer, fused=True).run()
        writer.compact_ids()
        print(sum(r.written for r in writer.reports), "events written")
    """

    def __init__(self, spark: SparkSession | None, store: TableStore, cfg: LakeshardConfig, shards: Sequence[int], *,
                 gate: Gate | None = None, clock: Callable[[], datetime] | None = None,
                 before_commit: Callable[[str], None] | None = None) -> None:
        self.writer = ShardWriter(spark, store, cfg, shards, gate=gate, clock=clock, before_commit=before_commit)
        self.store = store
        self._before_commit = before_commit or (lambda table: None)
        self.reports: list[WriteReport] = []  # every step: routed ones drained, fused batches delivered

    def drain(self) -> list[WriteReport]:
        """Return the reports of consuming every routed commit not yet consumed (the shard writers' run)."""
        drained = self.writer.run()
        self.reports += drained
        return drained

    def derive(self, events: pa.Table) -> pa.Table:
        """Return each row's key hashes (``key_hi``, ``key_lo``) of ``events``, which the writer step then takes
        instead of hashing the batch itself: the router computes them beside its placements."""
        import pyarrow as pa

        from lakeshard.dedupe.keyhash import key_hashes

        hi, lo = key_hashes(events)
        return pa.table({"key_hi": hi, "key_lo": lo})

    def deliver(self, batch: int, routed: pa.Table) -> CommitResult | None:
        """Return the ``events`` commit of fused batch plan ``batch`` (``routed``: its routed rows), after its IDs'
        commit; skipped when another process had committed the batch's events (then only missing IDs are
        committed). None when the batch goes through ``routed`` instead: a shard's ID file it must read is damaged
        (that shard is stopped, see :attr:`stopped`), or an earlier attempt already handed it over that way."""
        started = time.perf_counter()
        w = self.writer
        w.ensure_tables()
        self.drain()
        events_uri, ids_uri = w.events_uri, w.ids_uri
        read_version = self.store.version(events_uri)
        in_events = self.store.transaction_version(events_uri, FUSED_APP_ID) or 0
        if (self.store.transaction_version(ids_uri, FUSED_APP_ID) or 0) >= batch:
            return CommitResult(events_uri, read_version, skipped=True)
        if in_events >= batch:
            # The events are in, their IDs are not (a crash between the two commits): rebuilt from ``events``.
            self._before_commit(ID_INDEX)
            w.index.repair_fused(batch)
            return CommitResult(events_uri, read_version, skipped=True)
        if self._handed_to_routed(batch):
            return None
        progress = w.progress()
        # Another process's commits (a writer's, or a fused batch's) may hold IDs this cache has not seen.
        w.cache.drop_shards(w.feed.moved_by_others(progress, in_events))
        w.feed.saw(progress)
        w.feed.saw_fused(in_events)
        excluded: dict[tuple[object, ...], str] = {}
        lettered = 0
        while True:
            step = Step((), w.shards, -batch, read_version, 0, started, excluded, rows=routed, fused=batch)
            try:
                report = retry_step(partial(w.arrow_step.run, step), w.retry_policy, shards=w.shards,
                                    routed_version=-batch, on_fault=self._count_failure)
                break
            except DamagedDataFile as exc:
                shard = exc.partition_values.get("shard")
                if shard is None or not shard.isdigit() or int(shard) not in w.shards:
                    raise
                # One commit delivers every shard, so it cannot leave one out: the batch goes through routed, where
                # the shard writers stop this shard and commit the others. Nothing of the batch is committed yet.
                w.feed.stop(int(shard), exc)
                w.cache.drop_shards([int(shard)])
                return None
            except RecordLevelFailure as exc:
                found = newly_unwritable(exc, excluded)
                # Rows proven unwritable go to quarantine first (a crash then redoes the batch and finds the same
                # rows), then the batch is done again without them; a later round's rows get a commit of their own.
                excluded.update(found)
                lettered += self._dead_letter(batch, routed, found)
        if excluded:
            report = dataclasses.replace(report, rows_in=report.rows_in + lettered, dead_lettered=lettered,
                                         error=next(iter(excluded.values())))
        self.reports.append(report)
        return CommitResult(events_uri, self.store.version(events_uri), skipped=report.conflict,
                            rows_added=report.written)

    @property
    def stopped(self) -> dict[int, DamagedDataFile]:
        """The shards stopped on a damaged file (:attr:`ShardWriter.stopped`), by this hand-off or its drains."""
        return self.writer.stopped

    def _handed_to_routed(self, batch: int) -> bool:
        """Return whether fused batch plan ``batch`` went through ``routed`` (``router`` → ``batch`` there).

        Only the newest plan is ever delivered and ``routed``'s ``router`` version never passes the newest plan,
        so it reaches ``batch`` only when this batch's rows were committed there: a replay then goes the same way.
        """
        uri = self.writer.routed_uri
        return self.store.exists(uri) and (self.store.transaction_version(uri, ROUTER_APP_ID) or 0) >= batch

    def compact_ids(self) -> int:
        """Return how many ID files merging the sealed intervals removed (:meth:`ShardWriter.compact_ids`).

        Called once the batches of a run are delivered rather than after each: every fused batch adds an ID file
        to each interval its late events reach, and merging those after each batch re-read and re-wrote the
        same intervals once per batch.
        """
        return self.writer.compact_ids()

    def _count_failure(self, exc: BaseException) -> None:
        """A failed attempt: the IDs cached may hold what it added before failing."""
        self.writer.failures += 1
        self.writer.cache.drop_shards(self.writer.shards)

    def _dead_letter(self, batch: int, routed: pa.Table, unwritable: dict[tuple[object, ...], str]) -> int:
        """Commit the rows of ``routed`` whose keys are ``unwritable`` to ``quarantine`` once (app transaction
        :func:`~lakeshard.dedupe.deadletters.letters_transactions` of ``fused`` and these keys → ``batch``); return how
        many rows that is."""
        from lakeshard.tables import EVENT_SCHEMA, QUARANTINE_SCHEMA, USER_TABLE_SHAPES

        letters = dead_letter_arrow(routed.select([f.name for f in EVENT_SCHEMA.fields]), unwritable)
        quarantine = self.writer.dead_letters.quarantine_uri
        self.store.create_or_grow(quarantine, QUARANTINE_SCHEMA,
                                  description=USER_TABLE_SHAPES[QUARANTINE].description)
        self._before_commit("dead-letter-rows")
        self.store.append_arrow(quarantine, letters,
                                app_transactions=letters_transactions([FUSED_APP_ID], unwritable, batch),
                                metadata={"dead_letter_rows": letters.num_rows, "fused": batch})
        return int(letters.num_rows)
