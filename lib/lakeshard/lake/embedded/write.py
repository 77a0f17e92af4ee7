"""The embedded adapter's write side: Parquet files under a fresh directory become delta-rs add actions.

Also here: a swap's commit (re-tried only while every file it removes is still live), the version a commit
landed at, and vacuum's removal of write directories a crashed or failed write left behind.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, PostCommitHookProperties, RemoveAction

from lakeshard.errors import TableStoreError, UnaccountedRows
from lakeshard.lake.base import WRITE_PREFIX, new_write_dir, now_ms
from lakeshard.lake.embedded.log import DeltaRsLog, live_files
from lakeshard.lake.protocol.datafiles import (
    conform,
    footer_stats_and_values,
    is_hidden,
    metadata_stats,
    stats_columns,
    written_parquet,
    written_partition_values,
)
from lakeshard.lake.protocol.filesystem import filesystem, normalise_uri
from lakeshard.lake.protocol.log import COMMIT_ID, LogState
from lakeshard.lake.trace import COMMIT, WRITE, phase
from lakeshard.lake.types import AppTransaction, FileInfo, WriteFiles, WrittenFile

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "CREATE_STAGING_PREFIX",
    "LINK_PROBE_PREFIX",
    "STAGED_COMMIT_PREFIX",
    "STAGED_LOG_PREFIXES",
    "TableShape",
    "added_file",
    "collect_adds",
    "commit_removes",
    "delete_tree",
    "metadata_strings",
    "stale_write_dirs",
    "version_of_commit",
    "write_new_files",
    "write_spark_files",
    "written_adds",
]

# Names of what a commit or a create stages before it links it into place (vacuum removes old ones).
STAGED_COMMIT_PREFIX = "_commit_"  # _delta_log/_commit_<uuid>.json.tmp, delta-rs' own name for a staged commit
LINK_PROBE_PREFIX = "_link_probe_"  # _delta_log/_link_probe_<uuid>.tmp: does the file system make hard links?
STAGED_LOG_PREFIXES = (STAGED_COMMIT_PREFIX, LINK_PROBE_PREFIX)
CREATE_STAGING_PREFIX = "_lakeshard_create_"  # <table>/_lakeshard_create_<uuid>/: a create before its link

# A swap (removes + adds) re-tries against the newest version at most this often when other commits land.
_SWAP_RETRIES = 10
# Threads that read the footers of newly written files: pyarrow decodes Parquet without the GIL.
_READ_THREADS = 4


@dataclass(frozen=True)
class TableShape:
    """What writing files into a table needs to know of it: where it is, its columns, partitioning and properties.

    It comes from a delta-rs snapshot (:meth:`of_table`) or from a replayed log state (:meth:`of_state`): a blind
    append (:mod:`lakeshard.lake.embedded.append`) writes its files without a delta-rs snapshot.
    """

    uri: str
    partition_columns: tuple[str, ...]
    configuration: Mapping[str, str | None]
    schema_json: Mapping[str, Any]  # the table's schema as Delta's JSON (a Spark StructType)

    @classmethod
    def of_table(cls, dt: DeltaTable) -> TableShape:
        meta = dt.metadata()
        return cls(normalise_uri(dt.table_uri), tuple(meta.partition_columns), dict(meta.configuration),
                   json.loads(dt.schema().to_json()))

    @classmethod
    def of_state(cls, uri: str, state: LogState) -> TableShape:
        return cls(uri, tuple(state.partition_columns), dict(state.metadata.get("configuration") or {}),
                   state.schema_json)

    @property
    def column_names(self) -> list[str]:
        return [str(f["name"]) for f in self.schema_json.get("fields", [])]


def write_new_files(shape: TableShape, df: DataFrame | None, write: WriteFiles | None, data_change: bool
                    ) -> tuple[list[AddAction], int, str | None]:
    """Write the rows to add under a fresh directory of the table, with Spark (``df``) or ``write(directory)``;
    return their add actions, rows and that directory (neither: no file, no directory)."""
    if df is not None:
        from pyspark.sql.types import StructType

        frame = conform(df, StructType.fromJson(dict(shape.schema_json)), shape.uri)
        write_id, target = new_write_dir(shape.uri)
        with phase(WRITE, shape.uri):
            # Local tables are plain paths (see normalise_uri) and go to Spark as such: Hadoop takes the text of
            # a "file://" string literally, so a space in it would become a directory named "odd%20names".
            return write_spark_files(shape, frame, target, write_id, target, data_change)
    if write is None:
        return [], 0, None
    write_id, target = new_write_dir(shape.uri)
    with phase(WRITE, shape.uri):
        try:
            written = write(target)
        except BaseException:
            delete_tree(target)
            raise
        if written is None:
            return collect_adds(shape, write_id, target, data_change)
        return written_adds(shape, write_id, target, written, data_change)


def written_adds(shape: TableShape, write_id: str, target: str, written: Sequence[WrittenFile], data_change: bool
                 ) -> tuple[list[AddAction], int, str]:
    """Return add actions for the Parquet files a write function reports it wrote under ``target``: their stats
    come from the footers the writer kept (the same stats :func:`collect_adds` reads back), no file is opened.

    Raises:
        TableStoreError: a file's partition values lack one of the table's partition columns.
    """
    parts = list(shape.partition_columns)
    indexed = stats_columns(shape.configuration, shape.column_names)
    millis = now_ms()
    adds: list[AddAction] = []
    rows = 0
    for f in written:
        n, stats = metadata_stats(f.footer, indexed)
        if n == 0:
            fs, base = filesystem(target)
            fs.delete_file(f"{base}/{f.path}")
            continue
        missing = [c for c in parts if c not in f.partition_values]
        if missing:
            raise TableStoreError(f"{shape.uri}: written file {f.path} has no partition values for {missing}; "
                                  f"expected values for {parts}")
        rows += n
        adds.append(AddAction(
            path=f"{write_id}/{f.path}",
            size=f.size_bytes,
            partition_values={c: f.partition_values[c] for c in parts},
            modification_time=millis,
            data_change=data_change,
            stats=json.dumps(stats, separators=(",", ":")),
        ))
    return adds, rows, target


def collect_adds(shape: TableShape, write_id: str, target: str, data_change: bool
                 ) -> tuple[list[AddAction], int, str]:
    """Return add actions (stats from the footers) for the Parquet files written under ``target``."""
    parts = list(shape.partition_columns)
    fs, written = written_parquet(target)
    adds: list[AddAction] = []
    rows = 0
    # One footer per file: a routed batch writes a file per shard per task, so read them on threads.
    indexed = stats_columns(shape.configuration, shape.column_names)
    with ThreadPoolExecutor(max_workers=_READ_THREADS) as pool:
        footers = list(pool.map(lambda item: footer_stats_and_values(fs, item[0].path, indexed), written))
    for (info, relative), (n, stats, values) in zip(written, footers, strict=True):
        if n == 0:
            fs.delete_file(info.path)
            continue
        rows += n
        adds.append(AddAction(
            # delta-rs URI-encodes the path itself when it writes the log: give it the path as on disk.
            path=f"{write_id}/{relative}",
            size=int(info.size or 0),
            partition_values=written_partition_values(relative, parts, values),
            modification_time=int(info.mtime_ns // 1_000_000) if info.mtime_ns else now_ms(),
            data_change=data_change,
            stats=json.dumps(stats, separators=(",", ":")),
        ))
    return adds, rows, target


def write_spark_files(shape: TableShape, frame: DataFrame, spark_path: str, write_id: str, target: str,
                      data_change: bool) -> tuple[list[AddAction], int, str]:
    """Return add actions for ``frame`` written by Spark as Parquet under ``target`` (``spark_path`` as Spark
    names it), after checking that they hold every row Spark reported writing.

    Spark counts the rows it writes through an :class:`~pyspark.sql.Observation` on the written frame (works on
    classic and Spark Connect sessions); the adds come from the files this process finds. Fewer rows found means
    the committer cannot see (all of) what the executors wrote: committing then would move progress past rows
    that are in no commit.

    Raises:
        UnaccountedRows: the files found hold a different number of rows; the files are deleted again.
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observation = Observation(f"lakeshard_write_{write_id.replace('-', '_')}")
    parts = list(shape.partition_columns)
    writer = frame.observe(observation, F.count(F.lit(1)).alias("rows")).write.mode("error")
    if parts:
        writer = writer.partitionBy(*parts)
    writer.parquet(spark_path)
    written = int(observation.get["rows"])
    adds, rows, target = collect_adds(shape, write_id, target, data_change)
    if rows != written:
        delete_tree(target)
        raise UnaccountedRows(shape.uri, target, written, rows, len(adds))
    return adds, rows, target


def added_file(add: AddAction) -> FileInfo:
    """Return what :meth:`~lakeshard.lake.embedded.EmbeddedTableStore.files` will say about a file once ``add``
    is committed."""
    stats = json.loads(add.stats)
    return FileInfo(
        path=add.path, size_bytes=add.size, num_records=stats.get("numRecords"),
        partition_values=dict(add.partition_values),
        modification_time=datetime.fromtimestamp(add.modification_time / 1000, tz=UTC),
        min_values=stats.get("minValues", {}), max_values=stats.get("maxValues", {}),
        null_counts=stats.get("nullCount", {}),
    )


# After each commit delta-rs checkpoints every 100 commits and, by default, lists the whole log to delete the
# commit files past ``delta.logRetentionDuration``: a listing per commit, linear in the log's length (30 days of
# commits). The cleanup runs once an hour instead, in compact_books (:meth:`EmbeddedTableStore.clean_log`).
COMMIT_HOOKS = PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)


def commit_removes(log: DeltaRsLog, dt: DeltaTable, uri: str, actions: Sequence[AddAction | RemoveAction],
                   remove: Sequence[str], props: CommitProperties, app_transactions: Sequence[AppTransaction] = (),
                   retries: int | None = None) -> None:
    """Commit a swap, re-trying on the newest version only while every file to remove is still live
    and no concurrent commit carried one of its app transactions (e.g. a replace lock's fencing token).

    Raises:
        CommitFailedError: the log moved too often, a concurrent commit removed one of the files, or it
            committed one of the same app transactions.
    """
    attempts = max(retries or 0, _SWAP_RETRIES)
    for attempt in range(attempts + 1):
        try:
            schema, partition_by = dt.schema(), list(dt.metadata().partition_columns) or None
            with phase(COMMIT, uri):
                dt.create_write_transaction(list(actions), mode="append", schema=schema,
                                            partition_by=partition_by, commit_properties=props,
                                            post_commithook_properties=COMMIT_HOOKS)
            return
        except CommitFailedError:
            dt = log.table(uri)
            taken = [t.app_id for t in app_transactions if (v := dt.transaction_version(t.app_id)) is not None
                     and v >= t.version]
            if taken:
                raise CommitFailedError(f"a concurrent commit carried app transactions {taken}") from None
            live = {f.path for f in live_files(dt)}
            gone = [p for p in remove if p not in live]
            if gone or attempt == attempts:
                raise CommitFailedError(
                    f"a concurrent commit removed files this swap removes: {gone[:5]}" if gone
                    else f"the log moved {attempts + 1} times while committing this swap") from None


def version_of_commit(dt: DeltaTable, read_version: int, commit_id: str) -> int:
    """Return the version our commit landed at: delta-rs may have retried it past other commits.

    The commit files after ``read_version`` are read directly: delta-rs' ``history()`` numbers
    entries wrongly when it races a concurrent commit (seen with deltalake 1.6.6).
    """
    fs, base = filesystem(normalise_uri(dt.table_uri))
    version = read_version + 1
    while True:
        path = f"{base}/_delta_log/{version:020d}.json"
        try:
            with fs.open_input_stream(path) as stream:
                lines = stream.read().decode("utf-8").split("\n")  # not splitlines(): ids may hold U+2028
            if any(json.loads(line).get("commitInfo", {}).get(COMMIT_ID) == commit_id for line in lines if line):
                return version
        except FileNotFoundError:
            raise TableStoreError(
                f"{dt.table_uri}: commit {commit_id} succeeded but no commit after version {read_version} "
                "carries it"
            ) from None
        version += 1


def delete_tree(target: str) -> None:
    """Delete a write directory and everything under it (gone already is fine)."""
    fs, base = filesystem(target)
    try:
        fs.delete_dir(base)
    except (FileNotFoundError, OSError):
        pass


def stale_write_dirs(uri: str, retention: timedelta, dry_run: bool) -> list[str]:
    """Remove what interrupted writes left, once older than ``retention``: Spark's leftovers (``_temporary``),
    emptied write directories, and what a process killed inside a commit or a create leaves (a staged commit file
    in ``_delta_log``, a create's staging directory; delta-rs stages its commits under the same name)."""
    fs, base = filesystem(uri)
    cutoff = datetime.now(UTC) - retention
    removed: list[str] = []

    def old(mtime: datetime | None) -> bool:  # no time known (an object store's directory): old
        return mtime is None or mtime.replace(tzinfo=mtime.tzinfo or UTC) <= cutoff

    for info in fs.get_file_info(pafs.FileSelector(base, recursive=False)):
        name = info.base_name
        if info.type != pafs.FileType.Directory or not name.startswith((WRITE_PREFIX, CREATE_STAGING_PREFIX)):
            continue
        inside = fs.get_file_info(pafs.FileSelector(info.path, recursive=True))
        if not old(max((i.mtime for i in inside if i.mtime is not None), default=info.mtime)):
            continue
        data_left = [i for i in inside if i.type == pafs.FileType.File
                     and not is_hidden(i.path[len(info.path):].lstrip("/"))]
        if data_left and name.startswith(WRITE_PREFIX):
            continue  # still holds live (or younger) files; only the log may decide about them
        removed.append(name)
        if not dry_run:
            fs.delete_dir(info.path)
    for info in fs.get_file_info(pafs.FileSelector(f"{base}/_delta_log", recursive=False, allow_not_found=True)):
        if (info.type == pafs.FileType.File and info.base_name.startswith(STAGED_LOG_PREFIXES)
                and info.base_name.endswith(".tmp") and old(info.mtime)):
            removed.append(f"_delta_log/{info.base_name}")
            if not dry_run:
                fs.delete_file(info.path)
    return removed


def metadata_strings(metadata: Mapping[str, Any] | None) -> dict[str, str]:
    """Return commit metadata as delta-rs takes it: strings as they are, anything else as JSON."""
    if not metadata:
        return {}
    return {k: v if isinstance(v, str) else json.dumps(v, default=str) for k, v in metadata.items()}
