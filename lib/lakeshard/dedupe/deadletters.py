"""Dead letters of a shard writer: a batch proven unwritable goes to ``quarantine``, then progress moves past it.

Two commits, each idempotent: the ``quarantine`` append carries ``dead-letter/<shard>`` → the routed version,
and the ``events`` commit that follows carries only the progress (``writer/<shard>``). A writer that finds
``dead-letter/<shard>`` ahead of its progress (a crash between the two) finishes the job
(:meth:`DeadLetters.finish`) instead of writing the batch again. On a store whose commit carries one app
transaction (:func:`~lakeshard.dedupe.commit.commits_per_shard`) both go shard by shard, as the writers' commits
do: each shard's rows with its ``dead-letter/<shard>``, then each shard's progress with its ``writer/<shard>``.

Rows proven unwritable one by one (:class:`~lakeshard.dedupe.faults.RecordLevelFailure`) go to ``quarantine`` on
their own (:func:`quarantine_rows`, :func:`dead_letter_arrow`), each round's under an app transaction of its own
(:func:`letters_transactions`), before the step is done again without them.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING

from lakeshard.dedupe.commit import commits_per_shard
from lakeshard.dedupe.faults import RecordLevelFailure, event_keys
from lakeshard.dedupe.report import WriteReport, empty_report
from lakeshard.lake import AppTransaction, FileInfo, TableStore
from lakeshard.landing import WRITE_FAILED
from lakeshard.tables import (
    EVENT_COLUMNS,
    FUSED_APP_ID,
    QUARANTINE,
    QUARANTINE_RAW_LIMIT_BYTES,
    QUARANTINE_SCHEMA,
    USER_TABLE_SHAPES,
    dead_letter_app_id,
    writer_app_id,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

__all__ = ["DeadLetters", "dead_letter_arrow", "letters_transactions", "newly_unwritable", "quarantine_rows"]


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

    def send_fused(self, batch: int, routed: pa.Table, unwritable: dict[tuple[object, ...], str]) -> int:
        """Commit the rows of fused batch ``batch`` (``routed``: its routed rows) whose keys are ``unwritable`` to
        ``quarantine`` once (app transaction :func:`letters_transactions` of ``fused`` and these keys → ``batch``);
        return how many rows that is."""
        from lakeshard.tables import EVENT_SCHEMA

        letters = dead_letter_arrow(routed.select([f.name for f in EVENT_SCHEMA.fields]), unwritable)
        self.store.create_or_grow(self.quarantine_uri, QUARANTINE_SCHEMA,
                                  description=USER_TABLE_SHAPES[QUARANTINE].description)
        self._before_commit("dead-letter-rows")
        self.store.append_arrow(self.quarantine_uri, letters,
                                app_transactions=letters_transactions([FUSED_APP_ID], unwritable, batch),
                                metadata={"dead_letter_rows": letters.num_rows, "fused": batch})
        return int(letters.num_rows)

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
                                  description=USER_TABLE_SHAPES[QUARANTINE].description)
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


_REASON_CHARS = 1000  # of a row's reason in its dead letter


def newly_unwritable(exc: RecordLevelFailure, excluded: Mapping[tuple[object, ...], str]
                     ) -> dict[tuple[object, ...], str]:
    """Return the rows ``exc`` proves unwritable that ``excluded`` does not hold yet, each with its reason: one round
    of dead letters. Raises ``exc`` when it names no new row (doing the step again would meet it again)."""
    found = {key: exc.reason[:_REASON_CHARS] for key in exc.keys if key not in excluded}
    if not found:
        raise exc
    return found


def letters_transactions(scopes: Sequence[str], keys: Collection[tuple[object, ...]], version: int
                         ) -> list[AppTransaction]:
    """Return the app transactions of a commit of dead letters, one per scope (a shard, or ``fused``):
    ``dead-letter-rows/<scope>/<digest of keys>`` → ``version`` (the step's routed version, or its fused batch).

    One id per set of rows, not per step: a step that meets a second round of unwritable rows after it committed
    the first round's (a row refused only on a later try) commits them under an id of their own, where one id per
    step took them for a replay of the first and left them neither in ``events`` nor in ``quarantine``. A step
    redone after a crash that finds the same rows commits nothing again; one that finds other rows (a refusal that
    is not the same on every try) commits those, so a row may be dead-lettered twice, never lost.
    """
    digest = hashlib.sha256("\x1e".join(sorted("\x1f".join(map(str, key)) for key in keys)).encode(
        "utf-8", "surrogatepass")).hexdigest()[:_LETTERS_DIGEST_CHARS]
    return [AppTransaction(f"dead-letter-rows/{scope}/{digest}", version) for scope in scopes]


_LETTERS_DIGEST_CHARS = 16


def quarantine_rows(store: TableStore, routed: str, quarantine: str, files: Sequence[FileInfo],
                    unwritable: Mapping[tuple[object, ...], str], shards: Sequence[int], routed_version: int) -> int:
    """Commit the rows of ``files`` (a step's routed files) whose keys are ``unwritable`` to ``quarantine`` with
    their reason, once (app transactions :func:`letters_transactions` of each shard and these keys → the routed
    version: a step redone after a crash finds the same rows and commits nothing); return how many rows that
    is."""
    from lakeshard.tables import EVENT_SCHEMA

    columns = [f.name for f in EVENT_SCHEMA.fields]
    store.create_or_grow(quarantine, QUARANTINE_SCHEMA, description=USER_TABLE_SHAPES[QUARANTINE].description)
    # On a store whose commit carries one app transaction, shard by shard (each shard's files are its rows).
    groups = ([((s,), [f for f in files if f.partition_values.get("shard") == str(s)]) for s in shards]
              if commits_per_shard(store) else [(tuple(shards), list(files))])
    txns = dict(zip(shards, letters_transactions([str(s) for s in shards], unwritable, routed_version), strict=True))
    total = 0
    for group, group_files in groups:
        letters = dead_letter_arrow(store.read_arrow(routed, group_files, columns=columns), unwritable)
        store.append_arrow(quarantine, letters,
                           app_transactions=[txns[s] for s in group],
                           metadata={"dead_letter_rows": letters.num_rows, "shards": list(group),
                                     "routed_version": routed_version})
        total += letters.num_rows
    return total


def dead_letter_arrow(rows: pa.Table, unwritable: Mapping[tuple[object, ...], str]) -> pa.Table:
    """Return quarantine rows (``lakeshard.tables.schemas.QUARANTINE_SCHEMA``, category ``write_failed``) for the
    events of ``rows`` (Arrow rows) whose keys are ``unwritable``: each event as JSON in ``raw`` (cut to the
    quarantine's limit), with its key's reason, and the landing file and line it came from where ``rows`` carry
    them (``source_file``, ``line_number``: routed rows do; they are not part of ``raw``)."""
    import json
    from datetime import UTC, datetime

    import pyarrow as pa


    keys = event_keys(rows)
    rows = rows.filter(pa.array([k in unwritable for k in keys], pa.bool_()))
    why = [unwritable[k] for k in keys if k in unwritable]
    lineage = {"source_file": pa.string(), "line_number": pa.int64()}
    events = rows.select([c for c in rows.column_names if c not in lineage])
    raws = [json.dumps(r, default=str, ensure_ascii=False) for r in events.to_pylist()]
    now = datetime.now(UTC)
    return pa.table({
        "raw": [r.encode()[:QUARANTINE_RAW_LIMIT_BYTES].decode(errors="ignore") for r in raws],
        "raw_truncated": [len(r.encode()) > QUARANTINE_RAW_LIMIT_BYTES for r in raws],
        "size_bytes": pa.array([len(r.encode()) for r in raws], pa.int32()),
        "reason": [f"{WRITE_FAILED}: {r}" for r in why], "category": [WRITE_FAILED] * len(raws),
        **{name: rows.column(name).cast(kind) if name in rows.column_names else pa.nulls(len(raws), kind)
           for name, kind in lineage.items()},
        "quarantined_at": pa.array([now] * len(raws), pa.timestamp("us", tz="UTC")),
        "start_byte": pa.nulls(len(raws), pa.int64()), "end_byte": pa.nulls(len(raws), pa.int64()),
    })
