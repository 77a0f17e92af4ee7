"""What both TableStore adapters check and decide alike, written once: :class:`AdapterBase` and its helpers.

- an Arrow table appended as one file per partition value (:meth:`AdapterBase.append_arrow`);
- the table properties every table is created with, and the types a partition column may have;
- a new table's partition columns and an existing table's shape (:meth:`AdapterBase._existing_version`);
- which commits a log range asks for (:func:`log_range`);
- whether a commit's app transactions are all new or all replayed (:func:`all_committed`);
- the columns an Arrow read asks for (:func:`arrow_columns`) and the fresh directory a write goes to.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lakeshard.errors import CommitConflict, TableExists, TableStoreError
from lakeshard.lake.store import TableStore
from lakeshard.lake.types import AppTransaction, CommitResult

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = [
    "DEFAULT_PROPERTIES",
    "PARTITION_TYPES",
    "WRITE_PREFIX",
    "AdapterBase",
    "all_committed",
    "arrow_columns",
    "arrow_schema_utc",
    "check_read_point",
    "log_range",
    "new_write_dir",
    "now_ms",
    "txn_text",
]

# Deletion vectors and column mapping would make a plain Parquet read of the live files wrong.
DEFAULT_PROPERTIES = {"delta.enableDeletionVectors": "false"}
PARTITION_TYPES = {"string", "integer", "long", "short", "byte", "date", "boolean"}
# Every write goes to a fresh directory of the table named with this prefix (vacuum recognises them by it).
WRITE_PREFIX = "w-"


class AdapterBase(TableStore):
    """A :class:`TableStore` with the checks both adapters make alike before creating a table."""

    def check_fence(self, table: str) -> None:
        """Return: both adapters commit a fence, in any session."""

    def append_arrow(
        self,
        table: str,
        rows: pa.Table,
        *,
        app_transactions: Sequence[AppTransaction] = (),
        metadata: Mapping[str, Any] | None = None,
        read_version: int | None = None,
    ) -> CommitResult:
        """Append an Arrow table's rows in one commit: pyarrow writes one file per partition value (the
        table's column order and types), and the commit is :meth:`append`'s in every other respect."""
        # Looked up through the face on each call: a test that makes the writer fail does so in one place.
        import lakeshard.lake

        schema, parts = self.arrow_schema(table), self.partition_columns(table)
        return self.append(table, None, app_transactions=app_transactions, metadata=metadata,
                           read_version=read_version,
                           write=lambda target: lakeshard.lake.write_partitioned(rows, target, schema, parts))

    def _existing_version(self, uri: str, schema: StructType, partition_by: Sequence[str],
                          exist_ok: bool) -> int | None:
        """Return the version of the table already at ``uri`` (it has this shape), or None when there is none.

        Raises:
            TableExists: the table exists and ``exist_ok`` is False.
            TableStoreError: a partition column is not in ``schema`` or has a type that cannot be a partition,
                or the existing table's schema or partitioning differs (both are shown).
        """
        fields = {f.name: f for f in schema.fields}
        for col in partition_by:
            if col not in fields:
                raise TableStoreError(f"{uri}: partition column {col!r} is not in the schema {list(fields)}")
            type_name = fields[col].dataType.typeName()
            if type_name not in PARTITION_TYPES:
                raise TableStoreError(
                    f"{uri}: partition column {col!r} has type {type_name}; use one of {sorted(PARTITION_TYPES)}"
                )
        if not self.exists(uri):
            return None
        if not exist_ok:
            raise TableExists(f"a Delta table already exists at {uri}")
        self._check_same_shape(uri, schema, partition_by)
        return self.version(uri)

    def _check_same_shape(self, uri: str, schema: StructType, partition_by: Sequence[str]) -> None:
        found = self.schema(uri)
        found_parts = self.partition_columns(uri)
        expected = [(f.name, f.dataType.simpleString()) for f in schema.fields]
        actual = [(f.name, f.dataType.simpleString()) for f in found.fields]
        if expected != actual or list(partition_by) != found_parts:
            raise TableStoreError(
                f"{uri} exists with a different shape: expected columns {expected} partitioned by "
                f"{list(partition_by)}, found {actual} partitioned by {found_parts}"
            )


def check_read_point(version: int | None, timestamp: datetime | str | None) -> None:
    """Raise TableStoreError when a read names both a version and a timestamp."""
    if version is not None and timestamp is not None:
        raise TableStoreError("read: give a version or a timestamp, not both")


def log_range(uri: str, commits: set[int], latest: int, start: int | None, end: int | None) -> tuple[int, int]:
    """Return the first and last version of ``start``..``end`` (defaults: the oldest commit left, the latest).

    Raises:
        TableStoreError: ``start`` is older than the oldest commit file left in the log, or a commit between
            ``start`` and ``end`` is missing.
    """
    first = min(commits, default=latest)
    start = first if start is None else start
    end = latest if end is None else min(end, latest)
    if start < first:
        raise TableStoreError(
            f"{uri}: the log holds commits from version {first} on (older ones were cleaned up after a "
            f"checkpoint); version {start} was asked for"
        )
    missing = [v for v in range(start, end + 1) if v not in commits]
    if missing:
        raise TableStoreError(f"{uri}: commit files for versions {missing[:5]} are missing from the log")
    return start, end


def all_committed(uri: str, version: int, txns: Sequence[AppTransaction],
                  committed_versions: Mapping[str, int | None]) -> bool:
    """Return whether every app transaction is committed at or past its version (False: none is).

    Raises:
        CommitConflict: some are committed and some are not.
    """
    done = [(t, committed_versions.get(t.app_id)) for t in txns]
    committed = [t for t, v in done if v is not None and v >= t.version]
    if committed and len(committed) != len(txns):
        # Another writer got part of this progress in first: a conflict, not a replay.
        raise CommitConflict(
            uri, version, tuple(t.app_id for t in txns),
            f"some app transactions of this commit are already committed ({txn_text(committed)}) and some "
            f"are not ({txn_text([t for t in txns if t not in committed])}); a commit must be all new or all "
            "replayed",
        )
    return bool(committed)


def arrow_columns(uri: str, schema: pa.Schema, columns: Sequence[str] | None) -> tuple[list[str], pa.Schema]:
    """Return the column names an Arrow read asks for (all by default) and their schema, every field nullable.

    Raises:
        TableStoreError: a column is not in the table.
    """
    import pyarrow as pa

    names = list(columns) if columns is not None else schema.names
    unknown = [c for c in names if c not in schema.names]
    if unknown:
        raise TableStoreError(f"{uri}: no columns {unknown}; the table has {schema.names}")
    return names, pa.schema([schema.field(c).with_nullable(True) for c in names])


def arrow_schema_utc(schema: StructType) -> pa.Schema:
    """Return a Spark schema as Arrow types, timestamps as UTC microseconds, on pyspark 4.0 and later alike.

    pyspark 4.1 added ``to_arrow_schema(..., timezone=...)`` (without it timestamps have no time zone);
    pyspark 4.0 (Databricks Runtime 17.3) has no such parameter and always gives UTC timestamps.
    """
    import inspect

    from pyspark.sql.pandas.types import to_arrow_schema

    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(schema, timezone="UTC")
    return to_arrow_schema(schema)


def new_write_dir(uri: str) -> tuple[str, str]:
    """Return a fresh, never-reused write directory of the table: its name and its full location."""
    write_id = f"{WRITE_PREFIX}{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:12]}"
    return write_id, f"{uri}/{write_id}"


def txn_text(txns: Iterable[AppTransaction]) -> str:
    """Return app transactions as ``app_id@version, ...`` for messages."""
    return ", ".join(f"{t.app_id}@{t.version}" for t in txns)


def now_ms() -> int:
    """Return the current time in epoch milliseconds, as the Delta log writes times."""
    return int(datetime.now(UTC).timestamp() * 1000)
