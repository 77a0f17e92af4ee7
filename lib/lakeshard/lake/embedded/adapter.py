"""The embedded adapter: Spark writes Parquet into the table's directory, delta-rs commits it.

How a write works (docs/design.md §1):

1. Spark writes the rows as Parquet under a fresh, never-reused directory of the table,
   ``<table>/w-<utc time>-<random>/<partition dirs>/part-*.parquet``. Until step 3 nothing
   references these files, so no reader can see them.
2. The driver reads each new file's footer (row count, min/max/null counts) and builds Delta add
   actions; partition values come from the directory names Spark wrote.
3. One delta-rs commit carries the adds (and, for a swap, the removes), the app transactions and
   the commit metadata. Delta's put-if-absent of the next log entry makes it all-or-nothing; a
   conflicting concurrent commit surfaces as :class:`~lakeshard.errors.CommitConflict` and the
   files of the failed attempt are deleted again.

An append that removes nothing, on a local file system, writes that log entry itself (put-if-absent, delta-rs'
conflict rules; :mod:`lakeshard.lake.embedded.append`): delta-rs' commit costs time linear in the table's files.
A process that dies between 1 and 3 leaves orphan files that :meth:`EmbeddedTableStore.vacuum` removes.

What the store knows of each table's log (snapshots, app versions, listings) is :mod:`lakeshard.lake.embedded.log`;
turning written files into add actions and committing swaps is :mod:`lakeshard.lake.embedded.write`.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import AddAction, RemoveAction

from lakeshard.errors import CommitConflict, TableExists, TableStoreError
from lakeshard.lake.base import (
    DEFAULT_PROPERTIES,
    AdapterBase,
    all_committed,
    check_read_point,
    now_ms,
    txn_text,
)
from lakeshard.lake.embedded.append import appendable, commit_append, create_once, links_work
from lakeshard.lake.embedded.log import (
    DeltaRsLog,
    arrow_schema_from_json,
    arrow_schema_of,
    embedded_uri,
    live_files,
    spark_schema_of,
)
from lakeshard.lake.embedded.write import (
    COMMIT_HOOKS,
    TableShape,
    added_file,
    commit_removes,
    delete_tree,
    metadata_strings,
    stale_write_dirs,
    version_of_commit,
    write_new_files,
)
from lakeshard.lake.protocol.arrowread import read_file_groups
from lakeshard.lake.protocol.datafiles import read_data_files
from lakeshard.lake.protocol.filesystem import read_commit_text
from lakeshard.lake.protocol.log import COMMIT_ID, LogState, custom_metadata, table_id
from lakeshard.lake.store import K, check_new_columns
from lakeshard.lake.trace import COMMIT, phase
from lakeshard.lake.types import (
    BYTES_ADDED,
    ROWS_ADDED,
    AppTransaction,
    BeforeCommit,
    CommitInfo,
    CommitResult,
    FileInfo,
    LogEntry,
    VacuumReport,
    WriteFiles,
)

if TYPE_CHECKING:
    import pyarrow.compute as pc
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructField, StructType

__all__ = ["EmbeddedTableStore"]


class EmbeddedTableStore(AdapterBase):
    """A :class:`TableStore` whose commits go through delta-rs and whose data files Spark writes.

    Args:
        spark: the session that writes and reads the Parquet files; None: ``start_spark`` starts one when needed
            (with neither, the store does only driver-side work and says so if asked for a DataFrame).
        start_spark: with no ``spark``, called the first time something needs Spark (a DataFrame read or
            a Spark write). Driver-side work — metadata, ``read_arrow``, ``append(write=...)``, commits,
            history — never starts it, so a process doing only small steps runs without a JVM.
        storage_options: passed to delta-rs for object stores (credentials, endpoints).
        max_commit_retries: delta-rs' retries on a conflicting concurrent commit that can be
            resolved (two blind appends); real conflicts still raise :class:`CommitConflict`.
    """

    def __init__(
        self,
        spark: SparkSession | None,
        *,
        start_spark: Callable[[], SparkSession] | None = None,
        storage_options: Mapping[str, str] | None = None,
        max_commit_retries: int | None = None,
    ) -> None:
        self._spark = spark
        self._start_spark = start_spark
        self._storage = dict(storage_options) if storage_options else None
        self._retries = max_commit_retries
        # The tables' latest states, app transaction versions and file listings seen so far; threads sharing
        # this store share them, and bringing a table up to date and committing on it take turns (``lock``).
        self._log = DeltaRsLog(self._storage)

    @property
    def spark(self) -> SparkSession:
        """The Spark session, started now if this store was opened lazily and nothing needed it before."""
        if self._spark is None:
            if self._start_spark is None:
                raise TableStoreError("this store was opened without Spark (EmbeddedTableStore(None)) and a step "
                                      "needed a DataFrame; give it a session or start_spark")
            self._spark = self._start_spark()
        return self._spark

    @spark.setter
    def spark(self, session: SparkSession) -> None:
        self._spark = session

    @property
    def spark_started(self) -> bool:
        """Whether this store has a Spark session yet (False while a lazily opened store only did driver work)."""
        return self._spark is not None

    # ----------------------------------------------------------------------------------- lookup
    def exists(self, table: str) -> bool:
        """Return whether a Delta table exists at ``table``."""
        uri = embedded_uri(table)
        return self._log.known(uri) or DeltaTable.is_deltatable(uri, storage_options=self._storage)

    def schema(self, table: str) -> StructType:
        """Return the table's schema (data and partition columns) as a Spark ``StructType``."""
        if (state := self._log.state(embedded_uri(table))) is not None:
            from pyspark.sql.types import StructType

            return StructType.fromJson(state.schema_json)
        return spark_schema_of(self._log.latest(table).schema())

    def add_columns(self, table: str, fields: Sequence[StructField]) -> int:
        """Add nullable columns to an existing table with delta-rs' schema change; return the new version."""
        from deltalake.schema import Field

        uri = embedded_uri(table)
        check_new_columns(uri, self.schema(uri), fields)
        dt = self._log.table(uri)
        try:
            dt.alter.add_columns([Field.from_json(json.dumps(f.jsonValue())) for f in fields])
        except DeltaError as exc:
            raise TableStoreError(f"{uri}: cannot add the columns {[f.name for f in fields]}: {exc}") from None
        finally:
            with self._log.lock:
                self._log.forget(uri)
        return int(dt.version())

    def partition_columns(self, table: str) -> list[str]:
        """Return the table's partition columns in order."""
        if (state := self._log.state(embedded_uri(table))) is not None:
            return state.partition_columns
        return list(self._log.latest(table).metadata().partition_columns)

    def version(self, table: str) -> int:
        """Return the table's latest version."""
        return self._log.latest_version(embedded_uri(table))

    # ----------------------------------------------------------------------------------- create
    def create(
        self,
        table: str,
        schema: StructType,
        *,
        partition_by: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        description: str | None = None,
        exist_ok: bool = True,
    ) -> int:
        """Create the table, or check that an existing one has this schema; return its version.

        Raises:
            TableExists: the table exists and ``exist_ok`` is False.
            TableStoreError: an existing table's schema or partitioning differs (both are shown), or a
                partition column has a type that cannot be a partition.
        """
        uri = embedded_uri(table)
        # A kept snapshot stays while it is of the table there now (every job run ensures its tables, and a fresh
        # load costs more the more files a table has); one created again in its place has a new table id.
        cached = self._log.cached(uri)
        first = None if cached is None else read_commit_text(uri, 0)
        if cached is None or first is None or table_id(first) != str(cached.metadata().id):
            self._log.forget(uri)
        existing = self._existing_version(uri, schema, partition_by, exist_ok)
        if existing is not None:
            return existing
        config = {**DEFAULT_PROPERTIES, **(properties or {})}

        def create(at: str) -> DeltaTable:
            return DeltaTable.create(at, DeltaSchema.from_json(schema.json()), mode="error",
                                     partition_by=list(partition_by) or None, description=description,
                                     configuration=config, storage_options=self._storage)

        try:
            if not links_work(uri):
                return int(create(uri).version())
            if create_once(uri, create):
                return 0
            lost: Exception = TableExists(f"a Delta table already exists at {uri}")
        except DeltaError as exc:
            lost = TableStoreError(f"cannot create the Delta table at {uri}: {exc}")
        # Two creators raced: the loser sees the winner's table, which is fine if it is the same shape.
        if exist_ok and self.exists(uri):
            self._check_same_shape(uri, schema, partition_by)
            return self.version(uri)
        raise lost from None

    # ------------------------------------------------------------------------------------- read
    def read(
        self, table: str, *, version: int | None = None, timestamp: datetime | str | None = None
    ) -> DataFrame:
        """Return a snapshot of the table (latest, at ``version`` or as of ``timestamp``) as a DataFrame.

        Partition columns are restored from the add actions with the table's types; data columns are
        read with the table's schema (a column a file lacks reads as null). An empty table reads as an
        empty DataFrame with the schema.

        Example::

            store.read(uri, version=3).count()
            store.read(uri, timestamp="2026-01-01T00:00:00Z")
        """
        check_read_point(version, timestamp)
        dt = self._log.table(table, version)
        if timestamp is not None:
            try:
                dt.load_as_version(timestamp)
            except DeltaError as exc:
                raise TableStoreError(f"{dt.table_uri}: no version as of {timestamp}: {exc}") from None
        return self._read_snapshot(dt)

    def read_files(self, table: str, files: Sequence[FileInfo]) -> DataFrame:
        """Return the rows of exactly these data files (as :meth:`files` lists them), partition values included.

        This is how a consumer reads what certain commits added, or a planner reads one bucket's files.
        """
        return self._read_snapshot(self._log.latest(table), files)

    def _read_snapshot(self, dt: DeltaTable, only: Sequence[FileInfo] | None = None) -> DataFrame:
        files = live_files(dt) if only is None else list(only)
        return read_data_files(self.spark, embedded_uri(dt.table_uri), spark_schema_of(dt.schema()),
                               list(dt.metadata().partition_columns), files)

    def read_arrow(self, table: str, files: Sequence[FileInfo], columns: Sequence[str] | None = None, *,
                   where: pc.Expression | None = None) -> pa.Table:
        """Return the rows of exactly these data files, read with pyarrow in this process (no Spark job).

        Partition values come from the add actions, every column is cast to the table's Arrow type (a
        column a file lacks reads as null), as :meth:`read_files` does with Spark. For the small reads of a
        writer step (its new routed files, an ID interval), where a Spark job's fixed cost would dominate.
        ``where`` keeps the matching rows; only row groups whose statistics admit it are decoded
        (:mod:`lakeshard.lake.protocol.rowgroups`).

        Example::

            ids = store.read_arrow(uri, store.files(uri), columns=["key_hi", "key_lo"])
        """
        return self.read_arrow_groups(table, {0: files}, columns, where=where)[0]

    def read_arrow_groups(self, table: str, groups: Mapping[K, Sequence[FileInfo]],
                          columns: Sequence[str] | None = None, *, where: pc.Expression | None = None
                          ) -> dict[K, pa.Table]:
        """Return, per group of data files, their rows as :meth:`read_arrow` reads them, in one pass.

        The files of all groups are read at once by a pool of threads (pyarrow decodes without the GIL),
        only the columns asked for; a partition column asked for is filled in from the add actions.
        This is the ID page-in's read: a few columns of many small files, wanted per ``(shard, interval)``.
        """
        uri = embedded_uri(table)
        if (state := self._log.state(uri)) is not None:  # one look for the schema and the partitioning
            schema, parts = arrow_schema_from_json(str(state.metadata["schemaString"])), state.partition_columns
        else:
            schema, parts = self.arrow_schema(uri), self.partition_columns(uri)
        return read_file_groups(uri, schema, parts, groups, columns, where=where)

    def arrow_schema(self, table: str) -> pa.Schema:
        """Return the table's schema as Arrow types (timestamps in microseconds, UTC), partition columns included."""
        if (state := self._log.state(embedded_uri(table))) is not None:
            return arrow_schema_from_json(str(state.metadata["schemaString"]))
        return arrow_schema_of(self._log.latest(table))

    def files(self, table: str, *, version: int | None = None) -> list[FileInfo]:
        """Return the live data files of the table (latest or at ``version``) with their stats.

        The latest listing is kept until the table moves: a version's files never change. A ``version`` that is
        the latest one (a reader that just asked for the version) is served from it too, not from a fresh load.
        """
        return self._log.files(embedded_uri(table), version)

    # ------------------------------------------------------------------------------------ write
    def append(
        self,
        table: str,
        df: DataFrame | None,
        *,
        app_transactions: Sequence[AppTransaction] = (),
        metadata: Mapping[str, Any] | None = None,
        read_version: int | None = None,
        write: WriteFiles | None = None,
    ) -> CommitResult:
        """Append ``df``'s rows in one commit carrying ``app_transactions`` and ``metadata``.

        With ``read_version``, the commit is prepared against that version: any commit made since that
        conflicts with it (e.g. one carrying the same app transaction) makes this one fail, as if it had
        been attempted right after the caller read the table.

        If every app transaction is already committed at or past its version the write is skipped
        (nothing is written; ``CommitResult.skipped`` says so): a retried or replayed batch is a no-op.

        Instead of ``df``, ``write(directory)`` may write the Parquet files (Hive-style partition directories,
        the table's columns minus the partition columns) — the writer's driver-side path writes with pyarrow
        this way; the add actions are built from the footers as for Spark's files. With neither, the commit
        carries only the app transactions and metadata.

        Raises:
            CommitConflict: a concurrent commit conflicts (e.g. it committed one of the same app
                transactions); nothing of this append is visible and its files are deleted.
        """
        return self._commit(table, df, remove=(), data_change=True, app_transactions=app_transactions,
                            metadata=metadata, operation="append", read_version=read_version, write=write)

    def fence(self, table: str, app_transactions: Sequence[AppTransaction], *, read_version: int,
              metadata: Mapping[str, Any] | None = None) -> CommitResult:
        """Commit no file, re-asserting ``app_transactions``, prepared at ``read_version`` (see the port).

        delta-rs fails a commit whose app ids a concurrent commit carried ("Concurrent transaction failed"),
        whatever the versions: that is the conflict a fence is for.
        """
        return self._commit(table, None, remove=(), data_change=False, app_transactions=app_transactions,
                            metadata=metadata, operation="fence", read_version=read_version, fence=True)

    def replace_files(
        self,
        table: str,
        remove: Sequence[str],
        df: DataFrame | None,
        *,
        data_change: bool = False,
        app_transactions: Sequence[AppTransaction] = (),
        metadata: Mapping[str, Any] | None = None,
        read_version: int | None = None,
        before_commit: BeforeCommit | None = None,
        write: WriteFiles | None = None,
    ) -> CommitResult:
        """Remove the live files ``remove`` (paths as :meth:`files` gives them) and add ``df``'s rows, atomically.

        ``data_change=False`` marks a rearrangement of the same rows (compaction), as Delta's
        ``dataChange`` flag does, so streaming readers do not see them twice.

        ``before_commit(uri, new_files)`` runs after the new files are written and before the commit; the
        mapping it returns joins the commit metadata; if it raises, the written files are deleted and
        nothing is committed. Instead of ``df``, ``write(directory)`` may write the Parquet files itself
        (Hive-style partition directories under ``directory``, columns as the table's minus partitions).

        Raises:
            CommitConflict: a file in ``remove`` is no longer live, or a concurrent commit removed it.
        """
        return self._commit(table, df, remove=remove, data_change=data_change, app_transactions=app_transactions,
                            metadata=metadata, operation="replace", read_version=read_version,
                            before_commit=before_commit, write=write)

    def _commit(
        self,
        table: str,
        df: DataFrame | None,
        *,
        remove: Sequence[str],
        data_change: bool,
        app_transactions: Sequence[AppTransaction],
        metadata: Mapping[str, Any] | None,
        operation: str,
        read_version: int | None = None,
        before_commit: BeforeCommit | None = None,
        write: WriteFiles | None = None,
        fence: bool = False,
    ) -> CommitResult:
        uri = embedded_uri(table)
        if df is not None and write is not None:
            raise TableStoreError(f"{uri}: give the rows to add as a DataFrame or as a write function, not both")
        state = None if remove or before_commit is not None else self._log.state(uri)
        if state is not None and appendable(uri, state) and (read_version is None or read_version <= state.version):
            return commit_append(
                uri, state, read_version=read_version, app_transactions=app_transactions,
                write_adds=lambda shape: self._write_files(shape, df, write, data_change),
                custom=metadata_strings(metadata), fence=fence, operation=operation,
                latest=lambda: self._log.state(uri) or LogState(), checkpoint=lambda _: self._log.checkpoint(uri))
        # A swap checks that the files it removes are live at the read version and commits at exactly that
        # version, so it gets a table of its own (swaps are rare); appends may use the shared cached one.
        dt = self._log.table(uri, read_version) if remove else self._log.at_version(uri, read_version)
        read_version = int(dt.version())
        if app_transactions and not fence and self._already_committed(dt, app_transactions):
            return CommitResult(uri, read_version, skipped=True,
                                reason=f"app transactions {txn_text(app_transactions)} already committed")
        removes: list[RemoveAction] = []
        if remove:
            live = {f.path: f for f in live_files(dt)}
            gone = [p for p in remove if p not in live]
            if gone:
                raise CommitConflict(uri, read_version, tuple(t.app_id for t in app_transactions),
                                     f"files to remove are not live at version {read_version}: {gone[:5]}")
            deleted_ms = now_ms()
            removes = [
                # delta-rs URI-encodes the path when it writes the log, as for adds: give it the path as on disk.
                RemoveAction(path=unquote(p), data_change=data_change, deletion_timestamp=deleted_ms,
                             size=live[p].size_bytes, partition_values=dict(live[p].partition_values))
                for p in remove
            ]
        adds, rows, write_dir = self._write_files(TableShape.of_table(dt), df, write, data_change)
        extra: Mapping[str, Any] | None = None
        if before_commit is not None:
            try:
                extra = before_commit(uri, [added_file(a) for a in adds])
            except BaseException:
                if write_dir is not None:
                    delete_tree(write_dir)
                raise
        commit_id = uuid.uuid4().hex
        props = CommitProperties(
            custom_metadata={**metadata_strings(metadata), **metadata_strings(extra), COMMIT_ID: commit_id,
                             ROWS_ADDED: str(rows), BYTES_ADDED: str(sum(a.size for a in adds))},
            app_transactions=[Transaction(t.app_id, t.version) for t in app_transactions] or None,
            # delta-rs 1.6.6 rebases a commit with removes over a concurrent commit that removed the same
            # files (both land: rows doubled). Commits with removes therefore never let delta-rs retry;
            # commit_removes retries itself, only while every file it removes is still live.
            max_commit_retries=0 if removes else self._retries,
        )
        try:
            if removes:
                commit_removes(self._log, dt, uri, [*adds, *removes], remove, props, app_transactions, self._retries)
            else:
                with self._log.lock:
                    if dt is self._log.cached(uri) and dt.version() != read_version:
                        dt = self._log.table(uri, read_version)  # another thread brought the shared table up to date
                    schema, partition_by = dt.schema(), list(dt.metadata().partition_columns) or None
                    with phase(COMMIT, uri):
                        dt.create_write_transaction([*adds, *removes], mode="append", schema=schema,
                                                    partition_by=partition_by, commit_properties=props,
                                                    post_commithook_properties=COMMIT_HOOKS)
        except CommitFailedError as exc:
            # Only a known-failed commit deletes its files; any other error leaves them for vacuum, since
            # an unknown outcome might be a commit that references them.
            if write_dir is not None:
                delete_tree(write_dir)
            latest = self._log.table(uri)
            if app_transactions and not fence and self._already_committed(latest, app_transactions):
                return CommitResult(uri, int(latest.version()), skipped=True,
                                    reason=f"app transactions {txn_text(app_transactions)} committed concurrently")
            raise CommitConflict(uri, read_version, tuple(t.app_id for t in app_transactions), str(exc)) from None
        return CommitResult(
            uri, version_of_commit(dt, read_version, commit_id),
            files_added=len(adds), files_removed=len(removes), rows_added=rows,
            bytes_added=sum(a.size for a in adds), reason=operation,
        )

    def _already_committed(self, dt: DeltaTable, txns: Sequence[AppTransaction]) -> bool:
        versions = self._log.app_versions(dt, [t.app_id for t in txns])
        return all_committed(dt.table_uri, int(dt.version()), txns, versions)

    def _write_files(self, shape: TableShape, df: DataFrame | None, write: WriteFiles | None,
                     data_change: bool) -> tuple[list[AddAction], int, str | None]:
        """Write a commit's new files (:func:`write_new_files`); every commit path calls this right before it
        commits (the seam crash and interleaving tests act at)."""
        return write_new_files(shape, df, write, data_change)

    # ------------------------------------------------------------------------------ log actions
    def log_entries(self, table: str, *, start: int | None = None, end: int | None = None) -> list[LogEntry]:
        """Return the commits ``start``..``end`` (inclusive) as their log files hold them, oldest first.

        The commit files are read directly: delta-rs exposes a snapshot's live files and the commit
        infos, but not which files each version added or removed, which is what a per-version delta needs.

        Raises:
            TableStoreError: ``start`` is older than the oldest commit file left in the log, or a commit
                between ``start`` and ``end`` is missing.
        """
        return self._log.log_entries(embedded_uri(table), start, end)

    def checkpoint_versions(self, table: str) -> list[int]:
        """Return the versions with a complete classic checkpoint (single- or multi-part), oldest first.

        V2 checkpoints (UUID-named, with sidecars) are not listed: delta-rs does not write them.
        """
        return self._log.checkpoint_versions(embedded_uri(table))

    def checkpoint_files(self, table: str, version: int) -> list[FileInfo]:
        """Return the live data files the checkpoint at ``version`` records (its add actions)."""
        return self._log.checkpoint_files(embedded_uri(table), version)

    def create_checkpoint(self, table: str) -> int:
        """Write a checkpoint of the latest version (delta-rs) and return that version."""
        dt = self._log.table(table)
        try:
            dt.create_checkpoint()
        except DeltaError as exc:
            raise TableStoreError(f"{dt.table_uri}: cannot write a checkpoint: {exc}") from None
        return int(dt.version())

    def clean_log(self, table: str) -> int:
        """See :meth:`TableStore.clean_log`; embedded commits leave it to maintenance (:data:`COMMIT_HOOKS`)."""
        try:
            return self._log.clean(embedded_uri(table))
        except DeltaError as exc:
            raise TableStoreError(f"{table}: cannot clean up the log: {exc}") from None

    # --------------------------------------------------------------------------------- metadata
    def history(self, table: str, *, limit: int | None = None) -> list[CommitInfo]:
        """Return the table's commits, newest first, with custom commit metadata separated out."""
        out = []
        for entry in self._log.latest(table).history(limit):
            custom = custom_metadata(entry)
            out.append(CommitInfo(
                version=int(entry["version"]),
                timestamp=datetime.fromtimestamp(entry["timestamp"] / 1000, tz=UTC),
                operation=str(entry.get("operation", "")),
                parameters=entry.get("operationParameters") or {},
                metrics=entry.get("operationMetrics") or {},
                custom_metadata=custom,
            ))
        return out

    def transaction_versions(self, table: str, app_ids: Sequence[str]) -> dict[str, int | None]:
        """Return each app id's committed version, all from one snapshot of the table."""
        if (state := self._log.state(embedded_uri(table))) is not None:
            return {a: state.app_versions.get(a) for a in app_ids}
        return self._log.app_versions(self._log.latest(table), app_ids)

    def transaction_version(self, table: str, app_id: str) -> int | None:
        """Return the latest committed version of app transaction ``app_id``, or None if never committed."""
        return self.transaction_versions(table, [app_id])[app_id]

    def vacuum(self, table: str, *, retention_hours: float = 168.0, dry_run: bool = False) -> VacuumReport:
        """Delete data files no version within ``retention_hours`` references, orphans included.

        Orphans are files of writes that never committed (a crashed or conflicting writer). Keep the
        retention longer than the longest write: a write still in progress has not committed yet, and
        its files look exactly like orphans.
        """
        uri = embedded_uri(table)
        dt = self._log.table(uri)
        hours = max(0, math.ceil(retention_hours))
        removed = dt.vacuum(retention_hours=hours, dry_run=dry_run, enforce_retention_duration=False, full=True)
        staging = stale_write_dirs(uri, timedelta(hours=retention_hours), dry_run)
        return VacuumReport(uri, dry_run, tuple(sorted(removed)), tuple(sorted(staging)))

