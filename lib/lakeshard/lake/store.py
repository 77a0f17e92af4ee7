"""The ``TableStore`` port: every table read and write in lakeshard goes through it (docs/design.md §1).

Its values (files, commits, log entries) are in :mod:`lakeshard.lake.types`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from lakeshard.errors import TableStoreError, UnsupportedByAdapter
from lakeshard.lake.types import (
    AppTransaction,
    BeforeCommit,
    CommitInfo,
    CommitResult,
    FileInfo,
    LogEntry,
    TableSpec,
    VacuumReport,
    WriteFiles,
)

if TYPE_CHECKING:
    from datetime import datetime

    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructField, StructType

K = TypeVar("K", bound=Hashable)  # what groups of files are keyed by (read_arrow_groups)

__all__ = ["TableStore", "check_new_columns"]


def check_new_columns(uri: str, schema: StructType, fields: Sequence[StructField]) -> None:
    """Raise TableStoreError unless every field is nullable and absent from ``schema`` (for add_columns)."""
    names = set(schema.fieldNames())
    taken = [f.name for f in fields if f.name in names]
    if taken:
        raise TableStoreError(f"{uri}: cannot add the columns {taken}: the table has them already")
    required = [f.name for f in fields if not f.nullable]
    if required:
        raise TableStoreError(f"{uri}: cannot add the columns {required} as NOT NULL: the rows already in the "
                              "table have no value for them; add them nullable")


class TableStore(ABC):
    """All table I/O of lakeshard: create, read, append, swap files, time travel, history, vacuum.

    Tables are addressed by URI (``/abs/path``, ``file:///...``, ``s3://...``). Implementations:
    :class:`~lakeshard.lake.embedded.EmbeddedTableStore` (Spark writes Parquet, delta-rs commits) and
    :class:`~lakeshard.lake.native.NativeTableStore` (Delta Lake's JVM writer commits); see docs/lake.md.

    Example::

        store = open_store(spark)
        store.create(uri, schema, partition_by=["tenant_id"])
        result = store.append(uri, df, app_transactions=[AppTransaction("writer/3", 17)])
        df_v1 = store.read(uri, version=1)
    """

    spark: SparkSession
    # How many app transactions one commit may carry (None: any number). A caller with more progress marks to
    # commit splits its rows so that each commit carries at most this many (the shard writers, docs/decisions.md
    # record 2).
    max_app_transactions: int | None = None
    # Whether a shard writer's ``events`` write must check, inside its own transaction, that none of the buckets it
    # writes into is closing or closed (:mod:`lakeshard.buckets.guard`): True where the closing fence cannot fail
    # a transaction that starts after the fence landed (the native adapter's fence is a metadata change).
    writes_guard_closing: bool = False
    # Whether a swap must remove whole partitions (every live file of the partitions it touches, one partition per
    # commit, rows as a DataFrame, no ``before_commit``): True where the swap goes through Delta's public writer
    # (``replaceWhere``), which cannot remove an exact set of files. Compaction then rewrites whole buckets
    # (docs/decisions.md record 14).
    swaps_whole_partitions: bool = False
    # How many missing tables :meth:`create_all` creates side by side: 1 where a create is quick local work; more
    # where each waits on an engine (Delta's: its log, its planning, a round trip under Spark Connect).
    creates_at_once: int = 1
    # The specs :meth:`create_all` made ready in this process (their keys, :func:`_spec_key`): a job's parts each
    # ask for their tables after the flow made all of them ready, and a check is a log read on Delta's engine.
    _ready_specs: set[tuple[Any, ...]] | None = None

    @property
    def writes_in_process(self) -> bool:
        """Whether ``append(write=...)`` works here: files written by this process, then committed as they are."""
        return True

    @abstractmethod
    def exists(self, table: str) -> bool:
        """Return whether a Delta table exists at ``table``."""

    @abstractmethod
    def create(
        self,
        table: str,
        schema: StructType,
        *,
        partition_by: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        description: str | None = None,
        exist_ok: bool = True,
    ) -> int:
        """Create the table (or check an existing one's schema) and return its current version."""

    def create_or_grow(self, table: str, schema: StructType, *, partition_by: Sequence[str] = (),
                       properties: Mapping[str, str] | None = None, description: str | None = None) -> int:
        """Return the table's current version after creating it, or after giving an existing one the nullable
        columns of ``schema`` it lacks (rows written before read them as null), then checking its shape.

        For a table whose schema gained nullable columns at its end: a lakehouse made before keeps working
        without a migration step. Two processes racing to add the columns both end with them.

        Raises:
            TableStoreError: the existing table differs in another way than missing nullable columns.
        """
        if self.exists(table):
            have = set(self.schema(table).fieldNames())
            missing = [f for f in schema.fields if f.name not in have and f.nullable]
            if missing:
                try:
                    self.add_columns(table, missing)
                except TableStoreError:
                    if any(f.name not in self.schema(table).fieldNames() for f in missing):
                        raise
        return self.create(table, schema, partition_by=partition_by, properties=properties, description=description)

    def create_all(self, specs: Sequence[TableSpec]) -> None:
        """Create each of ``specs``' tables that is missing and check the shape of each that exists (growing it
        first where the spec says so): what a job needs, made ready in one call. The missing ones are created
        :attr:`creates_at_once` side by side; then each is checked as :meth:`create` does. A spec this store made
        ready before is left alone: a table is made ready once per process, however many parts of a job ask for it.

        Raises:
            TableStoreError: an existing table's shape differs (the first such table is named).
        """
        if self._ready_specs is None:
            self._ready_specs = set()
        ready = self._ready_specs
        specs = [spec for spec in specs if _spec_key(spec) not in ready]
        missing = [spec for spec in specs if not self.exists(spec.uri)] if self.creates_at_once > 1 else []
        if len(missing) > 1:
            at_once = min(len(missing), self.creates_at_once)
            with ThreadPoolExecutor(at_once, thread_name_prefix="lakeshard-create") as pool:
                for done in [pool.submit(self.create_spec, spec) for spec in missing]:
                    done.result()
        for spec in specs:
            self.create_spec(spec)
            ready.add(_spec_key(spec))

    def create_spec(self, spec: TableSpec) -> int:
        """Return the version of ``spec``'s table after :meth:`create` (or :meth:`create_or_grow`) of it."""
        make = self.create_or_grow if spec.grow else self.create
        return make(spec.uri, spec.schema, partition_by=spec.partition_by, properties=spec.properties,
                    description=spec.description)

    @abstractmethod
    def add_columns(self, table: str, fields: Sequence[StructField]) -> int:
        """Add nullable columns to an existing table (its rows, and files written before, read them as null);
        return the new version.

        Raises:
            TableStoreError: a column exists already, is not nullable, or the commit failed.
        """

    @abstractmethod
    def schema(self, table: str) -> StructType:
        """Return the table's schema (data and partition columns) as a Spark ``StructType``."""

    @abstractmethod
    def partition_columns(self, table: str) -> list[str]:
        """Return the table's partition columns in order."""

    @abstractmethod
    def version(self, table: str) -> int:
        """Return the table's latest version."""

    @abstractmethod
    def read(
        self, table: str, *, version: int | None = None, timestamp: datetime | str | None = None
    ) -> DataFrame:
        """Return a snapshot of the table (latest, at ``version`` or as of ``timestamp``) as a DataFrame."""

    @abstractmethod
    def read_files(self, table: str, files: Sequence[FileInfo]) -> DataFrame:
        """Return the rows of exactly these data files, partition values included."""

    @abstractmethod
    def read_arrow(self, table: str, files: Sequence[FileInfo], columns: Sequence[str] | None = None, *,
                   where: pc.Expression | None = None) -> pa.Table:
        """Return the rows of exactly these data files as an Arrow table read in this process (no Spark job),
        partition values included, typed as the table's Arrow schema; ``columns`` narrows the read.

        ``where`` (a pyarrow expression over the table's columns) keeps only the rows it matches; an adapter may
        use it to skip whole row groups by their statistics, so a file laid out sorted by the filtered column
        in small row groups is read in part (the embedded adapter does, :mod:`lakeshard.lake.protocol.rowgroups`).
        """

    def read_arrow_groups(self, table: str, groups: Mapping[K, Sequence[FileInfo]],
                          columns: Sequence[str] | None = None, *, where: pc.Expression | None = None
                          ) -> dict[K, pa.Table]:
        """Return, per group of data files, :meth:`read_arrow` of those files (an adapter may read all at once)."""
        return {key: self.read_arrow(table, files, columns, where=where) for key, files in groups.items()}

    @abstractmethod
    def arrow_schema(self, table: str) -> pa.Schema:
        """Return the table's schema (data and partition columns) as Arrow types, as Parquet files hold them."""

    @abstractmethod
    def append(
        self,
        table: str,
        df: DataFrame | None,
        *,
        app_transactions: Sequence[AppTransaction] = (),
        metadata: Mapping[str, Any] | None = None,
        read_version: int | None = None,
        write: WriteFiles | None = None,
    ) -> CommitResult:
        """Append ``df``'s rows in one commit that also carries ``app_transactions`` and ``metadata``.

        ``read_version`` is the version the caller based its decision on (what it read); commits since
        then are checked for conflicts as if this commit had been prepared right after reading it.
        Instead of ``df``, ``write(directory)`` may write the Parquet files itself (as for
        :meth:`replace_files`); with neither, the commit adds no file (it still carries the app transactions).
        """

    def read_table_arrow(self, table: str, columns: Sequence[str] | None = None, *,
                         version: int | None = None, where: pc.Expression | None = None) -> pa.Table:
        """Return every row of a small table (latest or at ``version``; those matching ``where``, as
        :meth:`read_arrow` filters) read in this process with pyarrow.

        For the routing state, batch plans and other bookkeeping tables a step reads whole: a Spark job's
        fixed cost (and, in a lazily opened store, a JVM) would dwarf the read.
        """
        return self.read_arrow(table, self.files(table, version=version), columns, where=where)

    @abstractmethod
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

    def frame(self, table: str, rows: pa.Table) -> DataFrame:
        """Return Arrow rows as a DataFrame of the store's session, to be written into ``table`` (by
        :meth:`append` or a swap): a session that cannot take a batch whole (Spark Connect's server) gets it in
        bounded requests."""
        from lakeshard.runtime import arrow_dataframe

        return arrow_dataframe(self.spark, rows)

    def check_fence(self, table: str) -> None:
        """Return if :meth:`fence` can commit to ``table`` in this session, else raise why not.

        Raises:
            UnsupportedByAdapter: the adapter (or this session) cannot make such a commit.
        """
        raise UnsupportedByAdapter(f"{table}: this TableStore adapter cannot commit a fence of app transactions")

    def fence(self, table: str, app_transactions: Sequence[AppTransaction], *, read_version: int,
              metadata: Mapping[str, Any] | None = None) -> CommitResult:
        """Commit no file, re-asserting ``app_transactions`` at the versions given (their current ones): a
        conflict point prepared at ``read_version``, not progress.

        Unlike :meth:`append`, an app transaction already at its version is not a replay: the commit is made,
        and it fails with :class:`~lakeshard.errors.CommitConflict` when a commit since ``read_version`` carried
        one of the same app ids (and a commit prepared before it that carries one fails once it landed).

        Raises:
            UnsupportedByAdapter: the adapter cannot make such a commit.
        """
        self.check_fence(table)
        raise UnsupportedByAdapter(f"{table}: this TableStore adapter cannot commit a fence of app transactions")

    @abstractmethod
    def replace_files(
        self,
        table: str,
        remove: Sequence[str],
        df: DataFrame | None,
        *,
        data_change: bool = False,
        app_transactions: Sequence[AppTransaction] = (),
        metadata: Mapping[str, Any] | None = None,
        read_version: int | None = None,
        before_commit: BeforeCommit | None = None,
        write: WriteFiles | None = None,
    ) -> CommitResult:
        """Remove the live files ``remove`` and add ``df``'s rows in one atomic commit.

        ``before_commit`` sees the written files before the commit and may add commit metadata about them
        (compaction commits each new file's pruning regexes to its ``fragments`` table there, and puts a copy
        in this commit's metadata); if it raises, nothing is committed. ``write`` may
        write the new files itself instead of ``df`` (compaction's streaming merge does).
        """

    @abstractmethod
    def files(self, table: str, *, version: int | None = None) -> list[FileInfo]:
        """Return the live data files of the table (latest or at ``version``)."""

    @abstractmethod
    def log_entries(self, table: str, *, start: int | None = None, end: int | None = None) -> list[LogEntry]:
        """Return the commits ``start``..``end`` (inclusive) as written in the log, oldest first.

        ``start`` defaults to the oldest commit the log still holds (old commit files may have been
        cleaned up after a checkpoint), ``end`` to the latest version.
        """

    def added_since(self, table: str, after: int, end: int) -> dict[str, int]:
        """Return, for each file a commit in ``after + 1``..``end`` added, the version of the newest such commit
        (one read of the log; empty when ``after >= end``).

        Raises:
            TableStoreError: the log no longer holds those commits (cleaned up after a checkpoint).
        """
        added: dict[str, int] = {}
        if after < end:
            for entry in self.log_entries(table, start=after + 1, end=end):
                added.update((c.file.path, entry.version) for c in entry.changes if c.action == "add")
        return added

    @abstractmethod
    def checkpoint_versions(self, table: str) -> list[int]:
        """Return the versions that have a checkpoint (a materialised snapshot of the log), oldest first."""

    @abstractmethod
    def checkpoint_files(self, table: str, version: int) -> list[FileInfo]:
        """Return the live data files recorded in the checkpoint at ``version``."""

    @abstractmethod
    def create_checkpoint(self, table: str) -> int:
        """Write a checkpoint of the table's latest version and return that version."""

    def restore_checkpoint_interval(self, table: str) -> bool:
        """Return whether the table's ``delta.checkpointInterval`` was given back the value it had before a
        :meth:`create_checkpoint` that sets it to 1 for one commit was interrupted between its two property
        changes (what to put back is in a table property of lakeshard's own, set with the 1); nothing changes
        when none was. This default does nothing: an adapter whose checkpoints change no property leaves none.

        Raises:
            CommitConflict: the change lost a race with another commit (try again later).
        """
        return False

    def clean_log(self, table: str) -> int:
        """Delete the commit files past the table's ``delta.logRetentionDuration`` that a checkpoint supersedes;
        return how many went. This default does nothing: Delta on the JVM cleans up at every checkpoint."""
        return 0

    @abstractmethod
    def history(self, table: str, *, limit: int | None = None) -> list[CommitInfo]:
        """Return the table's commits, newest first."""

    @abstractmethod
    def transaction_version(self, table: str, app_id: str) -> int | None:
        """Return the latest committed version of app transaction ``app_id``, or None."""

    def transaction_versions(self, table: str, app_ids: Sequence[str]) -> dict[str, int | None]:
        """Return :meth:`transaction_version` of each app id, all read from one snapshot of the table."""
        return {a: self.transaction_version(table, a) for a in app_ids}

    @abstractmethod
    def vacuum(self, table: str, *, retention_hours: float = 168.0, dry_run: bool = False) -> VacuumReport:
        """Delete files no version within ``retention_hours`` needs, and stale uncommitted writes."""


def _spec_key(spec: TableSpec) -> tuple[Any, ...]:
    """Return what makes ``spec`` the spec it is, hashable (its schema as JSON, its properties sorted)."""
    return (spec.uri, spec.schema.json(), tuple(spec.partition_by), tuple(sorted((spec.properties or {}).items())),
            spec.description, spec.grow)
