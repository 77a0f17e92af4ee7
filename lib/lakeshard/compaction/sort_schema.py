"""Sort schemas: the column order every data file of a table is sorted by, at ingest and at compaction.

Husky keeps one lexicographic order per table — zero or more columns, then the timestamp — as an
invariant of every fragment, so that compaction is a merge (not a sort) and files cover narrow key ranges.
The ingest writer imports :data:`EVENTS_SORT_SCHEMA` to sort what it writes; compaction keeps it.

Example::

    schema = sort_schema_for("events")            # service, status, env, ts
    df.sortWithinPartitions(*schema.columns)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lakeshard.compaction.errors import CompactionError
from lakeshard.tables import EVENTS, EVENTS_SORT_COLUMNS
from lakeshard.utc import as_utc

__all__ = [
    "EVENTS_SORT_SCHEMA",
    "SortKey",
    "SortSchema",
    "SortSchemaError",
    "key_of",
    "sort_schema_for",
    "timestamp_text",
]


class SortSchemaError(CompactionError):
    """A sort schema is malformed or names a column the table lacks."""


# One element of a sort key as compared in Python: nulls first (Spark's ascending default), then the value.
SortKey = tuple[tuple[int, Any], ...]


@dataclass(frozen=True)
class SortSchema:
    """The sort columns of a table: string columns (pruned by regex), then the timestamp column.

    Args:
        columns: the order, most significant first; the last one is the timestamp.
        timestamp: the timestamp column's name (must be ``columns[-1]``).
    """

    columns: tuple[str, ...]
    timestamp: str = "ts"

    def __post_init__(self) -> None:
        if not self.columns or self.columns[-1] != self.timestamp:
            raise SortSchemaError(f"a sort schema ends with its timestamp column {self.timestamp!r}, "
                                  f"found {list(self.columns)}")
        if len(set(self.columns)) != len(self.columns):
            raise SortSchemaError(f"a sort schema names each column once, found {list(self.columns)}")

    @property
    def string_columns(self) -> tuple[str, ...]:
        """Return the sort columns before the timestamp: the ones that get a pruning regex."""
        return self.columns[:-1]

    def check(self, table: str, table_columns: Sequence[str]) -> None:
        """Raise :class:`SortSchemaError` unless every sort column is a column of ``table``."""
        missing = [c for c in self.columns if c not in table_columns]
        if missing:
            raise SortSchemaError(f"{table}: sort columns {missing} are not in the table's columns "
                                  f"{list(table_columns)}")


EVENTS_SORT_SCHEMA = SortSchema(EVENTS_SORT_COLUMNS)
"""The ``events`` table's order (Husky's typical log schema): service, status, env, timestamp."""

_DEFAULTS: Mapping[str, SortSchema] = {EVENTS: EVENTS_SORT_SCHEMA}


def sort_schema_for(table: str, overrides: Mapping[str, SortSchema] | None = None) -> SortSchema:
    """Return the sort schema of the table named ``table`` (its last path segment), overrides first.

    Raises:
        SortSchemaError: no sort schema is known for the table.
    """
    name = table.rstrip("/").rsplit("/", 1)[-1]
    known = {**_DEFAULTS, **(overrides or {})}
    if name not in known:
        raise SortSchemaError(f"no sort schema for table {name!r}; known: {sorted(known)} "
                              "(pass one explicitly)")
    return known[name]


def key_of(values: Sequence[Any]) -> SortKey:
    """Return a sort key comparable in Python as Spark orders rows ascending (nulls first).

    Timestamps compare as UTC instants; strings by code point, which is the UTF-8 byte order Spark uses.
    """
    out: list[tuple[int, Any]] = []
    for v in values:
        if v is None:
            out.append((0, ""))
        elif isinstance(v, datetime):
            out.append((1, timestamp_text(v)))
        else:
            out.append((1, v))
    return tuple(out)


def timestamp_text(value: datetime) -> str:
    """Return ``value`` as fixed-width UTC text (microseconds always shown), so text order is time order."""
    return as_utc(value).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
