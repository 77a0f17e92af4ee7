"""The embedded adapter's view of its tables' Delta logs through delta-rs: snapshots, app versions, listings.

:class:`DeltaRsLog` keeps one ``DeltaTable`` per table and brings it up to date incrementally, carries app
transaction versions forward through the commits since they were read, keeps the latest file listing, and
reads commits and checkpoints from the log files directly (delta-rs does not say which files a version
added or removed).

The latest live files are replayed without listing ``_delta_log``
(:func:`~lakeshard.lake.embedded.probed_log.probed_state`): delta-rs lists the whole directory on every load and update,
so a query's planning cost grew with the number of commits the log keeps.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import DeltaError, TableNotFoundError

from lakeshard.errors import TableNotFound, TableStoreError, UnsupportedByAdapter
from lakeshard.lake.base import log_range
from lakeshard.lake.embedded.probed_log import missing, probed_files, probed_state
from lakeshard.lake.protocol.filesystem import filesystem, normalise_uri
from lakeshard.lake.protocol.log import LogState, checkpoint_parts, commit_versions, file_from_action, parse_commit
from lakeshard.lake.types import FileInfo, LogEntry

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["FUSE_PREFIXES", "DeltaRsLog", "arrow_schema_from_json", "arrow_schema_of", "commit_file_versions",
           "embedded_uri", "live_files", "spark_schema_of"]

# Databricks' FUSE mounts of Unity Catalog volumes and DBFS: no atomic put-if-absent, so no safe delta-rs commit.
FUSE_PREFIXES = ("/Volumes/", "/dbfs/", "dbfs:")


def embedded_uri(table: str) -> str:
    """Return the table's location as the embedded adapter uses it (:func:`normalise_uri`).

    Raises:
        UnsupportedByAdapter: the location is on a FUSE mount (``/Volumes/...``, ``/dbfs/...``, ``dbfs:``), where
            delta-rs' commits are unsafe: the mount has no atomic put-if-absent for the next log entry, so two
            writers can both "win" a version (or the create fails with "Function not implemented").
    """
    if table.startswith(FUSE_PREFIXES) or table.rstrip("/") in ("/Volumes", "/dbfs"):
        raise UnsupportedByAdapter(
            f"{table}: the embedded adapter (delta-rs commits) refuses FUSE paths such as /Volumes/... and /dbfs/...: "
            "they have no atomic put-if-absent, so concurrent commits are unsafe. Use the native adapter "
            "(spark.adapter = 'native', on a Databricks runtime or Spark Connect session with Delta), or give the "
            "embedded adapter an object-store URI (s3://, abfss://, gs://) it commits to directly"
        )
    return normalise_uri(table)


class DeltaRsLog:
    """What a store knows of its tables' logs (latest DeltaTable, app transaction versions, file listing).

    Args:
        storage_options: passed to delta-rs for object stores (credentials, endpoints).
    """

    def __init__(self, storage_options: Mapping[str, str] | None) -> None:
        self._storage = dict(storage_options) if storage_options else None
        self._snapshots: dict[str, DeltaTable] = {}  # per table, its latest state seen (see latest)
        self._txns: dict[str, _AppVersions] = {}  # per table, app transaction versions read so far
        self._listings: dict[str, tuple[int, list[FileInfo]]] = {}  # per table, its last file listing
        self._probed: dict[str, LogState] = {}  # per table, its latest state replayed without a listing
        # Threads sharing a store share those DeltaTables: bringing one up to date and committing on it
        # take turns, so no commit is prepared at one version and sent from another (see the store's _commit).
        self.lock = threading.RLock()

    def table(self, table: str, version: int | None = None) -> DeltaTable:
        """Return the table loaded afresh (at ``version``, else the latest), for a commit or a look of its own.

        Raises:
            TableNotFound: no Delta table at ``table``.
            TableStoreError: it cannot be loaded (at that version).
        """
        uri = embedded_uri(table)
        try:
            return DeltaTable(uri, version=version, storage_options=self._storage)
        except TableNotFoundError:
            raise TableNotFound(f"no Delta table at {uri}") from None
        except DeltaError as exc:
            _raise_what_is_damaged(uri)
            # delta-rs appends a native backtrace to some messages: its first line says what broke.
            first = str(exc).strip().split("\n", 1)[0]
            if version is not None:
                raise TableStoreError(f"{uri}: cannot load the Delta table at version {version}: {first}") from None
            raise TableStoreError(f"{uri}: cannot load the Delta table: {first}") from None

    def latest(self, table: str) -> DeltaTable:
        """Return the table at its latest version, for a read-only look (nothing mutates or commits on it).

        One DeltaTable per table is kept and brought up to date incrementally, reading only the commits since
        the last look: a writer step asks for versions, progress and file lists many times, and a fresh load
        replays the log from its last checkpoint every time. Like Spark's cached DeltaLog this assumes a table
        is not deleted and re-created at the same location by another process while this store is in use
        (the store's ``create`` forgets the table's state; a cached version whose commit file is gone is reloaded).
        """
        uri = embedded_uri(table)
        with self.lock:
            return self._latest_locked(uri)

    def _latest_locked(self, uri: str) -> DeltaTable:
        cached = self._snapshots.get(uri)
        if cached is not None:
            # delta-rs lists the whole _delta_log to look for newer commits, a cost that grows with the commits
            # the log keeps; commits are put-if-absent, so the next version's commit file alone says whether
            # there is any. Most looks find none (a run asks for versions many times per commit).
            fs, base = filesystem(uri)
            try:
                version = int(cached.version())
                if missing(fs, f"{base}/_delta_log/{version + 1:020d}.json"):
                    if not missing(fs, f"{base}/_delta_log/{version:020d}.json"):
                        return cached
                else:
                    cached.update_incremental()
                    if not missing(fs, f"{base}/_delta_log/{cached.version():020d}.json"):
                        return cached
            except DeltaError:
                pass
            self.forget(uri)
        dt = self.table(uri)
        self._snapshots[uri] = dt
        return dt

    def known(self, uri: str) -> bool:
        """Return whether the table is known to exist: a snapshot or replayed state of it is kept and its commit file
        is still there (one file look; delta-rs' own check lists the log)."""
        with self.lock:
            cached, probed = self._snapshots.get(uri), self._probed.get(uri)
            if cached is None and probed is None:
                return False
            version = int(cached.version()) if cached is not None else probed.version  # type: ignore[union-attr]
            fs, base = filesystem(uri)
            return not missing(fs, f"{base}/_delta_log/{version:020d}.json")

    def at_version(self, uri: str, read_version: int | None) -> DeltaTable:
        """Return the table at ``read_version`` (None: the latest) to prepare a commit on.

        Committing through a DeltaTable does not move it (delta-rs leaves its snapshot where it was), so the
        cached one serves as long as it sits exactly at ``read_version``; the next :meth:`latest` brings it up
        to date. Loading a table replays its log and builds its file list, which costs more the bigger the
        table is: a writer step that loaded it afresh for each commit slowed down as ``events`` grew.
        """
        if read_version is None:
            return self.latest(uri)
        cached = self._snapshots.get(uri)
        if cached is not None and cached.version() == read_version:
            return cached
        return self.table(uri, read_version)

    def cached(self, uri: str) -> DeltaTable | None:
        """Return the table's shared DeltaTable (the one :meth:`latest` brings up to date), None before any look."""
        return self._snapshots.get(uri)

    def forget(self, uri: str) -> None:
        """Drop what is known of the table: its next look loads it afresh."""
        self._snapshots.pop(uri, None)
        self._txns.pop(uri, None)
        self._listings.pop(uri, None)
        self._probed.pop(uri, None)

    def app_versions(self, dt: DeltaTable, app_ids: Sequence[str]) -> dict[str, int | None]:
        """Return each app id's version at ``dt``'s version.

        delta-rs answers ``transaction_version`` by scanning the log since its last checkpoint, once per app
        id, so a writer asking for its shards' progress every step paid more the longer the log got. Here an
        answer, once known at one version, is carried forward through the ``txn`` actions of the commits
        after it (read from their commit files, only those), so each commit's file is read once.
        """
        with self.lock:
            return self._app_versions_locked(dt, app_ids)

    def _app_versions_locked(self, dt: DeltaTable, app_ids: Sequence[str]) -> dict[str, int | None]:
        uri = embedded_uri(dt.table_uri)
        version = int(dt.version())
        known = self._txns.get(uri)
        if known is not None and known.version > version:  # an older snapshot: a commit prepared back then
            if len(app_ids) > _ONE_BY_ONE_MAX and (then := _AppVersions.read_all(uri, version)) is not None:
                return {a: then.versions.get(a) for a in app_ids}
            return {a: None if (v := dt.transaction_version(a)) is None else int(v) for a in app_ids}
        if known is None or (known.version < version and not known.advance(uri, version)):
            known = self._txns[uri] = _AppVersions(version)
        unknown = [] if known.complete else [a for a in app_ids if a not in known.versions]
        if len(unknown) > _ONE_BY_ONE_MAX and (whole := _AppVersions.read_all(uri, version)) is not None:
            known = self._txns[uri] = whole  # every app id at this version: one read instead of a scan each
            unknown = []
        for a in unknown:
            v = dt.transaction_version(a)
            known.versions[a] = None if v is None else int(v)
        return {a: known.versions.get(a) for a in app_ids}

    def clean(self, uri: str) -> int:
        """Delete the commit files past ``delta.logRetentionDuration`` that a checkpoint supersedes (delta-rs'
        ``cleanup_metadata``); return how many went."""
        before = len(commit_file_versions(uri))
        with self.lock:  # the kept snapshot: loading ``events`` afresh would replay its checkpoint
            self._latest_locked(uri).cleanup_metadata()
        return before - len(commit_file_versions(uri))

    def files(self, uri: str, version: int | None = None) -> list[FileInfo]:
        """Return the live data files of the table (latest or at ``version``) with their stats.

        The latest listing is kept until the table moves: a version's files never change. A ``version`` that is
        the latest one (a reader that just asked for the version) is served from it too, not from a fresh load.
        """
        with self.lock:
            if (probed := self._probe(uri)) is not None and version in (None, probed[0]):
                return list(probed[1])
            dt = self.latest(uri)
            if version is not None and version != dt.version():
                return live_files(self.table(uri, version))
            listed = self._listings.get(uri)
            if listed is None or listed[0] != dt.version():
                listed = (int(dt.version()), live_files(dt))
                self._listings[uri] = listed
            return list(listed[1])

    def state(self, uri: str) -> LogState | None:
        """Return the table's latest state from :func:`probed_state` (brought forward from the state probed last
        time: a read per new commit), or None when the log must be read by delta-rs: it is on an object store (whose
        credentials and endpoint only delta-rs is given), or :func:`probed_state` cannot replay it."""
        if "://" in uri:  # normalise_uri leaves local tables as plain paths
            return None
        with self.lock:
            state = probed_state(uri, self._probed.get(uri))
            if state is None:
                self._probed.pop(uri, None)
            else:
                self._probed[uri] = state
            return state

    def latest_version(self, uri: str) -> int:
        """Return the table's latest version, from :meth:`state` when it can (a delta-rs snapshot brought up to
        date costs time linear in the table's live files)."""
        state = self.state(uri)
        return state.version if state is not None else int(self.latest(uri).version())

    def checkpoint(self, uri: str) -> None:
        """Write a checkpoint of the latest version with delta-rs, on the kept snapshot brought up to date."""
        with self.lock:
            self._latest_locked(uri).create_checkpoint()

    def _probe(self, uri: str) -> tuple[int, list[FileInfo]] | None:
        """Return the latest version and its live files from :meth:`state`, or None when delta-rs must say."""
        state = self.state(uri)
        if state is None:
            return None
        listed = self._listings.get(uri)
        if listed is None or listed[0] != state.version:
            listed = self._listings[uri] = (state.version, probed_files(state))
        return listed

    def log_entries(self, uri: str, start: int | None, end: int | None) -> list[LogEntry]:
        """Return the commits ``start``..``end`` (inclusive) as their commit files hold them, oldest first.

        Raises:
            TableStoreError: ``start`` is older than the oldest commit file left in the log, or a commit
                between ``start`` and ``end`` is missing.
        """
        latest = self.latest_version(uri)
        fs, base = filesystem(uri)
        if start is not None:  # read by name: no listing of a log that keeps growing
            try:
                return [_log_entry(fs, uri, base, v)
                        for v in range(start, (latest if end is None else min(end, latest)) + 1)]
            except FileNotFoundError:
                pass  # cleaned up, or never there: the listing says which
        start, end = log_range(uri, commit_file_versions(uri), latest, start, end)
        return [_log_entry(fs, uri, base, v) for v in range(start, end + 1)]

    def checkpoint_versions(self, uri: str) -> list[int]:
        """Return the versions with a complete classic checkpoint (single- or multi-part), oldest first."""
        return sorted(v for v, parts in _checkpoint_parts(uri).items() if parts)

    def checkpoint_files(self, uri: str, version: int) -> list[FileInfo]:
        """Return the live data files the checkpoint at ``version`` records (its add actions)."""
        parts = _checkpoint_parts(uri).get(version)
        if not parts:
            raise TableStoreError(f"{uri}: no complete checkpoint at version {version}")
        fs, _ = filesystem(uri)
        out: list[FileInfo] = []
        for part in parts:
            with fs.open_input_file(part) as handle:
                adds = pq.read_table(handle, columns=["add"]).column("add").to_pylist()
            out += [file_from_action(a, a.get("modificationTime")) for a in adds if a is not None]
        return out


# More app ids than this unknown at once (a compaction swap fencing hundreds of buckets' chunk locks): read every
# app id's version from the newest checkpoint and the commits after it, instead of one delta-rs scan of the log
# per app id (each scan costs more as the table's app ids and commits accumulate).
_ONE_BY_ONE_MAX = 16


class _AppVersions:
    """App transaction versions of one table known exactly at ``version``: the app ids asked about, or, when
    ``complete``, every app id the table has (an app id absent then has none)."""

    def __init__(self, version: int, *, complete: bool = False) -> None:
        self.version = version
        self.versions: dict[str, int | None] = {}
        self.complete = complete

    @classmethod
    def read_all(cls, uri: str, version: int) -> _AppVersions | None:
        """Return every app id's version at ``version``, from the newest complete checkpoint at or before it and
        the commit files after it; None when a commit file needed is gone (the caller asks delta-rs instead)."""
        below = {v: parts for v, parts in _checkpoint_parts(uri).items() if parts and v <= version}
        start = max(below, default=-1)
        known = cls(start, complete=True)
        fs, _ = filesystem(uri)
        for part in below.get(start, []):
            with fs.open_input_file(part) as handle:
                if "txn" not in pq.read_schema(handle).names:
                    continue
            with fs.open_input_file(part) as handle:
                txns = pq.read_table(handle, columns=["txn"]).column("txn").to_pylist()
            known.versions.update((str(t["appId"]), int(t["version"])) for t in txns if t is not None)
        return known if known.advance(uri, version) else None

    def advance(self, uri: str, version: int) -> bool:
        """Apply the ``txn`` actions of the commits up to ``version``; False if a commit file is gone."""
        fs, base = filesystem(uri)
        for v in range(self.version + 1, version + 1):
            try:
                with fs.open_input_stream(f"{base}/_delta_log/{v:020d}.json") as stream:
                    text = stream.read().decode("utf-8")
            except FileNotFoundError:
                return False
            # Lines end at "\n" only: JSON leaves U+0085 and U+2028 unescaped, and ids (app ids too) hold them.
            for line in text.split("\n"):
                if '"txn"' in line:
                    txn = json.loads(line).get("txn")
                    if txn is not None:
                        self.versions[str(txn["appId"])] = int(txn["version"])
        self.version = version
        return True


def live_files(dt: DeltaTable) -> list[FileInfo]:
    """Return the snapshot's add actions as FileInfo, reading the flattened action table column by column."""
    import pyarrow as pa

    actions = pa.table(dt.get_add_actions(flatten=True))
    parts = list(dt.metadata().partition_columns)
    names = actions.column_names

    def column(name: str) -> list[Any]:
        return list(actions.column(name).to_pylist())

    def stats(prefix: str) -> list[tuple[str, list[Any]]]:
        return [(n[len(prefix):], column(n)) for n in names if n.startswith(prefix)]

    mins, maxs, nulls = stats("min."), stats("max."), stats("null_count.")
    pvals = [(p, column(f"partition.{p}") if f"partition.{p}" in names else [None] * actions.num_rows) for p in parts]
    records = column("num_records")
    out = []
    for i, (path, size, millis) in enumerate(zip(column("path"), column("size_bytes"), column("modification_time"),
                                                 strict=True)):
        out.append(FileInfo(
            path=str(path),
            size_bytes=int(size),
            num_records=None if records[i] is None else int(records[i]),
            partition_values={p: None if v[i] is None else _partition_text(v[i]) for p, v in pvals},
            modification_time=datetime.fromtimestamp(int(millis) / 1000, tz=UTC),
            min_values={k: v[i] for k, v in mins if v[i] is not None},
            max_values={k: v[i] for k, v in maxs if v[i] is not None},
            null_counts={k: int(v[i]) for k, v in nulls if v[i] is not None},
        ))
    return out


def _partition_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


def commit_file_versions(uri: str) -> set[int]:
    """Return the versions whose commit files are in the table's ``_delta_log``."""
    fs, base = filesystem(uri)
    return commit_versions(
        i.base_name for i in fs.get_file_info(pafs.FileSelector(f"{base}/_delta_log", allow_not_found=True)))


def _checkpoint_parts(uri: str) -> dict[int, list[str]]:
    """Return, per checkpoint version, its part files in order, or [] when some part is missing."""
    fs, base = filesystem(uri)
    listing = fs.get_file_info(pafs.FileSelector(f"{base}/_delta_log", allow_not_found=True))
    return checkpoint_parts((i.base_name, i.path) for i in listing)


def _raise_what_is_damaged(uri: str) -> None:
    """Raise the error lakeshard's own replay of ``uri``'s log meets (a torn commit: naming the table and the
    commit); return when it meets none, or cannot look (then delta-rs' error stands)."""
    try:
        probed_state(uri, None)
    except TableStoreError:
        raise
    except Exception:  # a look that cannot be made leaves delta-rs' own error to be reported
        return


def _log_entry(fs: pafs.FileSystem, uri: str, base: str, version: int) -> LogEntry:
    with fs.open_input_stream(f"{base}/_delta_log/{version:020d}.json") as stream:
        return parse_commit(stream.read().decode("utf-8"), version, table=uri)[0]


def arrow_schema_of(dt: DeltaTable) -> pa.Schema:
    """Return a delta-rs table's schema as Arrow."""
    return pa.schema(dt.schema().to_arrow())


@functools.lru_cache(maxsize=256)
def arrow_schema_from_json(schema_string: str) -> pa.Schema:
    """Return a table's schema, as its metadata's ``schemaString`` gives it, as Arrow (what :func:`arrow_schema_of`
    gives for the same table)."""
    return pa.schema(DeltaSchema.from_json(schema_string).to_arrow())


def spark_schema_of(schema: DeltaSchema) -> StructType:
    """Return a delta-rs schema as Spark's (imports pyspark only when called)."""
    from pyspark.sql.types import StructType

    return StructType.fromJson(json.loads(schema.to_json()))
