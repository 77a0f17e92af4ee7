"""``lakeshard fsck``: every live data file of a lakehouse's tables checked against the log, and with ``repair``
the unreadable ones removed from it (what Databricks offers as ``FSCK REPAIR TABLE``, for lakeshard's tables).

A file is damaged when it is missing, its footer cannot be read as Parquet, the footer's row count is not the
log's ``numRecords``, or the footer's min/max of a column the log keeps statistics of is not the log's
``minValues``/``maxValues`` (:func:`~lakeshard.lake.check_data_file`): a file that holds other keys than the log
says would be skipped or kept wrongly by every reader that prunes by them. A repair first records each damaged
file (table, path, partition values, the rows the log says it held, why) in the ``record`` table, then removes
the table's damaged files from its log in one commit, whose metadata lists them too. Recording first means a
crash in between leaves a recorded file still live (a rerun records it again), never a silent loss. The rows a
removed file held are gone from the table until the landing zone or a backup refills them: re-routing a
repaired bucket's landing files restores exactly them (deduplication absorbs the rest).

Example::

    checks = [check_table(store, cfg.table_uri(name)) for name in TABLES if store.exists(cfg.table_uri(name))]
    repaired = [repair_table(store, c, cfg.table_uri(FSCK_REPAIRS)) for c in checks]
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import pyarrow as pa

from lakeshard.errors import DamagedDataFile, LakeshardError, UnsupportedByAdapter
from lakeshard.lake import CommitInfo, FileInfo, TableStore, check_data_file
from lakeshard.tables import FSCK_REPAIRS_SCHEMA

__all__ = ["FSCK_OPERATION", "TableCheck", "check_table", "repair_commits", "repair_table"]

FSCK_OPERATION = "lakeshard.fsck"  # the commit metadata key listing what a repair removed


@dataclass(frozen=True)
class TableCheck:
    """One table's live files checked at one version; after a repair, the version that removed the damaged ones."""

    table: str
    version: int
    files: int
    damaged: tuple[tuple[FileInfo, DamagedDataFile], ...]
    repaired_version: int | None = None

    @property
    def lost_rows(self) -> int:
        """Return the rows the damaged files held, by the log's ``numRecords`` (unknown counts as 0)."""
        return sum(f.num_records or 0 for f, _ in self.damaged)


def check_table(store: TableStore, table: str) -> TableCheck:
    """Return the check of every live data file of ``table`` (its footer against the log) at its latest version."""
    version = store.version(table)
    files = store.files(table, version=version)
    damaged = tuple((f, d) for f in files if (d := check_data_file(table, f)) is not None)
    return TableCheck(table, version, len(files), damaged)


def repair_table(store: TableStore, check: TableCheck, record: str, *, now: datetime | None = None) -> TableCheck:
    """Return ``check`` repaired: its damaged files recorded in the table ``record``, then removed from the table's
    log in one commit prepared at the checked version (nothing to do when none is damaged).

    Raises:
        CommitConflict: the table changed under the check in a way that touches those files; check again.
        UnsupportedByAdapter: the store cannot remove an exact set of files (Delta's public writer: Spark Connect,
            serverless); refused before anything is recorded, so ``record`` never names a file still live.
    """
    if not check.damaged:
        return check
    if not store.writes_in_process:  # no internal commit path: a swap of part of a partition's files is refused
        raise UnsupportedByAdapter(
            f"{check.table}: fsck --repair removes exactly the damaged files from the log, which needs Delta's "
            "internal transaction API; this session commits through Delta's public writer (Spark Connect, "
            "serverless): run lakeshard fsck --repair from a classic session (a job or notebook on a classic "
            "cluster, or locally with Delta's jars); nothing was changed")
    when = now or datetime.now(UTC)
    name = check.table.rstrip("/").rsplit("/", 1)[-1]
    store.create(record, FSCK_REPAIRS_SCHEMA, description="data files lakeshard fsck removed as unreadable")
    rows = [{"table_name": name, "path": f.path, "partition_values": json.dumps(f.partition_values, sort_keys=True),
             "tenant_id": f.partition_values.get("tenant_id"), "hour": f.partition_values.get("hour"),
             "rows": f.num_records, "problem": d.problem, "removed_at": when} for f, d in check.damaged]
    schema = pa.schema([("table_name", pa.string(), False), ("path", pa.string(), False),
                        ("partition_values", pa.string(), False), ("tenant_id", pa.string()), ("hour", pa.string()),
                        ("rows", pa.int64()), ("problem", pa.string(), False),
                        ("removed_at", pa.timestamp("us", tz="UTC"), False)])
    store.append_arrow(record, pa.Table.from_pylist(rows, schema=schema), metadata={"table": name})
    removed = [{"path": f.path, "rows": f.num_records, "problem": d.problem} for f, d in check.damaged]
    result = store.replace_files(check.table, [f.path for f, _ in check.damaged], None, data_change=True,
                                 metadata={FSCK_OPERATION: {"removed": removed}}, read_version=check.version)
    return replace(check, repaired_version=result.version)


def repair_commits(store: TableStore, uri: str, paths: Collection[str], history: Sequence[CommitInfo] | None = None
                   ) -> Iterator[tuple[CommitInfo, dict[str, FileInfo] | None]]:
    """Yield each repair commit of ``uri`` (newest first) that removed some of ``paths``, with those files' entries
    in the snapshot before it (their statistics, partition values), or None when the log no longer reaches that
    snapshot. ``history``: the table's history, newest first, when the caller read it already."""
    for commit in store.history(uri) if history is None else history:
        removed = commit.custom_metadata.get(FSCK_OPERATION)
        if isinstance(removed, str):
            removed = json.loads(removed)
        wanted = {str(r["path"]) for r in removed.get("removed", [])} & set(paths) if isinstance(removed, dict) \
            else set()
        if not wanted or commit.version < 1:
            continue
        try:
            before = store.files(uri, version=commit.version - 1)
        except LakeshardError:  # the log no longer reaches that version
            yield commit, None
            continue
        yield commit, {f.path: f for f in before if f.path in wanted}
