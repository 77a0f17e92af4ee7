"""Fragment metadata in a Delta table of its own: ``<lakehouse>/fragments``, one row per file compaction wrote.

Compaction describes each output file (level, key range, per-column pruning regexes: a
:class:`~lakeshard.compaction.fragments.FragmentMeta`) and appends those rows here *before* the swap commit
that makes the files live. A row therefore never describes a file that is live without it, while a row
whose file never became live (the swap lost a race, the process died between the two commits) describes a
path no live file will ever have (every write goes to a fresh directory): readers join the rows with the
live files and ignore the rest. On a store whose swaps go through Delta's public writer
(:attr:`~lakeshard.lake.TableStore.swaps_whole_partitions`) the new files are named only by the swap commit, so
their rows follow it; a file live without rows is planned as level 0 of unknown key range. Unlike commit info,
table rows survive the Delta log's cleanup, and a reader asks only for the partitions ``(data_table, hour)`` of
the buckets it plans for.

A lakehouse whose metadata is still only in commit info migrates on first use: the history the log still
holds is read once, its descriptions of live files are appended, and the same commit records the app
transaction :func:`~lakeshard.tables.fragments_migrated_app_id` so that it never happens again.

Example::

    fragments = FragmentTable(store, events_uri)
    metas, scanned = fragments.read(store.files(events_uri))
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc

from lakeshard.compaction.fragments import FRAGMENTS_KEY, FragmentError, FragmentMeta
from lakeshard.errors import CommitConflict
from lakeshard.lake import AppTransaction, FileInfo, TableStore
from lakeshard.tables import FRAGMENTS, FRAGMENTS_PARTITIONING, fragments_migrated_app_id

__all__ = ["FRAGMENT_GRACE", "FragmentRead", "FragmentTable", "commit_info_fragments", "fragments_uri",
           "live_fragment_rows", "read_fragments"]

FRAGMENT_GRACE = timedelta(hours=1)
"""A row whose file is not live is dropped by maintenance only when older than this: its swap may still land."""


def fragments_uri(table: str) -> str:
    """Return the URI of the fragments table that describes ``table``'s files: ``fragments`` beside it."""
    return f"{table.rstrip('/').rsplit('/', 1)[0]}/{FRAGMENTS}"


def _name(table: str) -> str:
    return table.rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class FragmentRead:
    """What one read of the fragments table found and cost."""

    found: dict[str, FragmentMeta]  # by decoded path, live files only
    files_read: int  # data files of the fragments table read
    rows_scanned: int  # rows of those files
    migrated: bool = False  # this read copied the commit-info metadata in first


class FragmentTable:
    """The fragment metadata of one compacted table (``table``), kept in :func:`fragments_uri`.

    Args:
        store: the table store.
        table: the compacted table's URI.
    """

    def __init__(self, store: TableStore, table: str) -> None:
        self.store = store
        self.table = table
        self.uri = fragments_uri(table)
        self.name = _name(table)
        self._ready = False

    # ------------------------------------------------------------------------------------ read
    def read(self, files: Sequence[FileInfo]) -> FragmentRead:
        """Return the metadata of those ``files`` that compaction described, reading only their buckets' rows.

        Raises:
            FragmentError: a row's metadata is malformed.
        """
        migrated = self.ensure()
        wanted = {unquote(f.path): _bucket(f) for f in files}
        if not wanted:
            return FragmentRead({}, 0, 0, migrated)
        hours = {hour for _, hour in wanted.values()}
        chosen = [f for f in self.store.files(self.uri)
                  if f.partition_values.get("data_table") == self.name and f.partition_values.get("hour") in hours]
        if not chosen:
            return FragmentRead({}, 0, 0, migrated)
        rows = self.store.read_arrow(self.uri, chosen, columns=["path", "meta"])
        found: dict[str, FragmentMeta] = {}
        for path, raw in zip(rows.column("path").to_pylist(), rows.column("meta").to_pylist(), strict=True):
            if path in wanted and path not in found:
                try:
                    data = json.loads(raw)
                except ValueError:
                    raise FragmentError(f"{self.uri}: the row of {path} holds no JSON metadata: {raw[:200]}") from None
                found[path] = FragmentMeta.from_json(path, data)
        return FragmentRead(found, len(chosen), rows.num_rows, migrated)

    # ----------------------------------------------------------------------------------- write
    def write(self, fragments: Iterable[FragmentMeta], buckets: Sequence[tuple[str, str]],
              app_transactions: Sequence[AppTransaction] = ()) -> int:
        """Append one row per fragment (``buckets[i]`` is the ``(tenant_id, hour)`` of the i-th) and return the
        fragments table's new version.

        Raises:
            TableStoreError: the append failed (the caller's swap must then not commit).
        """
        metas = list(fragments)
        if len(metas) != len(buckets):
            raise FragmentError(f"{self.uri}: {len(metas)} fragments but {len(buckets)} buckets")
        self._create()
        now = datetime.now(UTC)
        rows = pa.table({
            "data_table": [self.name] * len(metas),
            "tenant_id": [b[0] for b in buckets],
            "hour": [b[1] for b in buckets],
            "path": [m.path for m in metas],
            "level": pa.array([m.level for m in metas], pa.int32()),
            "rows": pa.array([m.rows for m in metas], pa.int64()),
            "outlier": [m.outlier for m in metas],
            "meta": [json.dumps(m.to_json(), separators=(",", ":"), ensure_ascii=False) for m in metas],
            "written_at": pa.array([now] * len(metas), pa.timestamp("us", tz="UTC")),
        })
        result = self.store.append_arrow(self.uri, rows, app_transactions=app_transactions,
                                         metadata={"lakeshard.operation": f"describe {self.name} fragments"})
        return result.version

    # ------------------------------------------------------------------------------- migration
    def ensure(self) -> bool:
        """Create the table if need be and copy the commit-info metadata of ``table`` in, once; return whether
        this call copied it."""
        if self._ready:
            return False
        self._create()
        app_id = fragments_migrated_app_id(self.name)
        if self.store.transaction_version(self.uri, app_id) is not None:
            self._ready = True
            return False
        files = self.store.files(self.table)
        found = commit_info_fragments(self.store, self.table, files)
        by_path = {unquote(f.path): _bucket(f) for f in files}
        metas = list(found.values())
        try:
            self.write(metas, [by_path[m.path] for m in metas], [AppTransaction(app_id, 1)])
        except CommitConflict:
            if self.store.transaction_version(self.uri, app_id) is None:
                raise  # not another migration of the same table: a real conflict
        self._ready = True
        return True

    def _create(self) -> None:
        from lakeshard.tables import FRAGMENTS_PROPERTIES, FRAGMENTS_SCHEMA

        if not self.store.exists(self.uri):
            self.store.create(self.uri, FRAGMENTS_SCHEMA, partition_by=FRAGMENTS_PARTITIONING,
                              properties=FRAGMENTS_PROPERTIES,
                              description="lakeshard: fragment metadata of compacted files (lakeshard.compaction)")


def read_fragments(store: TableStore, table: str, files: Sequence[FileInfo]) -> dict[str, FragmentMeta]:
    """Return the fragment metadata of those ``files`` that compaction described, keyed by decoded path: one
    pruned read of the fragments table (their buckets only), no walk of the Delta log."""
    return FragmentTable(store, table).read(files).found


def commit_info_fragments(store: TableStore, table: str, files: Sequence[FileInfo]) -> dict[str, FragmentMeta]:
    """Return the fragment metadata that the commit info of the log's remaining commits holds for ``files``,
    keyed by decoded path (newest description first; stops once every file is found).

    Raises:
        FragmentError: a commit's metadata is malformed.
    """
    wanted = {unquote(f.path) for f in files}  # the log's paths are URI-encoded; the metadata's are not
    found: dict[str, FragmentMeta] = {}
    if not wanted:
        return found
    for commit in store.history(table):
        raw = commit.custom_metadata.get(FRAGMENTS_KEY)
        if raw is None:
            continue
        try:
            body = json.loads(raw) if isinstance(raw, str) else raw
            entries = body["files"]
        except (ValueError, KeyError, TypeError):
            raise FragmentError(f"{table} version {commit.version}: {FRAGMENTS_KEY} is not valid fragment "
                                f"metadata: {str(raw)[:200]}") from None
        for key, data in entries.items():
            if key in wanted and key not in found:
                found[key] = FragmentMeta.from_json(key, data)
        if len(found) == len(wanted):
            break
    return found


def live_fragment_rows(store: TableStore, uri: str, rows: pa.Table, *, now: datetime | None = None,
                       grace: timedelta | None = None) -> pa.Table:
    """Return the rows of the fragments table at ``uri`` worth keeping: those whose file is live in its data
    table (``<lakehouse>/<data_table>``), written less than ``grace`` (:data:`FRAGMENT_GRACE`) ago, or of a
    data table that does not exist.

    Maintenance rewrites (``compact_bookkeeping``) keep only these: rows of files compacted away, or of swaps
    that never landed, cost every later read of their bucket a row.
    """
    if not rows.num_rows:
        return rows
    cutoff = (now or datetime.now(UTC)) - (FRAGMENT_GRACE if grace is None else grace)
    keep = pc.greater(rows.column("written_at"), pa.scalar(cutoff, rows.schema.field("written_at").type))
    lakehouse = uri.rstrip("/").rsplit("/", 1)[0]
    for name in pc.unique(rows.column("data_table")).to_pylist():
        table = f"{lakehouse}/{name}"
        mine = pc.equal(rows.column("data_table"), name)
        if not store.exists(table):
            keep = pc.or_(keep, mine)
            continue
        live = pa.array(sorted({unquote(f.path) for f in store.files(table)}), pa.string())
        keep = pc.or_(keep, pc.and_(mine, pc.is_in(rows.column("path"), value_set=live)))
    return rows.filter(keep)


def _bucket(f: FileInfo) -> tuple[str, str]:
    return str(f.partition_values.get("tenant_id")), str(f.partition_values.get("hour"))
