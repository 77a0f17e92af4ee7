"""The native adapter's commits: Delta's public writer for a plain append, an ``OptimisticTransaction`` for the rest.

:class:`NativeCommits` writes the data files (``txn.writeFiles``, or a ``write`` function under a fresh
directory of the table), builds the protocol's actions, makes the commit depend on each app transaction,
carries lakeshard's commit metadata in ``userMetadata``, and tells a replay from a conflict (see
:mod:`lakeshard.lake.native` for which Delta API each operation uses, and why).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from lakeshard.errors import CommitConflict, TableNotFound, TableStoreError
from lakeshard.lake.base import all_committed, new_write_dir, now_ms, txn_text
from lakeshard.lake.native.conflicts import conflict_or_raise, is_concurrent_modification
from lakeshard.lake.native.jvm import scala_call
from lakeshard.lake.native.log import supported
from lakeshard.lake.protocol.datafiles import (
    conform,
    footer_stats_and_values,
    stats_columns,
    written_parquet,
    written_partition_values,
)
from lakeshard.lake.protocol.filesystem import normalise_uri
from lakeshard.lake.protocol.log import (
    COMMIT_ID,
    LogState,
    add_action,
    encode_user_metadata,
    file_from_action,
    remove_action,
    txn_action,
)
from lakeshard.lake.types import (
    BYTES_ADDED,
    ROWS_ADDED,
    AppTransaction,
    BeforeCommit,
    CommitResult,
    FileInfo,
    WriteFiles,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakeshard.lake.native.jvm import DeltaJvm
    from lakeshard.lake.native.log import NativeLog

__all__ = ["COMMIT_LOCK", "USER_METADATA_CONF", "NativeCommits", "session_conf"]

_LOG = logging.getLogger(__name__)

USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
# The userMetadata session conf is read by Delta at commit time: commits of this process take turns.
COMMIT_LOCK = threading.Lock()


@contextlib.contextmanager
def session_conf(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    """Set the session conf ``key`` to ``value`` while the block runs, then restore (or unset) it."""
    previous = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, previous)


class NativeCommits:
    """The commits of a :class:`~lakeshard.lake.native.NativeTableStore`, made through Delta's JVM classes.

    Args:
        spark: the store's classic session.
        jvm: gives its :class:`~lakeshard.lake.native.jvm.DeltaJvm` (transactions, actions, the table's filesystem) when
            a commit needs Delta's internal transaction API; it raises on a session without py4j.
        log: its :class:`~lakeshard.lake.native.log.NativeLog` (the state a commit is checked against).
    """

    def __init__(self, spark: SparkSession, jvm: Callable[[], DeltaJvm], log: NativeLog) -> None:
        self.spark = spark
        self._delta_jvm = jvm
        self._log = log

    @property
    def _delta(self) -> DeltaJvm:
        return self._delta_jvm()

    def commit(
        self,
        table: str,
        df: DataFrame | None,
        *,
        remove: Sequence[str],
        data_change: bool,
        app_transactions: Sequence[AppTransaction],
        metadata: Mapping[str, Any] | None,
        read_version: int | None,
        operation: str,
        before_commit: BeforeCommit | None = None,
        write: WriteFiles | None = None,
    ) -> CommitResult:
        from pyspark.sql.types import StructType

        uri = normalise_uri(table)
        if df is not None and write is not None:
            raise TableStoreError(f"{uri}: give the rows to add as a DataFrame or as a write function, not both")
        txn = scala_call(self._delta.delta_log(uri), "startTransaction")
        start = int(txn.readVersion())
        if start < 0:
            raise TableNotFound(f"no Delta table at {uri}")
        now = self._log.state(uri, start)
        supported(uri, now, operation, write=True)
        based_on = start if read_version is None else read_version
        # The commit now depends on these app ids: a concurrent commit of one of them fails ours.
        self._delta.read_app_ids(txn, [t.app_id for t in app_transactions])
        if app_transactions:
            done = self.replayed(uri, now, based_on, app_transactions)
            if done is not None:
                return done
        gone = [p for p in remove if p not in now.files]
        if gone:
            raise CommitConflict(uri, based_on, tuple(t.app_id for t in app_transactions),
                                 f"files to remove are not live at version {start}: {gone[:5]}")
        millis = now_ms()
        new_files: list[tuple[FileInfo, dict[str, Any]]] = []
        # Delta leaves the files of a failed commit to VACUUM; deleting them at once is only tidier.
        written_paths: list[str] = []
        if df is not None:
            written = self._delta.write_files(txn, conform(df, StructType.fromJson(now.schema_json), uri))
            for action in written:
                if "add" in action:
                    action["add"]["dataChange"] = data_change
                    new_files.append((file_from_action(action["add"], action["add"].get("modificationTime")), action))
            written_paths = [f"{uri}/{unquote(f.path)}" for f, _ in new_files]
        elif write is not None:
            new_files, write_dir = self._write_with(uri, now, write, data_change)
            written_paths = [write_dir]

        def cleanup() -> None:
            for path in written_paths:
                self._delta.delete(path)

        rows = sum(f.num_records or 0 for f, _ in new_files)
        size = sum(f.size_bytes for f, _ in new_files)
        extra: Mapping[str, Any] | None = None
        if before_commit is not None:
            try:
                extra = before_commit(uri, [replace(f, path=unquote(f.path)) for f, _ in new_files])
            except BaseException:
                cleanup()
                raise
        commit_id = uuid.uuid4().hex
        user_metadata = encode_user_metadata({
            **(metadata or {}), **(extra or {}), COMMIT_ID: commit_id, ROWS_ADDED: str(rows), BYTES_ADDED: str(size),
        })
        actions = [a for _, a in new_files]
        actions += [remove_action(now.files[p], data_change=data_change, deletion_millis=millis) for p in remove]
        actions += [txn_action(t, millis=millis) for t in app_transactions]
        recorded = self._delta.manual_update() if remove else self._delta.append_operation()
        try:
            with self._user_metadata(user_metadata):
                version = int(txn.commit(self._delta.seq([self._delta.action(a) for a in actions]), recorded))
        except Exception as exc:
            # Delta can report a failure for a commit whose file is in the log (a step after the write failed,
            # or a retry that met its own commit as the winner): the log decides, and its files stay.
            landed = self._log.find_commit(uri, start, commit_id)
            if landed is None:
                if not is_concurrent_modification(exc):
                    raise
                cleanup()
                return self._lost(uri, based_on, app_transactions, exc)
            _LOG.warning("%s: Delta reported %s for commit %d, which is in the log; kept", uri,
                         type(exc).__name__, landed.version)
            version = landed.version
        return CommitResult(uri, version, files_added=len(new_files), files_removed=len(remove), rows_added=rows,
                            bytes_added=size, reason=operation)

    def _write_with(self, uri: str, state: LogState, write: WriteFiles,
                    data_change: bool) -> tuple[list[tuple[FileInfo, dict[str, Any]]], str]:
        """Let ``write`` write Parquet under a fresh directory of the table; return its files and add actions.

        The writer runs in this (driver) process, so the table's storage is reachable from here; the
        footers are read the same way.
        """
        write_id, target = new_write_dir(uri)
        try:
            write(target)
        except BaseException:
            self._delta.delete(target)
            raise
        fs, written = written_parquet(target)
        indexed = stats_columns(state.metadata.get("configuration") or {},
                                [f["name"] for f in state.schema_json["fields"]])
        out: list[tuple[FileInfo, dict[str, Any]]] = []
        for info, relative in written:
            n, stats, values = footer_stats_and_values(fs, info.path, indexed)
            if n == 0:
                fs.delete_file(info.path)
                continue
            file = FileInfo(
                path=_log_path(f"{write_id}/{relative}"), size_bytes=int(info.size or 0), num_records=n,
                partition_values=written_partition_values(relative, state.partition_columns, values),
                modification_time=datetime.fromtimestamp(int(info.mtime_ns or 0) / 1e9, tz=UTC),
            )
            out.append((file, add_action(file, data_change=data_change, stats=stats)))
        return out, target

    def replayed(self, uri: str, now: LogState, based_on: int,
                  app_transactions: Sequence[AppTransaction]) -> CommitResult | None:
        """Return a skipped result when the app transactions are already committed, None when they are new.

        A commit after ``based_on`` that changed the table's metadata is a conflict too: Delta fails a
        transaction that overlaps a metadata change, and the closing fence is one (:meth:`PublicCommits.fence
        <lakeshard.lake.native.public.PublicCommits.fence>`), so a writer whose transaction starts after a fence
        that landed after the version it read still loses, as one whose transaction overlapped it does.

        Raises:
            CommitConflict: some are committed and some are not, or a commit after ``based_on`` (the version
                the caller read) carried one of them without reaching this commit's version, or changed the
                table's metadata.
        """
        if not app_transactions:
            return None
        if _already_committed(uri, now, app_transactions):
            return CommitResult(uri, now.version, skipped=True,
                                reason=f"app transactions {txn_text(app_transactions)} already committed")
        if based_on < now.version:
            ours = {t.app_id for t in app_transactions}
            for entry, _ in self._log.entries(uri, based_on + 1, now.version):
                touched = sorted(ours & {t.app_id for t in entry.app_transactions})
                if touched:
                    raise CommitConflict(uri, based_on, tuple(sorted(ours)),
                                         f"commit {entry.version} (after the version read) carried {touched}")
                if entry.metadata_changed:
                    raise CommitConflict(uri, based_on, tuple(sorted(ours)),
                                         f"commit {entry.version} ({entry.operation}, after the version read) "
                                         "changed the table's metadata")
        return None

    def _lost(self, uri: str, based_on: int, app_transactions: Sequence[AppTransaction],
              exc: BaseException) -> CommitResult:
        latest = self._log.state(uri)
        if app_transactions and _already_committed(uri, latest, app_transactions):
            return CommitResult(uri, latest.version, skipped=True,
                                reason=f"app transactions {txn_text(app_transactions)} committed concurrently")
        conflict_or_raise(exc, uri, based_on, [t.app_id for t in app_transactions])

    @contextlib.contextmanager
    def _user_metadata(self, value: str) -> Iterator[None]:
        """Set Delta's session-wide ``userMetadata`` for one commit (the OptimisticTransaction API has no option)."""
        with COMMIT_LOCK, session_conf(self.spark, USER_METADATA_CONF, value):
            self._delta.activate()
            yield


def _already_committed(uri: str, state: LogState, txns: Sequence[AppTransaction]) -> bool:
    return all_committed(uri, state.version, txns, state.app_versions)


def _log_path(relative: str) -> str:
    """Return a path relative to the table root as the Delta log spells it (URI-encoded, '/' kept)."""
    from urllib.parse import quote

    return quote(relative, safe="/=")
