"""Fragment metadata: per data file compaction wrote, its level, key range and per-column pruning regexes.

Husky keeps this next to each fragment in FoundationDB; here it is a row of the ``fragments`` Delta table
(:mod:`lakeshard.compaction.fragment_table`), written before the swap commit that adds the file. The swap
commit also carries it in its custom metadata (key :data:`FRAGMENTS_KEY`) for diagnostics; that copy goes
when the Delta log is cleaned up, the table rows stay. Files without metadata (as writers flush them) are
level 0 with unknown key range and no regex, and queries fall back to min/max for them.

Delta add actions have no free-form tags in delta-rs 1.6.6 (``AddAction`` takes path, size, partition
values, time, dataChange and stats only) and its Python API writes no domain metadata, hence a table.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakeshard.compaction.errors import CompactionError
from lakeshard.compaction.sort_schema import SortKey, SortSchema, key_of, timestamp_text
from lakeshard.lake import filesystem
from lakeshard.pruning import DEFAULT_MAX_REGEX_CHARS, ColumnPruning, PruningError

__all__ = [
    "FRAGMENTS_KEY",
    "FragmentError",
    "FragmentMeta",
    "describe_file",
    "fragment_meta",
    "fragments_metadata",
]

FRAGMENTS_KEY = "lakeshard.fragments"
_FORMAT = 1
_BATCH_ROWS = 65_536


class FragmentError(CompactionError):
    """Fragment metadata in a commit is malformed; the message names the table, version and file."""


@dataclass(frozen=True)
class FragmentMeta:
    """One data file as compaction described it when it added the file."""

    path: str  # relative to the table root, decoded (as on disk)
    level: int
    rows: int
    first_key: tuple[Any, ...]  # the sort columns of the first row (timestamps as fixed-width UTC text)
    last_key: tuple[Any, ...]
    columns: Mapping[str, ColumnPruning] = field(default_factory=dict)
    # An outlier output (lakeshard.compaction.outliers): it overlaps the regular files of its level.
    outlier: bool = False

    @property
    def first(self) -> SortKey:
        """Return the first row's key, comparable as Spark sorts (see :func:`key_of`)."""
        return key_of(self.first_key)

    @property
    def last(self) -> SortKey:
        """Return the last row's key, comparable as Spark sorts."""
        return key_of(self.last_key)

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form stored in the fragments table (and the commit's metadata)."""
        out = {"level": self.level, "rows": self.rows, "first": list(self.first_key),
               "last": list(self.last_key), "columns": {c: m.to_json() for c, m in self.columns.items()}}
        if self.outlier:
            out["outlier"] = True  # written only when set: metadata of older versions reads as regular
        return out

    @classmethod
    def from_json(cls, path: str, data: Mapping[str, Any]) -> FragmentMeta:
        """Return the metadata :meth:`to_json` stored for ``path``.

        Raises:
            FragmentError: a field is missing or ill-typed.
        """
        try:
            columns = {c: ColumnPruning.from_json(m) for c, m in data["columns"].items()}
            return cls(path, int(data["level"]), int(data["rows"]), tuple(data["first"]),
                       tuple(data["last"]), columns, bool(data.get("outlier", False)))
        except (KeyError, TypeError, ValueError, AttributeError, PruningError) as exc:
            raise FragmentError(f"fragment metadata of {path} is malformed ({exc}): {str(data)[:200]}") from None


def _plain(value: Any) -> Any:
    from datetime import datetime

    return timestamp_text(value) if isinstance(value, datetime) else value


def fragment_meta(path: str, *, level: int, rows: int, first: Sequence[Any], last: Sequence[Any],
                  distinct: Mapping[str, Iterable[str | None]], outlier: bool = False,
                  max_regex_chars: int = DEFAULT_MAX_REGEX_CHARS) -> FragmentMeta:
    """Return the fragment metadata of a file (``path`` relative to the table root, as on disk, not as the log
    encodes it) from its first and last sort keys and its columns' values."""
    columns = {c: ColumnPruning.build(v, max_regex_chars=max_regex_chars) for c, v in distinct.items()}
    return FragmentMeta(path, level, rows, tuple(_plain(v) for v in first),
                        tuple(_plain(v) for v in last), columns, outlier)


def describe_file(root: str, path: str, schema: SortSchema, *, level: int, outlier: bool = False,
                  max_regex_chars: int = DEFAULT_MAX_REGEX_CHARS) -> FragmentMeta:
    """Return the fragment metadata of one written Parquet file (``path`` relative to ``root``, as on disk),
    reading only its sort columns.

    The file is read in batches, so memory stays at one batch of the sort columns plus the distinct
    values seen so far.
    """
    fs, base = filesystem(root)
    distinct: dict[str, set[str | None]] = {c: set() for c in schema.string_columns}
    first: tuple[Any, ...] | None = None
    last: tuple[Any, ...] = ()
    rows = 0
    with fs.open_input_file(f"{base}/{path}") as handle:
        reader = pq.ParquetFile(handle)
        for batch in reader.iter_batches(batch_size=_BATCH_ROWS, columns=list(schema.columns)):
            if batch.num_rows == 0:
                continue
            rows += batch.num_rows
            for col in schema.string_columns:
                distinct[col].update(pc.unique(batch.column(col)).to_pylist())
            if first is None:
                first = tuple(batch.column(c)[0].as_py() for c in schema.columns)
            last = tuple(batch.column(c)[batch.num_rows - 1].as_py() for c in schema.columns)
    return fragment_meta(path, level=level, rows=rows, first=first or (), last=last, distinct=distinct,
                         outlier=outlier, max_regex_chars=max_regex_chars)


def fragments_metadata(fragments: Iterable[FragmentMeta]) -> dict[str, str]:
    """Return the commit metadata entry that describes ``fragments``."""
    body = {"format": _FORMAT, "files": {f.path: f.to_json() for f in fragments}}
    return {FRAGMENTS_KEY: json.dumps(body, separators=(",", ":"), ensure_ascii=False)}
