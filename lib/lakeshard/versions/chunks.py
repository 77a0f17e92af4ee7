"""Time-chunk versions (Druid): a chunk's history is the Delta log filtered to one ``(tenant_id, hour)``.

Druid's proposal keeps, per time chunk, only deltas — ``(chunk, version, ADD|DROP, segment)`` — and
rebuilds the segment set of a version by rolling forward from the nearest *key frame* (a materialised
version), like a video decoder. A Delta table already is that structure: every commit file lists the
files it adds and removes, and a checkpoint materialises the whole table at one version. So nothing is
stored twice here; :class:`ChunkVersions` reads the log through the ``TableStore`` port:

* ``log()`` — the versions that touched the chunk, with the files each ADDed and DROPped;
* ``snapshot(v)`` — the chunk's live files at ``v``, from the newest key frame at or before ``v`` (a
  checkpoint, or a snapshot this object already materialised) rolled forward commit by commit;
* ``diff(a, b)`` — files live at ``b`` and not at ``a`` (added) and the reverse (dropped).

A file belongs to one chunk for its whole life (partition values never change), so a chunk's version
is simply the table version: queries at any table version see a whole chunk version or none of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from lakeshard.lake import FileInfo, LogEntry, TableStore
from lakeshard.tables import HOUR_PATTERN, HOUR_SPELLING
from lakeshard.versions.errors import VersionsError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "HOUR_FORMAT",
    "Chunk",
    "ChunkDiff",
    "ChunkSnapshot",
    "ChunkVersion",
    "ChunkVersions",
    "KeyFrame",
    "chunk_changes",
    "read_chunk",
    "roll_forward",
    "rows_in",
]

HOUR_FORMAT = HOUR_SPELLING  # a chunk's hour as people read it (lakeshard.tables.HOUR_FORMAT is strftime's)
_HOUR = HOUR_PATTERN


def rows_in(files: Iterable[FileInfo]) -> int:
    """Return the rows the files' statistics promise (a file without statistics counts 0)."""
    return sum(f.num_records or 0 for f in files)


@dataclass(frozen=True, order=True)
class Chunk:
    """One time chunk: the rows of one tenant in one UTC hour (``hour`` as ``YYYY-MM-DDTHH``)."""

    tenant_id: str
    hour: str

    def __post_init__(self) -> None:
        if not self.tenant_id:
            raise VersionsError("a chunk needs a non-empty tenant_id")
        if not _HOUR.match(self.hour):
            raise VersionsError(f"chunk hour must look like {HOUR_FORMAT} (e.g. 2026-01-01T10), found {self.hour!r}")

    @classmethod
    def parse(cls, text: str) -> Chunk:
        """Return the chunk written ``TENANT/HOUR`` (the tenant may itself contain ``/``; the hour cannot)."""
        tenant, sep, hour = text.rpartition("/")
        if not sep:
            raise VersionsError(f"expected a chunk as TENANT/{HOUR_FORMAT}, e.g. acme/2026-01-01T10, found {text!r}")
        return cls(tenant, hour)

    def holds(self, f: FileInfo) -> bool:
        """Return whether the data file belongs to this chunk (by its partition values)."""
        return f.partition_values.get("tenant_id") == self.tenant_id and f.partition_values.get("hour") == self.hour

    def __str__(self) -> str:
        return f"{self.tenant_id}/{self.hour}"


@dataclass(frozen=True)
class ChunkVersion:
    """What one table version did to a chunk: the files it ADDed and DROPped (Druid's delta records)."""

    version: int
    timestamp: datetime
    operation: str
    metadata: Mapping[str, Any]
    added: tuple[FileInfo, ...]
    dropped: tuple[FileInfo, ...]
    data_change: bool  # False when the commit only rearranged rows (compaction), as Delta's dataChange says

    @property
    def rows_added(self) -> int:
        """Return the rows of the added files (from their statistics)."""
        return rows_in(self.added)

    @property
    def rows_dropped(self) -> int:
        """Return the rows of the dropped files, as far as the remove actions' statistics tell."""
        return rows_in(self.dropped)


@dataclass(frozen=True)
class KeyFrame:
    """A version whose full file set is materialised: a Delta checkpoint, or a snapshot already read."""

    version: int
    kind: str  # "checkpoint" or "snapshot"


@dataclass(frozen=True)
class ChunkSnapshot:
    """A chunk's live files at ``version``, and how they were computed (key frame + commits rolled)."""

    chunk: Chunk
    version: int
    files: tuple[FileInfo, ...]
    key_frame: KeyFrame
    rolled_forward: int  # commits applied on top of the key frame

    @property
    def rows(self) -> int:
        """Return the chunk's rows at this version (from the files' statistics)."""
        return rows_in(self.files)


@dataclass(frozen=True)
class ChunkDiff:
    """Files live at ``to_version`` but not at ``from_version`` (added), and the reverse (dropped)."""

    chunk: Chunk
    from_version: int
    to_version: int
    added: tuple[FileInfo, ...]
    dropped: tuple[FileInfo, ...]


def chunk_changes(entry: LogEntry, chunk: Chunk, known: Mapping[str, FileInfo] | None = None) -> ChunkVersion | None:
    """Return what ``entry`` did to ``chunk``, or None when it did not touch it (pure).

    ``known`` maps paths the chunk ever had to their add actions. A remove action may lack partition
    values and statistics (both are optional in the Delta protocol); a known path fills them in.
    """
    known = known or {}
    added = [c for c in entry.changes if c.action == "add" and chunk.holds(c.file)]
    dropped = [c for c in entry.changes if c.action == "remove"
               and (chunk.holds(c.file) or (not c.file.partition_values and c.file.path in known))]
    if not added and not dropped:
        return None
    return ChunkVersion(
        version=entry.version, timestamp=entry.timestamp, operation=entry.operation,
        metadata=entry.custom_metadata, added=tuple(c.file for c in added),
        dropped=tuple(_as_removed(c.file, known.get(c.file.path)) for c in dropped),
        data_change=any(c.data_change for c in (*added, *dropped)),
    )


def _as_removed(removed: FileInfo, added: FileInfo | None) -> FileInfo:
    """Return the removed file described by its add action (stats, partitions) when known, else as removed."""
    if added is None:
        return removed
    return replace(added, modification_time=removed.modification_time)


def roll_forward(frame: Mapping[str, FileInfo], deltas: Iterable[ChunkVersion]) -> dict[str, FileInfo]:
    """Return the file set after applying ``deltas`` (oldest first) to a key frame's files (pure).

    Within one version drops apply before adds, so a file re-added by the same commit stays live.
    """
    files = dict(frame)
    for delta in deltas:
        for f in delta.dropped:
            files.pop(f.path, None)
        for f in delta.added:
            files[f.path] = f
    return files


class ChunkVersions:
    """The version history of one chunk of a ``(tenant_id, hour)``-partitioned table, read from its Delta log.

    Example::

        versions = ChunkVersions(store, cfg.table_uri("events"), Chunk.parse("acme/2026-01-01T10"))
        for v in versions.log():                   # newest first, like git log
            print(v.version, v.operation, len(v.added), len(v.dropped))
        versions.snapshot(12).files                # the chunk's files at table version 12
        versions.diff(10, 12).added
    """

    def __init__(self, store: TableStore, table: str, chunk: Chunk) -> None:
        missing = [c for c in ("tenant_id", "hour") if c not in store.partition_columns(table)]
        if missing:
            raise VersionsError(
                f"{table} is partitioned by {store.partition_columns(table)}; chunks need tenant_id and hour "
                f"(missing {missing})"
            )
        self.store = store
        self.table = table
        self.chunk = chunk
        self._entries: dict[int, ChunkVersion | None] = {}
        self._frames: dict[int, tuple[KeyFrame, dict[str, FileInfo]]] = {}
        self._known: dict[str, FileInfo] = {}

    def latest(self) -> int:
        """Return the table's latest version."""
        return self.store.version(self.table)

    def log(self, *, since: int | None = None, until: int | None = None) -> list[ChunkVersion]:
        """Return the versions in ``since..until`` that ADDed or DROPped files of the chunk, newest first."""
        changes = self._changes(since, self.latest() if until is None else until)
        return [c for _, c in sorted(changes.items(), reverse=True) if c is not None]

    def show(self, version: int | None = None) -> ChunkVersion:
        """Return what ``version`` did to the chunk (default: the chunk's newest change).

        Raises:
            VersionsError: that version did not touch the chunk, or the chunk has no history.
        """
        if version is None:
            history = self.log()
            if not history:
                raise VersionsError(f"chunk {self.chunk} has no files in any version of {self.table}")
            return history[0]
        self._check_version(version)
        if version > 0:
            # The files live just before know their statistics: a remove action need not carry them.
            self.snapshot(version - 1)
        change = self._changes(version, version).get(version)
        if change is None:
            raise VersionsError(f"version {version} of {self.table} did not add or drop files of chunk {self.chunk}")
        return change

    def snapshot(self, version: int | None = None) -> ChunkSnapshot:
        """Return the chunk's live files at ``version`` (default latest): nearest key frame, rolled forward."""
        version = self.latest() if version is None else version
        self._check_version(version)
        frame, files = self._key_frame(version)
        deltas = [c for _, c in sorted(self._changes(frame.version + 1, version).items()) if c is not None]
        live = roll_forward(files, deltas)
        # Remember the result: a later version rolls forward from here instead of from the older frame.
        self._frames.setdefault(version, (KeyFrame(version, "snapshot"), live))
        return ChunkSnapshot(self.chunk, version, tuple(sorted(live.values(), key=lambda f: f.path)), frame,
                             version - frame.version)

    def diff(self, from_version: int, to_version: int | None = None) -> ChunkDiff:
        """Return the files added and dropped between two versions of the chunk (net, like ``git diff``)."""
        a, b = self.snapshot(from_version), self.snapshot(to_version)
        before, after = {f.path: f for f in a.files}, {f.path: f for f in b.files}
        return ChunkDiff(
            self.chunk, a.version, b.version,
            added=tuple(after[p] for p in sorted(after.keys() - before.keys())),
            dropped=tuple(before[p] for p in sorted(before.keys() - after.keys())),
        )

    def _check_version(self, version: int) -> None:
        latest = self.latest()
        if not 0 <= version <= latest:
            raise VersionsError(f"{self.table} has versions 0..{latest}; version {version} does not exist")

    def _key_frame(self, version: int) -> tuple[KeyFrame, dict[str, FileInfo]]:
        """Return the newest key frame at or before ``version``: a cached snapshot or a Delta checkpoint.

        With neither, the store's own snapshot at ``version`` is the frame (delta-rs rebuilds it from the
        table's last checkpoint, if any), so nothing is ever replayed from version 0 here.
        """
        cached = max((v for v in self._frames if v <= version), default=-1)
        checkpoint = max((v for v in self.store.checkpoint_versions(self.table) if v <= version), default=-1)
        if cached >= 0 and cached >= checkpoint:
            return self._frames[cached]
        if checkpoint >= 0:
            files = {f.path: f for f in self.store.checkpoint_files(self.table, checkpoint) if self.chunk.holds(f)}
            self._known.update(files)
            self._frames[checkpoint] = (KeyFrame(checkpoint, "checkpoint"), files)
            return self._frames[checkpoint]
        files = {f.path: f for f in self.store.files(self.table, version=version) if self.chunk.holds(f)}
        self._known.update(files)
        self._frames[version] = (KeyFrame(version, "snapshot"), files)
        return self._frames[version]

    def _changes(self, start: int | None, end: int) -> dict[int, ChunkVersion | None]:
        """Return the chunk's delta per version in ``start..end`` (None: from the oldest commit the log holds).

        Commits are read once per object; a range already read costs nothing.
        """
        if start is None:
            self._remember(self.store.log_entries(self.table, end=end))
            start = min(self._entries, default=0)
        todo = [v for v in range(start, end + 1) if v not in self._entries]
        if todo:
            self._remember(self.store.log_entries(self.table, start=todo[0], end=todo[-1]))
        return {v: self._entries[v] for v in range(start, end + 1) if v in self._entries}

    def _remember(self, entries: Iterable[LogEntry]) -> None:
        for entry in entries:
            if entry.version in self._entries:
                continue
            change = chunk_changes(entry, self.chunk, self._known)
            if change is not None:
                self._known.update((f.path, f) for f in change.added)
            self._entries[entry.version] = change


def read_chunk(
    spark: SparkSession, store: TableStore, table: str, chunk: Chunk | str, version: int | None = None
) -> DataFrame:
    """Return the rows of ``chunk`` (a :class:`Chunk` or ``"TENANT/HOUR"``) at ``version`` (default latest).

    Reads exactly the chunk's files at that version — no scan of the table's other partitions.

    Example::

        read_chunk(spark, store, cfg.table_uri("events"), "acme/2026-01-01T10", version=7).count()
    """
    chunk = Chunk.parse(chunk) if isinstance(chunk, str) else chunk
    files = ChunkVersions(store, table, chunk).snapshot(version).files
    if not files:
        return spark.createDataFrame([], store.schema(table))
    return store.read_files(table, list(files))

