"""Streaming k-way merge of sorted Parquet files with memory bounded by (batch size x inputs) — Husky's merge.

Each input is already sorted by the sort schema (ingest and compaction keep that invariant), so merging
never needs all rows at once. The merge keeps, per input, only its latest batch: at every step the
*frontier* is the smallest "last key loaded" among inputs not yet exhausted; every pending row with a key
at or below the frontier can be written, because no input can still produce a smaller key. Then the
frontier input loads its next batch. Pending rows are therefore at most one batch per input.

Heavy columns (long messages) make a batch of N rows big: :func:`batch_rows_for` shrinks N so that
``inputs x batch bytes`` fits the memory budget, from the inputs' Parquet metadata (uncompressed bytes per
row of their heaviest row group).

Outputs rotate at ``target_rows`` but only where the key changes, so outputs are disjoint in sort order.

This is the single-process engine (usable by a notebook or a worker); the :class:`~lakeshard.compaction.
Compactor` uses Spark's range-partitioned sort, whose memory Spark bounds by spilling. Both keep outputs
sorted and disjoint.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakeshard.compaction.sort_schema import SortKey, SortSchema, key_of
from lakeshard.errors import LakeshardError

__all__ = ["MergeError", "MergeStats", "batch_rows_for", "merge_sorted_files"]

# Output row groups hold about one batch per input (bounded by the same budget), at most this many rows.
_MAX_GROUP_ROWS = 131_072


class MergeError(LakeshardError):
    """Inputs cannot be merged: a missing sort column, an unsorted input, a budget too small for one row."""


@dataclass(frozen=True)
class MergeStats:
    """What a merge did and the most Arrow memory its pending rows took (sampled at every step)."""

    rows: int
    outputs: tuple[str, ...]
    batch_rows: int
    steps: int
    peak_pending_bytes: int


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


def batch_rows_for(inputs: Sequence[str], memory_budget_bytes: int, *, max_rows: int = 65_536) -> int:
    """Return rows per batch so that the merge of ``inputs`` stays within ``memory_budget_bytes``.

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
    room = memory_budget_bytes * 0.8 - row_groups
    rows = int(room / (3 * (len(inputs) + 1)) / per_row)
    if rows < 1:
        raise MergeError(f"a memory budget of {memory_budget_bytes} bytes cannot hold one row group of each of "
                         f"{len(inputs)} inputs ({row_groups:.0f} bytes) plus one row each ({per_row:.0f} bytes "
                         "per row): merge fewer inputs at a time or write smaller row groups")
    return min(rows, max_rows)


def _sort_keys(columns: Sequence[str]) -> list[tuple[str, str, str]]:
    """Return Arrow sort keys matching Spark's ascending order: nulls first in every column."""
    return [(c, "ascending", "at_start") for c in columns]


def _all_rows(n: int) -> pa.Array:
    """Return the indices 0..n-1 (for copying or checking a table's row order)."""
    return pa.array(np.arange(n, dtype=np.uint64))


def _is_sorted(table: pa.Table, columns: Sequence[str]) -> bool:
    order = pc.sort_indices(table, sort_keys=_sort_keys(columns))
    return bool(pc.all(pc.equal(order, _all_rows(table.num_rows))).as_py())


def _key_at(table: pa.Table, columns: Sequence[str], i: int) -> SortKey:
    return key_of([table.column(c)[i].as_py() for c in columns])


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
            table = self._conform(pa.Table.from_batches([batch]))
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

    def _conform(self, table: pa.Table) -> pa.Table:
        """Return the batch with the first input's column order and types (writers differ in nullability)."""
        missing = [n for n in self._schema.names if n not in table.column_names]
        if missing:
            raise MergeError(f"input {self.path} lacks columns {missing} of the first input")
        try:
            return table.select(self._schema.names).cast(self._schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise MergeError(f"input {self.path} does not fit the first input's schema: {exc}") from None


def merge_sorted_files(inputs: Sequence[str], schema: SortSchema, output: Callable[[int], str], *,
                       target_rows: int, batch_rows: int) -> MergeStats:
    """Merge sorted Parquet ``inputs`` into sorted, disjoint outputs named ``output(0)``, ``output(1)``, ...

    Args:
        inputs: Parquet files, each sorted by ``schema``, with the same columns.
        schema: the sort order.
        output: returns the path of the n-th output file.
        target_rows: rows per output; an output ends at the first key change after this many rows.
        batch_rows: rows read per input at a time (see :func:`batch_rows_for`).
    """
    if not inputs:
        raise MergeError("nothing to merge: no input files")
    columns = list(schema.columns)
    sort_keys = _sort_keys(columns)
    unified = pq.read_schema(inputs[0]).remove_metadata()
    readers = [_Input(p, columns, batch_rows, unified) for p in inputs]
    pending_parts = [t for t in (r.next() for r in readers) if t is not None]
    writer: pq.ParquetWriter | None = None
    outputs: list[str] = []
    written = rows_in_output = steps = peak = 0
    last_written: SortKey | None = None

    group_rows = min(_MAX_GROUP_ROWS, batch_rows * len(inputs))
    buffered: list[pa.Table] = []

    def flush() -> None:
        if buffered and writer is not None:
            writer.write_table(pa.concat_tables(buffered))
        buffered.clear()

    def open_next(schema: pa.Schema) -> None:
        nonlocal writer, rows_in_output
        if writer is not None:
            flush()
            writer.close()
        outputs.append(output(len(outputs)))
        writer = pq.ParquetWriter(outputs[-1], schema)
        rows_in_output = 0

    def write(table: pa.Table) -> None:
        """Append sorted rows, starting a new output once it is full and the key changes."""
        nonlocal rows_in_output, written, last_written
        while table.num_rows:
            if writer is None:
                open_next(table.schema)
            room = target_rows - rows_in_output
            if room <= 0:
                # Full: rows equal to the last written key stay in this output, so outputs stay disjoint.
                assert last_written is not None
                same = _upper_bound(table, columns, last_written)
                if same == 0:
                    open_next(table.schema)
                    continue
                take = same
            else:
                take = min(room, table.num_rows)
            piece = table.slice(0, take)
            # A copy: a slice would keep the whole sorted pending table alive until the group is written.
            buffered.append(piece.take(_all_rows(take)))
            if sum(t.num_rows for t in buffered) >= group_rows:
                flush()
            rows_in_output += take
            written += take
            last_written = _key_at(piece, columns, take - 1)
            table = table.slice(take)

    try:
        ordered: pa.Table | None = None  # pending rows, sorted; re-sorted only when a batch joins them
        while pending_parts or ordered is not None:
            steps += 1
            if pending_parts:
                pending = pa.concat_tables([ordered, *pending_parts] if ordered is not None else pending_parts)
                ordered = pending.take(pc.sort_indices(pending, sort_keys=sort_keys))
                peak = max(peak, pending.nbytes + ordered.nbytes)
                pending_parts = []
            assert ordered is not None
            active = [r for r in readers if not r.done]
            if not active:
                write(ordered)
                break
            frontier = min(active, key=lambda r: r.last or ())
            assert frontier.last is not None
            cut = _upper_bound(ordered, columns, frontier.last)
            write(ordered.slice(0, cut))
            ordered = ordered.slice(cut)
            loaded = frontier.next()
            if loaded is not None:
                # Copy the unwritten rest, so the written part's buffers can be freed before the re-sort.
                ordered = ordered.take(_all_rows(ordered.num_rows))
                pending_parts = [loaded]
    finally:
        if writer is not None:
            flush()
            writer.close()
    return MergeStats(written, tuple(outputs), batch_rows, steps, peak)
