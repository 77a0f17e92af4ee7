"""Merging sorted Parquet files into sorted outputs, in memory when the budget holds them, else streaming.

Two strategies, the same outputs (same rows, same order, same file boundaries):

* **in memory** — when ``3 x`` the inputs' decoded size fits the memory budget (the inputs, their sorted
  copy and the split lanes live at once): read every input, one Arrow sort (``sort_indices`` + ``take``),
  slice the outputs. Inputs need not be sorted. Most compaction merges (a bucket's small files) take this
  path; Arrow does the work in C++ instead of a Python-driven merge loop. Inputs are read one row group at
  a time and their decoded size is checked as they come: past a third of the budget the rows read so far
  are dropped and the merge streams instead (:class:`OverBudget` when streaming is not allowed).
* **streaming** (Husky's merge) — each input is already sorted by the sort schema, so merging never needs
  all rows at once. The merge keeps, per input, only its latest batch: at every step the *frontier* is the
  smallest "last key loaded" among inputs not yet exhausted; every pending row with a key at or below the
  frontier can be written, because no input can still produce a smaller key. Then the frontier input loads
  its next batch. Pending rows are therefore at most one batch per input. Heavy columns (long messages)
  make a batch of N rows big: :func:`batch_rows_for` shrinks N so that ``inputs x batch bytes`` fits the
  budget, from the inputs' first row groups (decoded bytes per row).

Outputs rotate at ``target_rows`` but only where the key changes, so outputs are disjoint in sort order.
With an :class:`~lakeshard.compaction.outliers.OutlierSplit`, rows carrying a value rare in the merge go to
a second lane of outputs (sorted and disjoint among themselves, overlapping the regular lane); the value
counts come from the inputs (a pre-pass over the sort columns when streaming).

Each output is described while it is written (:class:`MergedFile`: rows, first and last key, the distinct
values of the string sort columns, its lane), so compaction does not read its outputs back for the
pruning regexes.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakeshard.compaction.errors import CompactionError
from lakeshard.compaction.outliers import OutlierSplit, RareValues
from lakeshard.compaction.sort_schema import SortKey, SortSchema, key_of
from lakeshard.lake import ascending_nulls_first

__all__ = ["MergeError", "MergeStats", "MergedFile", "OverBudget", "batch_rows_for", "merge_sorted_files"]

# Output row groups hold about one batch per input (bounded by the same budget), at most this many rows.
_MAX_GROUP_ROWS = 131_072
# The in-memory merge holds the inputs, their sorted copy and the lanes split from it: about 3x the inputs.
_IN_MEMORY_FACTOR = 3
# Of the budget, this share is planned for; the rest is allocator headroom.
_USABLE = 0.8


class MergeError(CompactionError):
    """Inputs cannot be merged: a missing sort column, an unsorted input, a budget too small for one row."""


class OverBudget(MergeError):
    """The inputs are too big for the in-memory merge within its budget (nothing was written)."""


@dataclass(frozen=True)
class MergedFile:
    """One output of a merge, described while it was written."""

    path: str
    rows: int
    first: tuple[Any, ...]  # the sort columns of its first row (Python values)
    last: tuple[Any, ...]
    distinct: Mapping[str, frozenset[str | None]]  # per string sort column, the values it holds
    outlier: bool = False


@dataclass(frozen=True)
class MergeStats:
    """What a merge did and the most Arrow memory its pending rows took (sampled at every step)."""

    rows: int
    files: tuple[MergedFile, ...]
    batch_rows: int  # 0 for the in-memory strategy
    steps: int
    peak_pending_bytes: int
    in_memory: bool = False
    rare: RareValues = field(default_factory=dict)

    @property
    def outputs(self) -> tuple[str, ...]:
        """Return the output paths: the regular lane's in sort order, then the outlier lane's."""
        return tuple(f.path for f in self.files)


def _sizes(path: str) -> tuple[float, float]:
    """Return (Arrow bytes per row, Arrow bytes of the largest row group) of a Parquet file.

    Decoded sizes, from its first row group: that is what memory holds. Parquet's own sizes are of
    encoded pages (a dictionary-encoded message column looks tiny there).
    """
    reader = pq.ParquetFile(path)
    meta = reader.metadata
    if meta.num_row_groups == 0:
        return 0.0, 0.0
    group = reader.read_row_group(0)
    per_row = group.nbytes / max(1, group.num_rows)
    largest = max(meta.row_group(i).num_rows for i in range(meta.num_row_groups))
    return per_row, per_row * largest


def _rows(path: str) -> int:
    return int(pq.ParquetFile(path).metadata.num_rows)


def batch_rows_for(inputs: Sequence[str], memory_budget_bytes: int, *, max_rows: int = 65_536) -> int:
    """Return rows per batch so that the streaming merge of ``inputs`` stays within ``memory_budget_bytes``.

    Memory is one decoded row group per input (the reader's), plus per input one pending batch, its
    sorted copy and its share of the output row group being buffered: ``inputs x (row group + 3 batches)``
    plus slack, within 80% of the budget (allocator headroom).

    Raises:
        MergeError: the inputs' row groups alone fill the budget (memory is bounded by row-group size x
            inputs: merge fewer inputs at a time, or write smaller row groups).
    """
    sizes = [_sizes(p) for p in inputs]
    per_row = max((s[0] for s in sizes), default=1.0) or 1.0
    row_groups = sum(s[1] for s in sizes)
    room = memory_budget_bytes * _USABLE - row_groups
    rows = int(room / (3 * (len(inputs) + 1)) / per_row)
    if rows < 1:
        raise MergeError(f"a memory budget of {memory_budget_bytes} bytes cannot hold one row group of each of "
                         f"{len(inputs)} inputs ({row_groups:.0f} bytes) plus one row each ({per_row:.0f} bytes "
                         "per row): merge fewer inputs at a time or write smaller row groups")
    return min(rows, max_rows)


def _sort_keys(columns: Sequence[str]) -> pc.SortOptions:
    """Return Arrow sort options matching Spark's ascending order: nulls first in every column."""
    return ascending_nulls_first(columns)


def _all_rows(n: int) -> pa.Array:
    """Return the indices 0..n-1 (for copying or checking a table's row order)."""
    return pa.array(np.arange(n, dtype=np.uint64))


def _is_sorted(table: pa.Table, columns: Sequence[str]) -> bool:
    order = pc.sort_indices(table, options=_sort_keys(columns))
    return bool(pc.all(pc.equal(order, _all_rows(table.num_rows))).as_py())


def _row(table: pa.Table, columns: Sequence[str], i: int) -> tuple[Any, ...]:
    """Return the values of ``columns`` in row ``i``."""
    return tuple(table.slice(i, 1).select(columns).to_pylist()[0].values())


def _key_at(table: pa.Table, columns: Sequence[str], i: int) -> SortKey:
    return key_of(_row(table, columns, i))


def _upper_bound(table: pa.Table, columns: Sequence[str], key: SortKey) -> int:
    """Return how many leading rows of the sorted ``table`` have a key <= ``key`` (binary search)."""
    lo, hi = 0, table.num_rows
    while lo < hi:
        mid = (lo + hi) // 2
        if _key_at(table, columns, mid) <= key:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _conform(table: pa.Table, schema: pa.Schema, path: str) -> pa.Table:
    """Return ``table`` with the first input's column order and types (writers differ in nullability)."""
    missing = [n for n in schema.names if n not in table.column_names]
    if missing:
        raise MergeError(f"input {path} lacks columns {missing} of the first input")
    try:
        return table.select(schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise MergeError(f"input {path} does not fit the first input's schema: {exc}") from None


class _Input:
    def __init__(self, path: str, columns: Sequence[str], batch_rows: int, schema: pa.Schema) -> None:
        self.path = path
        self._columns = columns
        self._schema = schema
        self._batches: Iterator[pa.RecordBatch] = pq.ParquetFile(path).iter_batches(batch_size=batch_rows)
        self.last: SortKey | None = None
        self.done = False

    def next(self) -> pa.Table | None:
        for batch in self._batches:
            if batch.num_rows == 0:
                continue
            table = _conform(pa.Table.from_batches([batch]), self._schema, self.path)
            first = _key_at(table, self._columns, 0)
            # A file is checked in full on its first batch (an unsorted file — written before ingest sorted —
            # shows there), later batches only at their boundary: a full check per batch doubles the cost.
            if self.last is None and not _is_sorted(table, self._columns):
                raise MergeError(f"input {self.path} is not sorted by {list(self._columns)} (first batch)")
            if self.last is not None and first < self.last:
                raise MergeError(f"input {self.path} is not sorted by {list(self._columns)}: a batch starts "
                                 f"at {first} after {self.last}")
            self.last = _key_at(table, self._columns, table.num_rows - 1)
            return table
        self.done = True
        return None


class _Lane:
    """Sorted rows into output files of ``target_rows`` rows, each ending only where the key changes.

    Each file is described as it is written (first and last key, distinct values of the string columns).
    """

    def __init__(self, schema: SortSchema, target_rows: int, group_rows: int, name: Callable[[], str], *,
                 outlier: bool) -> None:
        self._columns = list(schema.columns)
        self._strings = list(schema.string_columns)
        self._target_rows = target_rows
        self._group_rows = group_rows
        self._name = name
        self._outlier = outlier
        self.files: list[MergedFile] = []
        self._writer: pq.ParquetWriter | None = None
        self._path = ""
        self._buffered: list[pa.Table] = []
        self._rows = 0
        self._first: tuple[Any, ...] = ()
        self._last: tuple[Any, ...] = ()
        self._last_key: SortKey | None = None
        self._distinct: dict[str, set[str | None]] = {}

    def write(self, table: pa.Table, *, copy: bool) -> None:
        """Append sorted rows (``copy``: copy slices so the caller's buffers can be freed)."""
        while table.num_rows:
            if self._writer is None:
                self._open(table.schema)
            room = self._target_rows - self._rows
            if room <= 0:
                # Full: rows equal to the last written key stay in this output, so outputs stay disjoint.
                assert self._last_key is not None
                take = _upper_bound(table, self._columns, self._last_key)
                if take == 0:
                    self._close()
                    continue
            else:
                take = min(room, table.num_rows)
            piece = table.slice(0, take)
            # A copy: a slice would keep the whole sorted pending table alive until the group is written.
            self._buffered.append(piece.take(_all_rows(take)) if copy else piece)
            if sum(t.num_rows for t in self._buffered) >= self._group_rows:
                self._flush()
            self._describe(piece)
            table = table.slice(take)

    def _describe(self, piece: pa.Table) -> None:
        if self._rows == 0:
            self._first = _row(piece, self._columns, 0)
        self._rows += piece.num_rows
        self._last = _row(piece, self._columns, piece.num_rows - 1)
        self._last_key = key_of(self._last)
        for c in self._strings:
            self._distinct.setdefault(c, set()).update(pc.unique(piece.column(c)).to_pylist())

    def _open(self, schema: pa.Schema) -> None:
        self._path = self._name()
        self._writer = pq.ParquetWriter(self._path, schema)
        self._rows = 0
        self._distinct = {}

    def _flush(self) -> None:
        if self._buffered and self._writer is not None:
            self._writer.write_table(pa.concat_tables(self._buffered), row_group_size=self._group_rows)
        self._buffered.clear()

    def _close(self) -> None:
        if self._writer is None:
            return
        self._flush()
        self._writer.close()
        self._writer = None
        self.files.append(MergedFile(self._path, self._rows, self._first, self._last,
                                     {c: frozenset(v) for c, v in self._distinct.items()}, self._outlier))

    def close(self) -> None:
        """Finish the open output."""
        self._close()


class _Lanes:
    """The regular lane and, with rare values, the outlier lane; rows are routed to them by their values."""

    def __init__(self, schema: SortSchema, output: Callable[[int], str], target_rows: int, group_rows: int,
                 rare: RareValues, *, all_outliers: bool) -> None:
        numbers = itertools.count()

        def name() -> str:
            return output(next(numbers))

        self.rare = rare
        self._all_outliers = all_outliers
        self.regular = _Lane(schema, target_rows, group_rows, name, outlier=all_outliers)
        self.outliers = _Lane(schema, target_rows, group_rows, name, outlier=True)

    def write(self, table: pa.Table, *, copy: bool) -> None:
        """Append sorted rows, the ones carrying a rare value to the outlier lane."""
        if not self.rare or self._all_outliers:
            self.regular.write(table, copy=copy)
            return
        mask = _outlier_mask(table, self.rare)
        # filter() copies, so neither lane keeps the caller's buffers alive.
        self.regular.write(table.filter(pc.invert(mask)), copy=False)
        self.outliers.write(table.filter(mask), copy=False)

    def close(self) -> list[MergedFile]:
        """Finish both lanes; return the regular outputs in sort order, then the outlier outputs."""
        self.regular.close()
        self.outliers.close()
        return [*self.regular.files, *self.outliers.files]


def _outlier_mask(table: pa.Table, rare: RareValues) -> pa.ChunkedArray:
    mask: Any = None
    for col, values in rare.items():
        value_set = pa.array(list(values), type=table.schema.field(col).type)
        hit = pc.is_in(table.column(col), value_set=value_set, skip_nulls=False)
        mask = hit if mask is None else pc.or_(mask, hit)
    return mask


def _counts(columns: Sequence[str], tables: Iterable[pa.Table | pa.RecordBatch]) -> dict[str, Counter[str | None]]:
    """Return each column's value counts over ``tables``."""
    out: dict[str, Counter[str | None]] = {c: Counter() for c in columns}
    for table in tables:
        for c in columns:
            for item in pc.value_counts(table.column(c)).to_pylist():
                out[c][item["values"]] += item["counts"]
    return out


def _rare_values(inputs: Sequence[str] | Sequence[pa.Table], schema: SortSchema, rows: int,
                 outliers: OutlierSplit | None, target_rows: int) -> RareValues:
    """Return the values whose rows go to the outlier lane (none if the merge is not split)."""
    columns = list(schema.string_columns[1:])  # the leading column is clustered by the sort already
    if outliers is None or not columns or not outliers.applies(rows, target_rows):
        return {}
    # Files are counted a batch of their sort columns at a time: a streaming merge stays within its budget.
    tables = (t for p in inputs for t in (pq.ParquetFile(p).iter_batches(batch_size=65_536, columns=columns)
                                          if isinstance(p, str) else [p]))
    return outliers.rare_values(_counts(columns, tables), rows)


def merge_sorted_files(inputs: Sequence[str], schema: SortSchema, output: Callable[[int], str], *,
                       target_rows: int, memory_budget_bytes: int, batch_rows: int | None = None,
                       outliers: OutlierSplit | None = None, all_outliers: bool = False,
                       strategy: Literal["auto", "memory", "stream"] = "auto",
                       file_metadata: Mapping[bytes, bytes] | None = None) -> MergeStats:
    """Merge Parquet ``inputs`` into sorted outputs named ``output(0)``, ``output(1)``, ... (disjoint per lane).

    Args:
        inputs: Parquet files with the same columns; sorted by ``schema`` (required for streaming only).
        schema: the sort order.
        output: returns the path of the n-th output file.
        target_rows: rows per output; an output ends at the first key change after this many rows.
        memory_budget_bytes: Arrow memory the merge may use.
        batch_rows: rows read per input at a time when streaming (default :func:`batch_rows_for`).
        outliers: split rows with values rare in this merge into outlier outputs (see
            :mod:`~lakeshard.compaction.outliers`); ``None`` writes one lane.
        all_outliers: the inputs are outlier files: every output is an outlier output (no split).
        strategy: ``auto`` (in memory when the inputs fit the budget, else streaming), ``memory`` (raise
            :class:`OverBudget` when they do not fit) or ``stream``.
        file_metadata: key-value metadata every output's footer carries (e.g. its partition values).

    Raises:
        MergeError: no inputs, mismatched columns, an unsorted input when streaming, a budget too small.
    """
    if not inputs:
        raise MergeError("nothing to merge: no input files")
    # Inputs' own footer metadata is not carried over: it described them, not the outputs.
    unified = pq.read_schema(inputs[0]).remove_metadata().with_metadata(dict(file_metadata or {}))
    if strategy != "stream":
        try:
            return _merge_in_memory(inputs, schema, output, unified, target_rows, outliers, all_outliers,
                                    _USABLE * memory_budget_bytes / _IN_MEMORY_FACTOR)
        except OverBudget:
            if strategy == "memory":
                raise
    if batch_rows is None:
        batch_rows = batch_rows_for(inputs, memory_budget_bytes)
    return _merge_streaming(inputs, schema, output, unified, target_rows, batch_rows, outliers, all_outliers)


def _merge_in_memory(inputs: Sequence[str], schema: SortSchema, output: Callable[[int], str], unified: pa.Schema,
                     target_rows: int, outliers: OutlierSplit | None, all_outliers: bool,
                     limit: float) -> MergeStats:
    """Read, sort once, slice.

    Raises:
        OverBudget: the inputs' decoded row groups pass ``limit`` bytes (found while reading them).
    """
    tables: list[pa.Table] = []
    size = 0
    for p in inputs:
        reader = pq.ParquetFile(p)
        for group in range(reader.num_row_groups):
            tables.append(_conform(reader.read_row_group(group), unified, p))
            size += tables[-1].nbytes
            if size > limit:
                tables.clear()  # a caller keeping the exception (a future) must not keep the rows alive
                raise OverBudget(f"inputs of {inputs[0]} and {len(inputs) - 1} more pass {limit:.0f} decoded "
                                 "bytes: they do not fit the in-memory merge")
    rows = sum(t.num_rows for t in tables)
    rare = {} if all_outliers else _rare_values(tables, schema, rows, outliers, target_rows)
    combined = pa.concat_tables(tables).combine_chunks()
    del tables
    ordered = combined.take(pc.sort_indices(combined, options=_sort_keys(schema.columns)))
    peak = combined.nbytes + ordered.nbytes
    del combined
    lanes = _Lanes(schema, output, target_rows, _MAX_GROUP_ROWS, rare, all_outliers=all_outliers)
    try:
        lanes.write(ordered, copy=False)
    finally:
        files = lanes.close()
    return MergeStats(rows, tuple(files), 0, 1, peak, in_memory=True, rare=rare)


def _merge_streaming(inputs: Sequence[str], schema: SortSchema, output: Callable[[int], str], unified: pa.Schema,
                     target_rows: int, batch_rows: int, outliers: OutlierSplit | None,
                     all_outliers: bool) -> MergeStats:
    """The k-way merge: at most one pending batch per input (see the module docstring)."""
    columns = list(schema.columns)
    sort_keys = _sort_keys(columns)
    rows = sum(_rows(p) for p in inputs)
    rare = {} if all_outliers else _rare_values(inputs, schema, rows, outliers, target_rows)
    readers = [_Input(p, columns, batch_rows, unified) for p in inputs]
    lanes = _Lanes(schema, output, target_rows, min(_MAX_GROUP_ROWS, batch_rows * len(inputs)), rare,
                   all_outliers=all_outliers)
    pending_parts = [t for t in (r.next() for r in readers) if t is not None]
    written = steps = peak = 0
    try:
        ordered: pa.Table | None = None  # pending rows, sorted; re-sorted only when a batch joins them
        while pending_parts or ordered is not None:
            steps += 1
            if pending_parts:
                pending = pa.concat_tables([ordered, *pending_parts] if ordered is not None else pending_parts)
                ordered = pending.take(pc.sort_indices(pending, options=sort_keys))
                peak = max(peak, pending.nbytes + ordered.nbytes)
                pending_parts = []
            assert ordered is not None
            active = [r for r in readers if not r.done]
            if not active:
                lanes.write(ordered, copy=True)
                written += ordered.num_rows
                break
            frontier = min(active, key=lambda r: r.last or ())
            assert frontier.last is not None
            cut = _upper_bound(ordered, columns, frontier.last)
            lanes.write(ordered.slice(0, cut), copy=True)
            written += cut
            ordered = ordered.slice(cut)
            loaded = frontier.next()
            if loaded is not None:
                # Copy the unwritten rest, so the written part's buffers can be freed before the re-sort.
                ordered = ordered.take(_all_rows(ordered.num_rows))
                pending_parts = [loaded]
    finally:
        files = lanes.close()
    return MergeStats(written, tuple(files), batch_rows, steps, peak, rare=rare)
