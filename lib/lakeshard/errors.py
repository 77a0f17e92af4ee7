"""The exception hierarchy of lakeshard: every error the library raises on purpose derives from
:class:`LakeshardError`, so a caller (or the CLI) can catch one type and show a clean message."""

from __future__ import annotations

__all__ = [
    "CommitConflict",
    "ConfigError",
    "EnvironmentProblem",
    "LakeshardError",
    "TableExists",
    "TableNotFound",
    "TableStoreError",
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
