"""``lakeshard refill --decisions``: the rows of the ``buckets``, ``tenant_settings`` and ``shard_topology`` files
``lakeshard fsck --repair`` removed, rebuilt from the files they were rewritten from.

These tables hold decisions: a bucket's states, a tenant's shard count and salt, the ring and its exclusions. They
only ever gain rows (the newest row, or the furthest state, wins), and the only commits that remove their files
are fsck's repairs and the hourly bookkeeping rewrites (:func:`~lakeshard.maintenance.compact_bookkeeping`,
``data_change=False``: the same rows in fewer files, none dropped). So the rows a removed file held are exactly the
rows of the files removed by the rewrite that added it, and those stay on disk, readable by time travel, until
vacuum deletes them (``maintenance.vacuum_retention_hours`` after the rewrite). A refill follows each removed file
back through the rewrites that made it to files it can read (on disk, their footer as the log says:
:func:`~lakeshard.lake.check_data_file`), checks that they add up to the rows the log says the removed file held,
and appends the rows the table does not hold live, in one commit per table carrying the app transaction
``refill-decisions/<table>`` (:func:`~lakeshard.tables.decisions_refill_app_id`) at the number of the table's files
fsck removed: a refill run twice commits once.

What it cannot rebuild it names, file by file, with the reason (:attr:`DecisionRefill.unrebuilt`): a file a
decision's own commit appended (its rows are in no other file), one whose sources vacuum deleted or are damaged
too, one whose adding commit the log no longer holds (commit files past ``delta.logRetentionDuration`` are cleaned
up), one a rewrite split into several files. What such a loss means: a bucket whose ``closed`` row is lost reads
as open again (late events of its hour are then written into it, and the completionist closes it again with a new
checksum); a lost tenant setting or topology row leaves later placements to the defaults or the rows left until
the autosharder, the balancer or an operator sets them again (placements already made keep their shards).

Example::

    for refill in plan_decision_refills(store, cfg):
        refill_decisions(store, cfg, refill)
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from lakeshard.errors import LakeshardError
from lakeshard.lake import AppTransaction, check_data_file
from lakeshard.tables import BUCKETS, FSCK_REPAIRS, SHARD_TOPOLOGY, TENANT_SETTINGS, decisions_refill_app_id

if TYPE_CHECKING:
    from lakeshard.config import LakeshardConfig
    from lakeshard.lake import CommitResult, FileInfo, LogEntry, TableStore

__all__ = ["DECISION_TABLES", "DecisionRefill", "plan_decision_refills", "refill_decisions"]

# The tables whose removed files ``refill --decisions`` rebuilds: rows only ever added, rewritten without a change.
DECISION_TABLES: tuple[str, ...] = (BUCKETS, TENANT_SETTINGS, SHARD_TOPOLOGY)


@dataclass(frozen=True, eq=False)  # an Arrow table has no meaningful equality
class DecisionRefill:
    """One table's removed files rebuilt: ``rows`` (in the table's columns) the rebuilt files held that the table
    does not hold live, ``removed`` the rows fsck's removed files held by the log, ``version`` the app
    transaction's (how many of the table's files fsck removed), ``done`` whether an earlier refill committed it,
    ``unrebuilt`` each removed file that cannot be rebuilt with the reason."""

    table: str
    version: int
    removed: int
    rows: pa.Table
    rebuilt: tuple[str, ...]
    unrebuilt: tuple[tuple[str, str], ...]
    done: bool

    @property
    def app_transaction(self) -> AppTransaction:
        """Return the app transaction the refill's commit carries (a replay of it is skipped)."""
        return AppTransaction(decisions_refill_app_id(self.table), self.version)


def plan_decision_refills(store: TableStore, cfg: LakeshardConfig, *, tables: Sequence[str] = DECISION_TABLES
                          ) -> tuple[DecisionRefill, ...]:
    """Return, per table of ``tables`` (of :data:`DECISION_TABLES`) that ``fsck_repairs`` records removed files of,
    their rows rebuilt from the files they were rewritten from, and the files that cannot be, with the reason."""
    if not store.exists(cfg.table_uri(FSCK_REPAIRS)):
        return ()
    repairs = store.read_table_arrow(cfg.table_uri(FSCK_REPAIRS), ["table_name", "path", "rows"],
                                     where=pc.field("table_name").isin(list(DECISION_TABLES))).to_pylist()
    out = []
    for name in (t for t in DECISION_TABLES if t in tables):
        removed = {str(r["path"]): int(r["rows"] or 0) for r in repairs if r["table_name"] == name}
        if removed and store.exists(uri := cfg.table_uri(name)):
            out.append(_plan(store, name, uri, removed))
    return tuple(out)


def refill_decisions(store: TableStore, cfg: LakeshardConfig, refill: DecisionRefill) -> CommitResult | None:
    """Return the commit appending ``refill``'s rows to its table (skipped when an earlier run committed it), or
    None when there is nothing to append."""
    if not refill.rows.num_rows:
        return None
    meta = {"refill_decisions": {"table": refill.table, "rows": refill.rows.num_rows, "removed": refill.removed,
                                 "files": list(refill.rebuilt)}}
    return store.append_arrow(cfg.table_uri(refill.table), refill.rows, app_transactions=[refill.app_transaction],
                              metadata=meta)


def _plan(store: TableStore, name: str, uri: str, removed: dict[str, int]) -> DecisionRefill:
    version = len(removed)
    done = (store.transaction_version(uri, decisions_refill_app_id(name)) or 0) >= version
    lineage = _Lineage(store, uri)
    found: list[pa.Table] = []
    rebuilt, unrebuilt = [], []
    for path in sorted(removed):
        try:
            rows = lineage.rows_of(path)
        except _Unrebuildable as exc:
            unrebuilt.append((path, str(exc)))
            continue
        if rows.num_rows != removed[path]:
            unrebuilt.append((path, f"the files it was rewritten from hold {rows.num_rows:,} rows, the log says it "
                                    f"held {removed[path]:,}"))
            continue
        found.append(rows)
        rebuilt.append(path)
    schema = store.arrow_schema(uri)
    rows = schema.empty_table()
    if found:
        rows = _not_live(store.read_table_arrow(uri), pa.concat_tables([t.select(schema.names).cast(schema)
                                                                       for t in found]))
    return DecisionRefill(name, version, sum(removed.values()), rows, tuple(rebuilt), tuple(unrebuilt), done)


def _not_live(live: pa.Table, rows: pa.Table) -> pa.Table:
    """Return ``rows`` less those ``live`` holds (as many times as it holds each): a refill run again, or rows
    another refill restored, adds nothing."""
    have = Counter(_key(r) for r in live.select(rows.schema.names).to_pylist())
    keep = []
    for r in rows.to_pylist():
        k = _key(r)
        keep.append(have[k] <= 0)
        have[k] -= 1
    return rows.filter(pa.array(keep, pa.bool_()))


def _key(row: dict[str, Any]) -> str:
    return json.dumps(row, sort_keys=True, default=str)


class _Unrebuildable(Exception):
    """A removed file's rows cannot be rebuilt; the message says why."""


class _Lineage:
    """A table's files traced back through the commits that added them (the log as it is now)."""

    def __init__(self, store: TableStore, uri: str) -> None:
        self._store, self._uri = store, uri
        self._adds: dict[str, tuple[LogEntry, FileInfo]] | None = None
        self._first = 0

    def rows_of(self, path: str) -> pa.Table:
        """Return the rows ``path`` held, from the files the rewrite that added it removed, each read from disk
        when its footer agrees with the log, else traced further back.

        Raises:
            _Unrebuildable: why they cannot be told.
        """
        entry, _ = self._added(path)
        adds = [c for c in entry.changes if c.action == "add"]
        sources = [c.file for c in entry.changes if c.action == "remove"]
        if not sources:
            raise _Unrebuildable(f"it was added by version {entry.version} ({entry.operation or 'a commit'}) with rows "
                                 "of its own, not rewritten from other files: no other file holds them")
        if any(c.data_change for c in entry.changes):
            raise _Unrebuildable(f"version {entry.version} rewrote it from {len(sources)} files and changed data: "
                                 "which of their rows it held cannot be told")
        if len(adds) != 1:
            raise _Unrebuildable(f"version {entry.version} rewrote {len(sources)} files into {len(adds)}: which of "
                                 "their rows this one held cannot be told")
        parts = []
        for source in sorted(sources, key=lambda f: f.path):
            info = self._info(source.path, entry.version)
            damage = check_data_file(self._uri, info)
            if damage is None:
                parts.append(self._store.read_arrow(self._uri, [info]))
                continue
            try:
                parts.append(self.rows_of(source.path))
            except _Unrebuildable as exc:
                raise _Unrebuildable(f"version {entry.version} rewrote it from {source.path}, which cannot be read "
                                     f"({_reason(damage.problem)}), and {exc}") from None
        return pa.concat_tables(parts)

    def _added(self, path: str) -> tuple[LogEntry, FileInfo]:
        adds = self._load()
        if path not in adds:
            raise _Unrebuildable(f"the commit that added it is no longer in the log (it begins at version "
                                 f"{self._first}; commit files past delta.logRetentionDuration are cleaned up)")
        return adds[path]

    def _info(self, path: str, rewrite: int) -> FileInfo:
        """Return the log's entry of ``path`` (statistics, partition values), from its add action, else from the
        snapshot before the rewrite at version ``rewrite`` that removed it."""
        adds = self._load()
        if path in adds:
            return adds[path][1]
        try:
            before = {f.path: f for f in self._store.files(self._uri, version=rewrite - 1)}
        except LakeshardError as exc:
            raise _Unrebuildable(f"version {rewrite} rewrote it from {path}, and the snapshot before it cannot be "
                                 f"read: {exc}") from None
        if path not in before:
            raise _Unrebuildable(f"version {rewrite} rewrote it from {path}, which the snapshot before it lacks")
        return before[path]

    def _load(self) -> dict[str, tuple[LogEntry, FileInfo]]:
        if self._adds is None:
            entries = self._store.log_entries(self._uri)
            self._first = entries[0].version if entries else 0
            self._adds = {c.file.path: (e, c.file) for e in entries for c in e.changes if c.action == "add"}
        return self._adds


def _reason(problem: str) -> str:
    """Return why a rewrite's source cannot be read, in the words of a file that is no longer live."""
    if problem.startswith("it is missing"):
        return "it is gone from disk: vacuum deletes the files a rewrite removed maintenance.vacuum_retention_hours " \
               "after it"
    return problem.rstrip(".")
