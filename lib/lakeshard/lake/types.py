"""The values the ``TableStore`` port takes and gives (docs/design.md §1): files, commits, log entries and the
app transactions that make a commit idempotent; the commit metadata keys every lakeshard commit carries."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from lakeshard.utc import aware

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql.types import StructType

__all__ = [
    "BYTES_ADDED",
    "ROWS_ADDED",
    "AppTransaction",
    "BeforeCommit",
    "CommitInfo",
    "CommitResult",
    "FileChange",
    "FileInfo",
    "LogEntry",
    "TableSpec",
    "VacuumReport",
    "WriteFiles",
    "WrittenFile",
]


@dataclass(frozen=True)
class AppTransaction:
    """An idempotency marker committed with the data: ``app_id`` has consumed up to ``version``.

    Kafka-delta-ingest stores partition offsets this way; lakeshard's writers store
    ``writer/<shard>`` → the last consumed ``routed`` version.
    """

    app_id: str
    version: int


@dataclass(frozen=True)
class FileInfo:
    """One live data file of a table version, as its add action describes it."""

    path: str  # relative to the table root, as written in the Delta log (URI-encoded)
    size_bytes: int
    num_records: int | None
    partition_values: Mapping[str, str | None]
    modification_time: datetime
    min_values: Mapping[str, Any] = field(default_factory=dict)
    max_values: Mapping[str, Any] = field(default_factory=dict)
    null_counts: Mapping[str, int] = field(default_factory=dict)

    def time_range(self, column: str) -> tuple[datetime, datetime] | None:
        """Return the min and max of a timestamp column from the file's statistics (None without them).

        Delta keeps timestamp statistics in milliseconds: delta-rs rounds the max up, delta-spark truncates it
        (Delta's own data skipping adds the missing millisecond back), so a whole-millisecond max is widened to
        the last microsecond of its millisecond. A range is a bound, not exact.
        """
        lo, hi = _as_datetime(self.min_values.get(column)), _as_datetime(self.max_values.get(column))
        if lo is None or hi is None:
            return None
        return lo, hi + _TRUNCATED_MS if hi.microsecond % 1000 == 0 else hi


BeforeCommit = Callable[[str, Sequence[FileInfo]], Mapping[str, Any] | None]
"""Called with the table's URI and the files a replace is about to add (paths relative to the table root,
as on disk), after they are written and before the commit; what it returns is added to the commit's
metadata, and an exception it raises aborts the commit (nothing becomes visible)."""


@dataclass(frozen=True)
class WrittenFile:
    """One Parquet data file a :data:`WriteFiles` function wrote, described by the writer that just closed it."""

    path: str  # relative to the directory the function was given, as on disk (``col=value/.../part-....parquet``)
    size_bytes: int
    partition_values: Mapping[str, str | None]
    footer: pq.FileMetaData  # the footer as written: row count and each column chunk's statistics
    # The rows the file holds (its columns, without the partition columns) when the writer keeps them: a zero-copy
    # slice of what it was given, for a caller that would otherwise read the file back (the ID merge).
    rows: pa.Table | None = field(default=None, compare=False, repr=False)


WriteFiles = Callable[[str], Sequence[WrittenFile] | None]
"""Writes Parquet data files under the directory it is given (Hive-style ``col=value`` partition directories,
the table's columns minus the partition columns); a replace then commits whatever it wrote. It returns every file
it wrote (:class:`WrittenFile`), so the store builds their add actions without opening them again, or None: the
store then lists the directory and reads each file's footer."""


@dataclass(frozen=True)
class FileChange:
    """One add or remove action of a commit: the file, and whether it changed data or only rearranged it.

    For a remove, ``file.modification_time`` is the deletion time and ``file.num_records`` comes from the
    remove's statistics when the writer kept them (else None).
    """

    action: str  # "add" or "remove"
    file: FileInfo
    data_change: bool


@dataclass(frozen=True)
class LogEntry:
    """One commit of the Delta log as written: its file changes, app transactions and commit info.

    This is the per-version delta (Druid's ADD/DROP records) that chunk histories are built from.
    """

    version: int
    timestamp: datetime
    operation: str
    custom_metadata: Mapping[str, Any]
    changes: tuple[FileChange, ...]
    app_transactions: tuple[AppTransaction, ...] = ()
    metadata_changed: bool = False  # the commit has a ``metaData`` action (schema, properties, ...)


@dataclass(frozen=True)
class CommitResult:
    """What a write did: the version it created, or that it was skipped as already committed."""

    table: str
    version: int  # the new version, or the table's current version when skipped
    skipped: bool = False  # True when every app transaction was already at or past its version
    files_added: int = 0
    files_removed: int = 0
    rows_added: int = 0
    bytes_added: int = 0
    reason: str = ""


# Custom commit metadata every lakeshard commit carries (as strings): what a consumer sizes its intake by.
ROWS_ADDED = "lakeshard.rowsAdded"
BYTES_ADDED = "lakeshard.bytesAdded"


@dataclass(frozen=True)
class CommitInfo:
    """One entry of a table's history."""

    version: int
    timestamp: datetime
    operation: str
    parameters: Mapping[str, Any]
    metrics: Mapping[str, Any]
    custom_metadata: Mapping[str, Any]


@dataclass(frozen=True)
class TableSpec:
    """A table a job needs: created when missing (:meth:`TableStore.create_all`), else its shape checked; with
    ``grow``, an existing table first gains the nullable columns of ``schema`` it lacks (``create_or_grow``)."""

    uri: str
    schema: StructType
    partition_by: tuple[str, ...] = ()
    properties: Mapping[str, str] | None = None
    description: str | None = None
    grow: bool = False


@dataclass(frozen=True)
class VacuumReport:
    """What a vacuum removed (or would remove, for a dry run)."""

    table: str
    dry_run: bool
    removed_files: tuple[str, ...]
    removed_staging: tuple[str, ...]


_TRUNCATED_MS = timedelta(microseconds=999)


def _as_datetime(value: Any) -> datetime | None:
    """A statistics value as an aware datetime: adapters give datetimes or ISO strings."""
    if isinstance(value, datetime):
        return aware(value)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return aware(parsed)
    return None
