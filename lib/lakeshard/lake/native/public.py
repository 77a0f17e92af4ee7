"""The native adapter's commits through Delta's public writer only: what runs on a classic session and under
Spark Connect alike.

- **append** (at most one app transaction): ``df.write.format("delta").mode("append")`` with ``txnAppId`` /
  ``txnVersion`` (Delta skips a version at or below the committed one, and a concurrent commit of the same app
  id fails this one) and ``userMetadata`` set on the write itself, never in the session conf (a thread or a
  session without it would commit without lakeshard's metadata). A ``read_version`` is checked against the
  log first: a commit after it that carried one of the app ids is a conflict.
- **swap** (:func:`whole_partitions_predicate`): Delta's public API cannot remove an exact set of files, so a
  swap rewrites whole partitions: ``mode("overwrite")`` with ``replaceWhere`` naming exactly the partitions of
  the files removed, and ``dataChange=false``. It is taken only when the files to remove are *all* the live
  files of those partitions (a compaction of a whole ``(tenant, hour)`` bucket, under its chunk lock);
  Delta's conflict checker fails it when a concurrent commit removed one of those files. ``dataChange=false``
  makes Delta check it at snapshot isolation, so a file appended concurrently stays live (it is not among the
  removes, which Delta takes from the transaction's snapshot), and the rows carry a check evaluated by the
  write's own query (:func:`guard_partition_files`): the partitions, read inside the write's transaction, hold
  exactly the files the swap read, else the write fails as a lost race. That closes the moment between
  lakeshard's look at the log and the start of Delta's transaction, where an append would otherwise be removed
  by ``replaceWhere`` without its rows being rewritten.

- **fence** (:meth:`PublicCommits.fence`): ``ALTER TABLE ... SET TBLPROPERTIES``, a metadata change every
  overlapping transaction loses to, then a look at the log since the version the closing check read.

What does not fit (several app transactions in one commit, files written by a ``write`` function, a
``before_commit`` hook, a swap of part of a partition) needs Delta's internal transaction API
(:mod:`lakeshard.lake.native.commit`, py4j only). docs/lake.md says what of this is tested on Delta's engine.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lakeshard.errors import CommitConflict, ServerUnresponsive, TableStoreError
from lakeshard.lake.base import DEFAULT_PROPERTIES, txn_text
from lakeshard.lake.native.conflicts import conflict_or_raise
from lakeshard.lake.native.connect import ConnectLimits, bounded
from lakeshard.lake.protocol.datafiles import conform
from lakeshard.lake.protocol.log import COMMIT_ID, LogState, checkpoint_parts, encode_user_metadata
from lakeshard.lake.types import ROWS_ADDED, AppTransaction, CommitResult, FileInfo, LogEntry

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, DataFrameWriter, SparkSession
    from pyspark.sql.types import StructType

    from lakeshard.lake.native.log import NativeLog

__all__ = ["CHECKPOINT_INTERVAL_BEFORE", "CHECKPOINT_INTERVAL_PROPERTY", "FENCE_PROPERTY", "INTERVAL_UNSET",
           "NATIVE_PROPERTIES", "SWAP_REFUSAL", "PublicCommits", "create_table_sql", "delta_table_name",
           "guard_partition_files", "interval_before", "interval_left", "whole_partitions_predicate"]

# What the swap's in-write check says when the partitions it rewrites changed: how its failure is told apart.
SWAP_REFUSAL = "lakeshard: the partitions changed while this swap ran"


def _literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


# A table the native adapter creates has every feature lakeshard cannot honour switched off (docs/lake.md, "Table
# features"): deletion vectors and column mapping (files read as plain Parquet), row tracking (a swap would
# reassign row ids), type widening (statistics and pruning assume one type per column), and Databricks' optimized
# writes and auto compaction (they rewrite files outside lakeshard's locks and pruning metadata).
NATIVE_PROPERTIES = {
    **DEFAULT_PROPERTIES,
    "delta.enableRowTracking": "false",
    "delta.enableTypeWidening": "false",
    "delta.autoOptimize.optimizeWrite": "false",
    "delta.autoOptimize.autoCompact": "false",
}


# The table property a closing fence sets (to its commit id): a metadata change, which fails every transaction
# that overlaps it (PublicCommits.fence).
FENCE_PROPERTY = "lakeshard.fence"
# The table property whose multiples Delta checkpoints at (PublicCommits.checkpoint), and how often the change
# giving it back its value is tried when it loses a race.
CHECKPOINT_INTERVAL_PROPERTY = "delta.checkpointInterval"
_RESTORE_ATTEMPTS = 3
# lakeshard's own table property, set in the same commit as the temporary interval: the interval the table had
# before (INTERVAL_UNSET when it had none). It is removed once that value is back, so a process that dies between
# the two changes leaves it behind, and the next maintenance run reads from it what to put back
# (PublicCommits.restore_interval). A table without it never has its interval changed by a restore.
CHECKPOINT_INTERVAL_BEFORE = "lakeshard.checkpoint_interval_before"
INTERVAL_UNSET = "unset"
_TEMPORARY_INTERVAL = "1"


def interval_left(configuration: Mapping[str, str]) -> bool:
    """Return whether a table's properties hold the record of a checkpoint's temporary interval
    (:data:`CHECKPOINT_INTERVAL_BEFORE`): a checkpoint through a property change did not finish."""
    return CHECKPOINT_INTERVAL_BEFORE in configuration


def interval_before(configuration: Mapping[str, str]) -> str | None:
    """Return the ``delta.checkpointInterval`` a table had before a checkpoint through a property change set it to
    1 (:data:`INTERVAL_UNSET` when it had none), when the table still has that temporary interval; else None.

    A table holding :data:`CHECKPOINT_INTERVAL_BEFORE` whose interval is no longer 1 had its interval set since
    (given back by a restore that died before removing the marker, or set by its user): None, it is left as it is.

    Example::

        interval_before({"delta.checkpointInterval": "1", "lakeshard.checkpoint_interval_before": "50"})  # "50"
    """
    before = configuration.get(CHECKPOINT_INTERVAL_BEFORE)
    if before is None or configuration.get(CHECKPOINT_INTERVAL_PROPERTY) != _TEMPORARY_INTERVAL:
        return None
    return before


def _set_sql(values: Mapping[str, str]) -> str:
    return "SET TBLPROPERTIES (" + ", ".join(f"{_literal(k)} = {_literal(v)}" for k, v in values.items()) + ")"


def _unset_sql(*keys: str) -> str:
    return "UNSET TBLPROPERTIES IF EXISTS (" + ", ".join(_literal(k) for k in keys) + ")"


def delta_table_name(uri: str) -> str:
    """Return the SQL name of the Delta table at ``uri`` (``delta.`<uri>```, backticks escaped)."""
    return "delta.`" + uri.replace("`", "``") + "`"


def create_table_sql(uri: str, schema: StructType, partition_by: Sequence[str], properties: Mapping[str, str],
                     description: str | None) -> str:
    """Return the ``CREATE TABLE IF NOT EXISTS`` statement of a Delta table at ``uri``: SQL, so that it runs on
    a classic session and under Spark Connect alike (Delta's Python builder needs Delta's Connect plugin there)."""
    columns = ", ".join(f"`{f.name.replace('`', '``')}` {f.dataType.simpleString()}"
                        + ("" if f.nullable else " NOT NULL") for f in schema.fields)
    sql = f"CREATE TABLE IF NOT EXISTS {delta_table_name(uri)} ({columns}) USING delta"
    if partition_by:
        sql += " PARTITIONED BY (" + ", ".join(f"`{c}`" for c in partition_by) + ")"
    if description:
        sql += f" COMMENT {_literal(description)}"
    if properties:
        sql += " TBLPROPERTIES (" + ", ".join(f"{_literal(k)} = {_literal(v)}" for k, v in properties.items()) + ")"
    return sql


def whole_partitions_predicate(state: LogState, remove: Sequence[str]) -> str | None:
    """Return a ``replaceWhere`` predicate selecting exactly the partitions of ``remove``, or None when it cannot.

    None when ``remove`` is empty or names a file that is not live, or when the partitions it touches hold
    live files it does not name (a predicate would remove those too). An unpartitioned table's predicate is
    ``true`` when every live file is removed.

    Example::

        whole_partitions_predicate(state, ["tenant_id=a/hour=2026-01-01T00/part-0.parquet", ...])
        # "(`tenant_id` = 'a' AND `hour` = '2026-01-01T00')"
    """
    columns = state.partition_columns
    if not remove or any(p not in state.files for p in remove):
        return None

    def key(f: FileInfo) -> tuple[str | None, ...]:
        return tuple(f.partition_values.get(c) for c in columns)

    chosen = set(remove)
    partitions = {key(state.files[p]) for p in remove}
    if any(path not in chosen and key(f) in partitions for path, f in state.files.items()):
        return None
    if not columns:
        return "true"
    clauses = []
    for values in sorted(partitions, key=lambda v: tuple("" if x is None else x for x in v)):
        parts = [f"`{c}` IS NULL" if v is None else f"`{c}` = {_literal(v)}" for c, v in zip(columns, values,
                                                                                             strict=True)]
        clauses.append("(" + " AND ".join(parts) + ")")
    return " OR ".join(clauses)


def guard_partition_files(spark: SparkSession, uri: str, df: DataFrame, predicate: str,
                          expected: Sequence[str]) -> DataFrame:
    """Return ``df``'s rows with the check that the partitions ``predicate`` selects hold exactly the files
    ``expected`` (log paths) when the write that consumes them runs; the same columns, order and partitioning.

    The check is a filter whose condition is a scalar subquery over the table's ``_metadata.file_path``: Spark
    runs it when the write's query executes, inside Delta's transaction (after its snapshot was taken), and a
    filter keeps the rows' order, so sorted outputs stay sorted. Files are compared by name (the last path
    segment, decoded), with repeats: any file added or removed changes the list.
    """
    from urllib.parse import unquote

    names = sorted(unquote(p.rsplit("/", 1)[-1]) for p in expected)
    wanted = "array(" + ", ".join(_literal(n) for n in names) + ")"
    refusal = _literal(f"{SWAP_REFUSAL}: {uri} where {predicate} no longer holds the {len(names)} files read")
    live = ("SELECT array_sort(collect_list(url_decode(substring_index(p, '/', -1)))) FROM "
            f"(SELECT DISTINCT _metadata.file_path AS p FROM {delta_table_name(uri)} WHERE {predicate})")
    return spark.sql(f"SELECT * FROM {{rows}} WHERE CASE WHEN ({live}) = {wanted} THEN true "
                     f"ELSE raise_error({refusal}) END", rows=df)


class PublicCommits:
    """Commits through ``DataFrameWriter.format("delta")`` with per-write options (see the module doc).

    Args:
        log: the store's :class:`~lakeshard.lake.native.log.NativeLog` (app transaction versions, the commit
            a write landed at).
    """

    def __init__(self, log: NativeLog, limits: ConnectLimits | None = None) -> None:
        self._log = log
        self._limits = limits or ConnectLimits()

    def _bounded(self, action: Callable[[], object], what: str) -> None:
        """Run ``action`` as a bounded request (:func:`~lakeshard.lake.native.connect.bounded`)."""
        bounded(self._log.spark, action, what=what, limits=self._limits)

    def create(self, uri: str, sql: str, *, wait_s: float) -> None:
        """Run ``sql`` (:func:`create_table_sql`) until a table exists at ``uri``.

        Delta's ``CREATE TABLE IF NOT EXISTS`` on a path takes any folder that holds something for a table, and
        Delta makes ``_delta_log`` (and ``_delta_log/_staged_commits``) before it writes the first commit. So the
        statement commits nothing when another process is creating the table right now, or when a process was
        killed while creating it. The first is waited for (``wait_s``); after that the log folder is taken as left
        by a killed creation, removed if it holds nothing but empty folders and temporary commit files
        (:meth:`NativeLog.remove_uncommitted`), and the statement run again.

        Raises:
            TableStoreError: the statement failed and no table exists, or the log folder holds files but no
                commit, or is out of this process's reach.
        """
        self._run_create(uri, sql)
        deadline = time.monotonic() + wait_s
        while not self._log.exists(uri) and time.monotonic() < deadline:
            time.sleep(min(0.25, wait_s))
        if self._log.exists(uri):
            return
        if self._log.remove_uncommitted(uri):
            self._run_create(uri, sql)
        if not self._log.exists(uri):
            raise TableStoreError(
                f"cannot create the Delta table at {uri}: its folder holds files but no Delta commit, and lakeshard "
                f"removes only what a creation killed before its first commit leaves ({uri}/_delta_log holding empty "
                "folders and temporary commit files), on a filesystem it reaches. Nothing was committed there: "
                "remove the folder's contents and run again")

    def _run_create(self, uri: str, sql: str) -> None:
        try:
            self._bounded(lambda: self._log.spark.sql(sql), f"creating the table {uri}")
        except ServerUnresponsive:
            raise
        except Exception as exc:
            # Racing another creator, the loser may still fail; the same shape is fine.
            if not self._log.exists(uri):
                raise TableStoreError(f"cannot create the Delta table at {uri}: {exc}") from None

    def append(self, uri: str, df: DataFrame, state: LogState, app_transactions: Sequence[AppTransaction],
               metadata: Mapping[str, Any] | None) -> CommitResult:
        """Return the result of appending ``df`` with at most one app transaction (skipped when already committed)."""
        from pyspark.sql.types import StructType

        writer = conform(df, StructType.fromJson(state.schema_json), uri).write.format("delta").mode("append")
        return self._save(uri, writer, state, app_transactions, metadata, "append", removed=0)

    def replace_partitions(self, uri: str, df: DataFrame, state: LogState, predicate: str, remove: Sequence[str],
                           app_transactions: Sequence[AppTransaction], metadata: Mapping[str, Any] | None,
                           data_change: bool) -> CommitResult:
        """Return the result of rewriting the partitions ``predicate`` selects (holding exactly the files
        ``remove``, checked inside the write: :func:`guard_partition_files`) with ``df``'s rows, in one commit."""
        from pyspark.sql.types import StructType

        rows = guard_partition_files(self._log.spark, uri, conform(df, StructType.fromJson(state.schema_json), uri),
                                     predicate, remove)
        writer = (rows.write.format("delta").mode("overwrite")
                  .option("replaceWhere", predicate).option("dataChange", str(data_change).lower()))
        return self._save(uri, writer, state, app_transactions, metadata, "replace", removed=len(remove))

    def delete_partitions(self, uri: str, state: LogState, predicate: str, removed: int,
                          metadata: Mapping[str, Any] | None) -> CommitResult:
        """Return the result of removing every file of the partitions ``predicate`` selects, in one commit.

        ``DELETE`` takes no write options, so lakeshard's metadata travels in the session's ``userMetadata``
        setting, set around this statement only (commits of this process take turns meanwhile).
        """
        from lakeshard.lake.native.commit import COMMIT_LOCK, USER_METADATA_CONF, session_conf

        commit_id = uuid.uuid4().hex
        text = encode_user_metadata({**(metadata or {}), COMMIT_ID: commit_id})
        spark = self._log.spark
        try:
            with COMMIT_LOCK, session_conf(spark, USER_METADATA_CONF, text):
                self._bounded(lambda: spark.sql(f"DELETE FROM {delta_table_name(uri)} WHERE {predicate}").collect(),
                              f"deleting {predicate} from {uri}")
        except Exception as exc:
            conflict_or_raise(exc, uri, state.version, [])
        entry = self._log.find_commit(uri, state.version, commit_id)
        if entry is None:
            raise TableStoreError(f"{uri}: DELETE of the partitions {predicate} left no commit of its own in the log")
        return CommitResult(uri, entry.version, files_removed=removed, reason="replace")

    def fence(self, uri: str, read_version: int, app_ids: Sequence[str],
              metadata: Mapping[str, Any] | None) -> CommitResult:
        """Return the result of a fence ordered after ``read_version``: a metadata change, then a look at the log.

        ``ALTER TABLE ... SET TBLPROPERTIES ('lakeshard.fence' = <commit id>)`` commits a ``metaData`` action,
        and Delta fails every transaction that overlaps a metadata change (``MetadataChangedException``, blind
        appends included), so a commit prepared before the fence landed fails once it did. The commits between
        ``read_version`` and the fence are then read: one that carried one of ``app_ids`` or changed data makes
        the fence a conflict (what was read at ``read_version`` is stale), as a commit of those app ids would
        make a transaction re-asserting them fail. A writer whose transaction starts after the fence does not
        conflict with it; lakeshard's writers close that gap themselves (:mod:`lakeshard.buckets.guard`).

        Raises:
            CommitConflict: a commit after ``read_version`` carried one of ``app_ids`` or changed data, or the
                property change lost a race.
        """
        ids = tuple(app_ids)
        entry = self._alter(uri, read_version, None, metadata, ids, "the fence's")
        if entry.version > read_version + 1:
            ours = set(ids)
            for between, _ in self._log.entries(uri, read_version + 1, entry.version - 1):
                touched = sorted(ours & {t.app_id for t in between.app_transactions})
                if touched or any(c.data_change for c in between.changes):
                    what = f"carried {touched}" if touched else "changed data"
                    raise CommitConflict(uri, read_version, ids,
                                         f"commit {between.version} (after the version read) {what}")
        return CommitResult(uri, entry.version, reason="fence")

    def checkpoint(self, uri: str, state: LogState, metadata: Mapping[str, Any] | None) -> int:
        """Return the version of a checkpoint Delta wrote for ``uri`` through its public SQL alone.

        Delta has no public statement that writes a checkpoint; it writes one itself after a commit whose version
        is a multiple of the table's ``delta.checkpointInterval``, read from the metadata that commit leaves. So
        ``ALTER TABLE ... SET TBLPROPERTIES ('delta.checkpointInterval' = '1', ...)`` commits and is checkpointed,
        recording the interval the table had in :data:`CHECKPOINT_INTERVAL_BEFORE` in the same commit, and
        :meth:`restore_interval` gives the property its value back (or unsets it) and removes that record. Both
        are metadata changes: a commit of the table overlapping either fails, as it would against a closing fence,
        and is retried by its writer. A process that dies in between leaves the record, which the next
        maintenance run's :meth:`restore_interval` finds (a table left so keeps the value recorded first).

        Raises:
            CommitConflict: the first property change lost a race (nothing changed; the next run tries again).
            TableStoreError: Delta wrote no checkpoint at that commit.
        """
        config = state.metadata.get("configuration") or {}
        before = interval_before(config) or config.get(CHECKPOINT_INTERVAL_PROPERTY, INTERVAL_UNSET)
        change = {CHECKPOINT_INTERVAL_PROPERTY: _TEMPORARY_INTERVAL, CHECKPOINT_INTERVAL_BEFORE: before}
        entry = self._alter(uri, state.version, _set_sql(change), metadata, (), "the checkpoint's")
        for attempt in range(_RESTORE_ATTEMPTS):
            try:
                self.restore_interval(uri, self._log.state(uri), metadata)
                break
            except CommitConflict:
                if attempt == _RESTORE_ATTEMPTS - 1:
                    raise
        written = checkpoint_parts((n, loc) for n, loc, _ in self._log.listing(uri))
        if not written.get(entry.version):
            raise TableStoreError(f"{uri}: Delta wrote no checkpoint at version {entry.version}, the commit that set "
                                  f"{CHECKPOINT_INTERVAL_PROPERTY} = 1")
        return entry.version

    def restore_interval(self, uri: str, state: LogState, metadata: Mapping[str, Any] | None) -> bool:
        """Return whether ``uri``'s ``delta.checkpointInterval`` was given back the value :meth:`checkpoint`
        recorded in :data:`CHECKPOINT_INTERVAL_BEFORE` (:func:`interval_before`), then that record removed.

        The interval goes back first and the record second (one ``UNSET`` of both when the table had no
        interval), so a crash in between leaves a record beside an interval that is no longer 1, which the next
        call only removes. A table without the record is not changed; nor is an interval set since the record.

        Raises:
            CommitConflict: a property change lost a race (the next run tries again).
        """
        config = state.metadata.get("configuration") or {}
        if not interval_left(config):
            return False
        before, version = interval_before(config), state.version
        if before == INTERVAL_UNSET:
            self._alter(uri, version, _unset_sql(CHECKPOINT_INTERVAL_PROPERTY, CHECKPOINT_INTERVAL_BEFORE), metadata,
                        (), "the checkpoint interval's restoring")
            return True
        if before is not None:
            version = self._alter(uri, version, _set_sql({CHECKPOINT_INTERVAL_PROPERTY: before}), metadata, (),
                                  "the checkpoint interval's restoring").version
        self._alter(uri, version, _unset_sql(CHECKPOINT_INTERVAL_BEFORE), metadata, (),
                    "the checkpoint interval record's removal")
        return before is not None

    def _alter(self, uri: str, read_version: int, change: str | None, metadata: Mapping[str, Any] | None,
               app_ids: tuple[str, ...], what: str) -> LogEntry:
        """Return the commit of ``ALTER TABLE ... <change>`` (``None``: the fence's property set to the commit's
        id), carrying lakeshard's metadata."""
        from lakeshard.lake.native.commit import COMMIT_LOCK, USER_METADATA_CONF, session_conf

        commit_id = uuid.uuid4().hex
        text = encode_user_metadata({**(metadata or {}), COMMIT_ID: commit_id})
        if change is None:
            change = _set_sql({FENCE_PROPERTY: commit_id})
        spark = self._log.spark
        try:
            with COMMIT_LOCK, session_conf(spark, USER_METADATA_CONF, text):
                self._bounded(lambda: spark.sql(f"ALTER TABLE {delta_table_name(uri)} {change}").collect(),
                              f"{what} change of {uri}")
        except Exception as exc:
            conflict_or_raise(exc, uri, read_version, app_ids)
        entry = self._log.find_commit(uri, read_version, commit_id)
        if entry is None:
            raise TableStoreError(f"{uri}: {what} property change ({change}) left no commit of its own in the log "
                                  f"after version {read_version}")
        return entry

    def _save(self, uri: str, writer: DataFrameWriter, state: LogState, app_transactions: Sequence[AppTransaction],
              metadata: Mapping[str, Any] | None, reason: str, *, removed: int) -> CommitResult:
        commit_id = uuid.uuid4().hex
        writer = writer.option("userMetadata", encode_user_metadata({**(metadata or {}), COMMIT_ID: commit_id}))
        for t in app_transactions:
            writer = writer.option("txnAppId", t.app_id).option("txnVersion", t.version)
        try:
            self._bounded(lambda: writer.save(uri), f"a {reason} commit to {uri}")
        except ServerUnresponsive:
            raise
        except Exception as exc:
            latest = self._log.state(uri)
            if app_transactions and all((latest.app_versions.get(t.app_id) or -1) >= t.version
                                        for t in app_transactions):
                return CommitResult(uri, latest.version, skipped=True,
                                    reason=f"app transactions {txn_text(app_transactions)} committed concurrently")
            if SWAP_REFUSAL in str(exc):
                text = str(exc)
                raise CommitConflict(uri, state.version, tuple(t.app_id for t in app_transactions),
                                     text[text.find(SWAP_REFUSAL):].splitlines()[0][:300]) from None
            conflict_or_raise(exc, uri, state.version, [t.app_id for t in app_transactions])
        entry = self._log.find_commit(uri, state.version, commit_id)
        if entry is None:  # Delta skipped the write: the same app transaction committed meanwhile
            latest = self._log.state(uri)
            return CommitResult(uri, latest.version, skipped=True,
                                reason=f"app transactions {txn_text(app_transactions)} committed concurrently")
        adds = [c for c in entry.changes if c.action == "add"]
        rows = entry.custom_metadata.get(ROWS_ADDED)
        return CommitResult(uri, entry.version, files_added=len(adds), files_removed=removed,
                            rows_added=int(rows) if rows is not None else sum(c.file.num_records or 0 for c in adds),
                            bytes_added=sum(c.file.size_bytes for c in adds), reason=reason)
