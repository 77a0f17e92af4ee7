"""The exception hierarchy of lakeshard: every error the library raises on purpose derives from
:class:`LakeshardError`, so a caller (or the CLI) can catch one type and show a clean message."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "CommitConflict",
    "ConfigError",
    "DamagedDataFile",
    "EnvironmentProblem",
    "LakeshardError",
    "ServerUnresponsive",
    "TableExists",
    "TableNotFound",
    "TableStoreError",
    "UnaccountedRows",
    "UnsupportedByAdapter",
]


class LakeshardError(Exception):
    """Root of every error lakeshard raises deliberately."""


class ConfigError(LakeshardError):
    """A configuration value is missing, malformed or out of range."""


class EnvironmentProblem(LakeshardError):
    """The machine lacks something lakeshard needs (Java, a package, a reachable workspace)."""


class TableStoreError(LakeshardError):
    """A table operation failed; the message names the table and what was expected vs found."""


class TableNotFound(TableStoreError):
    """No Delta table exists at the given location."""


class TableExists(TableStoreError):
    """A table was to be created where one already exists (with ``exist_ok=False``)."""


class UnsupportedByAdapter(TableStoreError):
    """The chosen TableStore adapter cannot do this operation faithfully on this table or session.

    The message names the operation, the table, and why (e.g. a table feature such as deletion vectors
    that a plain replay of the log would get wrong, or a session without Delta's JVM classes).
    """


class UnaccountedRows(TableStoreError):
    """The data files a commit would add do not hold the rows Spark reported writing; nothing was committed.

    Typically the committing process cannot see what Spark's executors wrote (a path that means different
    storage on the driver and on the executors, a mount, an eventually consistent listing).

    Attributes:
        table: the table's URI.
        written: the rows Spark reported writing.
        found: the rows in the files the committer found.
    """

    def __init__(self, table: str, target: str, written: int, found: int, files: int) -> None:
        self.table = table
        self.written = written
        self.found = found
        super().__init__(
            f"{table}: Spark reported writing {written:,} rows under {target}, but the {files} data files this "
            f"process finds there hold {found:,} rows; nothing was committed and no progress moved. The committing "
            "process must see the storage Spark's executors write to (same path, same filesystem; a remote Spark "
            "Connect server or cluster needs shared storage, e.g. an object-store URI)"
        )


class CommitConflict(TableStoreError):
    """Another writer committed something this commit conflicts with; nothing of this commit is visible.

    Attributes:
        table: the table's URI.
        read_version: the table version this commit was prepared against.
        app_ids: the app transactions the commit carried (a conflict on them means another writer
            owns that progress now).
        cause: the underlying error text from the Delta implementation.
    """

    def __init__(self, table: str, read_version: int | None, app_ids: tuple[str, ...], cause: str) -> None:
        self.table = table
        self.read_version = read_version
        self.app_ids = app_ids
        self.cause = cause
        apps = f" carrying app transactions {list(app_ids)}" if app_ids else ""
        super().__init__(
            f"commit to {table}{apps} prepared at version {read_version} lost to a concurrent commit: {cause}"
        )


class DamagedDataFile(TableStoreError):
    """A live data file of a table cannot be read as the log describes it: missing, unreadable as Parquet, its
    row count not the log's ``numRecords``, or its columns not the table's schema.

    Flows isolate it to the file's bucket (``tenant_id``/``hour`` partition) and go on with the others.

    Attributes:
        table: the table's URI.
        path: the file's path relative to the table, as the log holds it.
        partition_values: the file's partition values (``tenant_id`` and ``hour`` for ``events``).
        problem: what is wrong with it.
    """

    def __init__(self, table: str, path: str, partition_values: Mapping[str, str | None], problem: str) -> None:
        self.table = table
        self.path = path
        self.partition_values = dict(partition_values)
        self.problem = " ".join(problem.split())  # one line: Arrow and Spark messages span several
        # The tenant first, then the hour: how a bucket is named everywhere else.
        where = ", ".join(f"{k}={v}" for k, v in sorted(self.partition_values.items(),
                                                        key=lambda kv: (kv[0] != "tenant_id", kv[0])))
        super().__init__(f"{table}: data file {path}{f' ({where})' if where else ''} is damaged: {self.problem}")


class ServerUnresponsive(EnvironmentProblem):
    """The Spark Connect server stopped answering, or a request to it outlasted its time limit."""
