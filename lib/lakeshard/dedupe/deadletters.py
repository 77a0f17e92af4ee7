"""Dead letters of a shard writer: a batch proven unwritable goes to ``quarantine``, then progress moves past it.

Two commits, each idempotent: the ``quarantine`` append carries ``dead-letter/<shard>`` → the routed version,
and the ``events`` commit that follows carries only the progress (``writer/<shard>``). A writer that finds
``dead-letter/<shard>`` ahead of its progress (a crash between the two) finishes the job
(:meth:`DeadLetters.finish`) instead of writing the batch again. On a store whose commit carries one app
transaction (:func:`~lakeshard.dedupe.commit.commits_per_shard`) both go shard by shard, as the writers' commits
do: each shard's rows with its ``dead-letter/<shard>``, then each shard's progress with its ``writer/<shard>``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from lakeshard.dedupe.commit import commits_per_shard
from lakeshard.dedupe.report import WriteReport, empty_report
from lakeshard.lake import AppTransaction, TableStore
from lakeshard.landing.reasons import WRITE_FAILED
from lakeshard.landing.schema import QUARANTINE_RAW_LIMIT_BYTES, QUARANTINE_SCHEMA
from lakeshard.tables import dead_letter_app_id, writer_app_id
from lakeshard.tables.schemas import EVENT_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["DeadLetters"]


class DeadLetters:
    """Sends the batches of ``shards`` that cannot be written to ``quarantine`` and commits the progress past them.

    ``before_commit`` is called with ``"dead-letter-progress"`` before the progress commit (the crash tests stop
    the process there).
    """

    def __init__(self, store: TableStore, shards: tuple[int, ...], *, quarantine_uri: str, events_uri: str,
                 before_commit: Callable[[str], None]) -> None:
        self.store = store
        self.shards = shards
        self.quarantine_uri = quarantine_uri
        self.events_uri = events_uri
        self._before_commit = before_commit

    def send(self, batch: DataFrame, todo: tuple[int, ...], routed_version: int, error: str, started: float, *,
             progress: Callable[[], dict[int, int]], cache_bytes: int) -> WriteReport:
        """Return the report of sending a batch whose rows cannot be written (a record-level failure) to
        ``quarantine`` with the reason, then committing the progress past it.

        Rows go as routed, duplicates included: feeding them back through the landing zone is safe, the writer
        dedupes them.
        """
        from pyspark.sql import functions as F

        committed = progress()
        rows_in = batch.count()
        if all(committed[s] >= routed_version for s in todo):  # a failed attempt committed after all
            return empty_report(todo, routed_version, rows_in, started, cache_bytes=cache_bytes, conflict=True)
        reason = f"{WRITE_FAILED}: {error}"
        raw = F.to_json(F.struct(*[F.col(name) for name in EVENT_COLUMNS]))
        letters = batch.select(
            F.substring(raw, 1, QUARANTINE_RAW_LIMIT_BYTES).alias("raw"),
            (F.length(raw) > QUARANTINE_RAW_LIMIT_BYTES).alias("raw_truncated"),
            F.col("size_bytes"), F.lit(reason).alias("reason"), F.lit(WRITE_FAILED).alias("category"),
            *[(F.col(name) if name in batch.columns else F.lit(None)).cast(kind).alias(name)
              for name, kind in (("source_file", "string"), ("line_number", "long"))],
            F.current_timestamp().alias("quarantined_at"), F.col("shard"))
        self.store.create_or_grow(self.quarantine_uri, QUARANTINE_SCHEMA,
                          description="records that broke the format or could not be written, with the reason")
        groups = ([((s,), letters.where(F.col("shard") == s)) for s in todo] if commits_per_shard(self.store)
                  else [(todo, letters)])
        for shards, rows in groups:
            self.store.append(self.quarantine_uri, rows.drop("shard"),
                              app_transactions=[AppTransaction(dead_letter_app_id(s), routed_version) for s in shards],
                              metadata={"dead_letter": True, "shards": list(shards), "routed_version": routed_version})
        self.finish(committed)
        report = empty_report(todo, routed_version, rows_in, started, cache_bytes=cache_bytes, conflict=False)
        return dataclasses.replace(report, dead_lettered=rows_in, error=error)

    def finish(self, progress: dict[int, int]) -> bool:
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
        per_shard = commits_per_shard(self.store)
        for version, shards in sorted(ahead.items()):
            for group in ([[s] for s in shards] if per_shard else [shards]):
                self._before_commit("dead-letter-progress")
                # No rows: the commit carries only the progress (an empty DataFrame where the public writer commits).
                self.store.append(self.events_uri, self._no_rows() if per_shard else None,
                                  app_transactions=[AppTransaction(writer_app_id(s), version) for s in group],
                                  metadata={"dead_lettered": True, "shards": group, "routed_version": version})
                for s in group:
                    progress[s] = version
        return bool(ahead)

    def _no_rows(self) -> DataFrame:
        """Return an empty DataFrame of ``events``' columns."""
        return self.store.spark.createDataFrame([], self.store.schema(self.events_uri))
