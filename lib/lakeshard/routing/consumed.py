"""What the router has consumed of each landing file: the newest batch plan entry per file identity.

The batch plans (``landing_batches``) gain a row per file range routed for as long as the lakehouse lives; a look
at the landing zone needs the entries of the files it lists only. :func:`consumed_landing` reads those (a filter
on the file identity pushed into the read: ``compact_books`` keeps the table sorted by identity in small row
groups, so only the row groups that can hold a listed file are decoded), and :class:`ConsumedRanges` keeps them
for a router's later looks, reading only the plans committed since and the files it had not listed before.

Example::

    ranges = ConsumedRanges(store, cfg.table_uri(LANDING_BATCHES))
    consumed = ranges.of({f.identity for f in scan.files})
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from lakeshard.errors import TableStoreError
from lakeshard.lake import FileInfo, TableStore
from lakeshard.routing.lifecycle import Consumed
from lakeshard.utc import aware

__all__ = ["CONSUMED_COLUMNS", "ConsumedRanges", "consumed_landing", "merge_consumed", "of_files"]

CONSUMED_COLUMNS = ("batch", "path", "file_id", "size_bytes", "mtime", "end_byte", "next_line", "anchor")
"""The batch plan columns deciding a file's next range (what a consumed read decodes)."""


def of_files(identities: Collection[str]) -> pc.Expression:
    """Return the filter of the batch plan rows of files with these identities (a plan made before identities
    names a file by its path)."""
    ids = pa.array(sorted(identities), pa.string())
    return pc.field("file_id").isin(ids) | (pc.field("file_id").is_null() & pc.field("path").isin(ids))


def consumed_landing(store: TableStore, batches_uri: str, up_to_batch: int | None = None, *,
                     identities: Collection[str] | None = None, version: int | None = None) -> dict[str, Consumed]:
    """Return what was routed of each landing file, by identity: its newest entry in the batch plans
    ``batches_uri`` (at ``version``, default the latest; only batches up to ``up_to_batch`` when given; only the
    files whose identity is in ``identities`` when given)."""
    where = None if identities is None else of_files(identities)
    if up_to_batch is not None:
        older = pc.field("batch") <= up_to_batch
        where = older if where is None else where & older
    if identities is not None and not identities:
        return {}
    out: dict[str, Consumed] = {}
    merge_consumed(out, store.read_table_arrow(batches_uri, CONSUMED_COLUMNS, version=version, where=where))
    return out


def merge_consumed(into: dict[str, Consumed], rows: pa.Table) -> None:
    """Record in ``into`` what the batch plan ``rows`` routed of each file (a later batch's entry wins)."""
    rows = rows.sort_by("batch")
    for path, file_id, size, mtime, end, next_line, anchor in zip(
            *(rows.column(c).to_pylist() for c in CONSUMED_COLUMNS[1:]), strict=True):
        # Plans made before byte ranges consumed whole files, by path.
        into[file_id or path] = Consumed(path, int(size if end is None else end), int(size), aware(mtime), anchor,
                                         int(next_line or 1))


class ConsumedRanges:
    """One router's view of what it consumed of the files it listed, kept across its looks at the landing zone.

    Each look costs a read of the plans committed since the previous one (only ever appended) and of the entries
    of files not listed before; a file listed before has its entry already, or none because it was never routed
    (a plan routing it since then is among the plans committed since).
    """

    def __init__(self, store: TableStore, batches_uri: str) -> None:
        self.store = store
        self.uri = batches_uri
        self._version: int | None = None  # the landing_batches version the entries reflect
        self._listed: set[str] = set()  # identities whose entries (or lack of one) up to _version are known
        self._entries: dict[str, Consumed] = {}

    def of(self, identities: Collection[str]) -> Mapping[str, Consumed]:
        """Return what was routed of each file with one of these identities (a file never routed has no entry),
        as of the plans' latest version; entries of files listed by earlier looks come along."""
        latest = self.store.version(self.uri)
        if self._version is not None and not self._catch_up(latest):
            self._version, self._listed, self._entries = None, set(), {}
        self._version = latest
        new = set(identities) - self._listed
        if new:
            self._entries.update(consumed_landing(self.store, self.uri, identities=new, version=latest))
            self._listed |= new
        return self._entries

    def _catch_up(self, latest: int) -> bool:
        """Merge the entries of the plans committed since the known version; return False when the entries must
        be read afresh (the log no longer holds those commits, one of them removed plans, or a plan file they
        added is no longer live)."""
        known = self._version
        if known is None or known > latest:
            return False
        if known == latest:
            return True
        try:
            entries = self.store.log_entries(self.uri, start=known + 1, end=latest)
        except TableStoreError:  # those commits were cleaned from the log
            return False
        changes = [c for e in entries for c in e.changes]
        # Plans are appended, each batch after the ones before; a rewrite that keeps every row (compact_books'
        # data_change=False swap) changes no entry; a commit that drops plans leaves the entries to be read again.
        if len(entries) != latest - known or any(c.action != "add" and c.data_change for c in changes):
            return False
        added: list[FileInfo] = [c.file for c in changes if c.action == "add" and c.data_change]
        if not added:
            return True
        # A plan file a later swap already merged away is read from what replaced it (a removed file may be gone).
        live = {f.path for f in self.store.files(self.uri, version=latest)}
        if any(f.path not in live for f in added):
            return False
        merge_consumed(self._entries, self.store.read_arrow(self.uri, added, CONSUMED_COLUMNS))
        return True

