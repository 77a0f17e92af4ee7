"""Partitioned Parquet written from Arrow (what a store's ``write=`` function produces: one file per partition
value, the values in its footer), and the Hive-style ``col=value`` directories compaction writes into."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import wait
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakeshard.lake.protocol.filesystem import filesystem
from lakeshard.lake.types import WrittenFile
from lakeshard.process import driver_threads, worker_pool
from lakeshard.sortorder import sort_indices

__all__ = ["PARTITION_VALUES_KEY", "hive_escape", "partition_directory", "partition_footer", "partition_order",
           "write_partitioned"]

PARTITION_VALUES_KEY = b"lakeshard.partition_values"
"""Parquet footer key holding a file's partition values (JSON) when its directory names cannot hold them."""
# File systems cap one name at 255 bytes; a longer ``col=value`` segment is shortened to this many bytes.
_MAX_SEGMENT_BYTES = 200
_DIGEST_CHARS = 16


def hive_escape(value: str) -> str:
    """Return a partition value as Spark/Hive write it in a directory name (odd characters percent-encoded)."""
    return quote(value, safe=" !$&()+,-.;@_`~")


def partition_directory(values: Mapping[str, str]) -> tuple[str, dict[bytes, bytes]]:
    """Return the Hive-style directory (``col=value/...``, relative) for partition values, and the Parquet
    footer metadata its files must carry: empty when every value fits a directory name, else
    :data:`PARTITION_VALUES_KEY` with the exact values.

    A value whose escaped segment is longer than a file system allows (a 128-character tenant of emoji or
    ``/``) gets a directory of its escaped prefix and a digest of the whole value, unique per value; the
    store then takes the value from the footer (:func:`lakeshard.lake.protocol.datafiles.written_partition_values`).
    """
    segments = []
    shortened = False
    for column, value in values.items():
        segment = f"{column}={hive_escape(value)}"
        if len(segment) > _MAX_SEGMENT_BYTES:  # escaped text is ASCII: characters are bytes
            digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_CHARS]
            head = segment[: _MAX_SEGMENT_BYTES - _DIGEST_CHARS - 1]
            head = head[: head.rfind("%")] if "%" in head[-2:] else head  # never cut an escape in two
            segment = f"{head}~{digest}"
            shortened = True
        segments.append(segment)
    return "/".join(segments), partition_footer(values) if shortened else {}


def partition_footer(values: Mapping[str, str]) -> dict[bytes, bytes]:
    """Return the Parquet footer metadata that carries a file's exact partition values."""
    return {PARTITION_VALUES_KEY: json.dumps(dict(values)).encode()}


def write_partitioned(rows: pa.Table, directory: str, schema: pa.Schema, partition_by: Sequence[str],
                      sort_by: Sequence[str] = (), *, presorted: bool = False, plain: Collection[str] = ()
                      ) -> list[WrittenFile]:
    """Return the files written: ``rows`` under ``directory`` as one Parquet file per distinct partition value,
    each sorted by ``sort_by`` (ascending, nulls first: Spark's order; the sort is stable, so rows equal on every
    key keep their order); no rows, no file. Each file comes with its footer as the writer closed it, so a store
    commits it without opening it again, and with the rows it holds (zero-copy slices).

    ``schema`` is the table's Arrow schema: files hold its columns minus ``partition_by``, in its order and
    types. Every file sits directly in ``directory``, its partition values in its footer
    (:data:`PARTITION_VALUES_KEY`), where :meth:`~lakeshard.lake.TableStore.append`'s ``write`` contract lets a
    store find them: no ``col=value`` directories, which cost more to create than the files themselves
    (docs/decisions.md, record 21). Partition columns must be non-null.

    ``presorted``: the caller gathered ``rows`` in :func:`partition_order`'s order already (a writer step does, for
    the whole events it gathers anyway), so they are neither sorted again nor gathered a second time; only their
    grouping by partition is checked (each partition value in one run of rows), and rows that fail it are sorted.

    ``plain``: columns written without dictionary encoding, for values that are nearly all distinct within a file
    (ids, hashes, timestamps): a dictionary there costs a hash of every value and makes the file no smaller.
    Every other column is dictionary-encoded, as by default.
    """
    if not rows.num_rows:
        return []
    ordered = False
    if presorted:
        starts, firsts = _runs(rows, partition_by)
        ordered = len(set(zip(*firsts, strict=True))) == len(starts)
    file_schema = pa.schema([f for f in schema if f.name not in partition_by])
    if not ordered:
        order = partition_order(rows, partition_by, sort_by)
        # Rows handed over in this order already are not gathered a second time: a gather of whole events (long
        # messages, attribute maps) is one of a writer step's dearest parts.
        if not np.array_equal(order.to_numpy(), np.arange(rows.num_rows)):
            rows = rows.select([*partition_by, *file_schema.names]).take(order)
        starts, firsts = _runs(rows, partition_by)
    body = rows.select(file_schema.names).cast(file_schema)
    dictionary: bool | list[str] = [path for f in file_schema if f.name not in plain for path in _leaf_paths(f)] \
        if plain else True
    n = body.num_rows
    fs, base = filesystem(directory)
    fs.create_dir(base, recursive=True)
    tag = uuid.uuid4().hex[:12]

    def write(i: int, start: int, end: int) -> WrittenFile:
        values = {c: _partition_text(firsts[j][i]) for j, c in enumerate(partition_by)}
        piece = body.slice(start, end - start)
        if values:
            piece = piece.replace_schema_metadata({**(piece.schema.metadata or {}), **partition_footer(values)})
        name = f"part-{i:05d}-{tag}.parquet"
        written: list[pq.FileMetaData] = []
        with fs.open_output_stream(f"{base}/{name}", buffer_size=_WRITE_BUFFER) as out:
            pq.write_table(piece, out, metadata_collector=written, use_dictionary=dictionary)
            size = out.tell()
        return WrittenFile(name, size, values, written[0], piece)

    ranges = list(zip(starts.tolist(), [*starts[1:].tolist(), n], strict=True))
    if min(driver_threads(), len(ranges) // _FILES_PER_THREAD) < 2:
        return [write(i, start, end) for i, (start, end) in enumerate(ranges)]
    # Parquet encoding and the file writes release the GIL: many partitions' files are written side by side. Every
    # write is waited for before a failure is raised, so nothing is still writing once this returns or raises.
    writing = [worker_pool().submit(write, i, start, end) for i, (start, end) in enumerate(ranges)]
    wait(writing)
    return [w.result() for w in writing]


def _leaf_paths(field: pa.Field) -> list[str]:
    """Return the Parquet column paths of an Arrow field's leaves, as the writer names them (``a.key_value.key``
    for a map's keys, ``a.list.element`` for a list's items, ``a.b`` for a struct's member)."""
    t = field.type
    if pa.types.is_map(t):
        return [f"{field.name}.key_value.{p}" for f in (t.key_field, t.item_field) for p in _leaf_paths(f)]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [f"{field.name}.list.{p}" for p in _leaf_paths(t.value_field.with_name("element"))]
    if pa.types.is_struct(t):
        return [f"{field.name}.{p}" for i in range(t.num_fields) for p in _leaf_paths(t.field(i))]
    return [field.name]


def _runs(rows: pa.Table, partition_by: Sequence[str]) -> tuple[np.ndarray, list[list[object]]]:
    """Return where each run of rows with one partition value starts, and each run's values (per column)."""
    n = rows.num_rows
    change = np.zeros(n, dtype=bool)
    change[0] = True
    values = []
    for col in partition_by:
        column = rows.column(col)
        if column.null_count:
            raise ValueError(f"partition column {col!r} holds nulls; partition values must be set")
        if n > 1:
            change[1:] |= pc.not_equal(column.slice(1), column.slice(0, n - 1)).to_numpy(zero_copy_only=False)
        values.append(column)
    starts = np.flatnonzero(change)
    return starts, [v.take(pa.array(starts)).to_pylist() for v in values]


def partition_order(rows: pa.Table, partition_by: Sequence[str], sort_by: Sequence[str] = ()) -> pa.Array:
    """Return the row indices of ``rows`` in the order :func:`write_partitioned` writes them: by ``partition_by``
    then ``sort_by``, ascending, nulls first (Spark's order), stable (rows equal on every key keep their order).

    A caller that gathers its rows anyway gathers them in this order, and :func:`write_partitioned` then writes
    them without a gather of its own.
    """
    keys = [*partition_by, *sort_by]
    if not keys:
        return pa.array(np.arange(rows.num_rows, dtype=np.int64))
    # The leading keys of few distinct values (tenants, hours, services, shards) are ranked among their distinct
    # values (the same order: equal values, equal ranks; nulls first) and folded into one integer, so the sort
    # compares one or two integers a row instead of six columns: a third of the time at 200k events.
    folded, code, width = 0, np.zeros(rows.num_rows, dtype=np.int64), 1
    for c in keys:
        ranked = _ranks(rows.column(c), rows.num_rows)
        if ranked is None or width * ranked[1] >= _FOLD_LIMIT:
            break
        code = code * ranked[1] + ranked[0]
        width *= ranked[1]
        folded += 1
    columns = {"__folded": code} if folded else {}
    columns.update({c: rows.column(c) for c in keys[folded:]})
    return sort_indices(pa.table(columns), list(columns))


_FOLD_LIMIT = 1 << 62  # the folded ranks stay a positive int64


def _ranks(column: pa.ChunkedArray, n: int) -> tuple[np.ndarray, int] | None:
    """Return a rank per value that sorts as the values do, 0 for null and 1 for the least value, with the number of
    ranks: a string's rank among the column's distinct values, an integer's distance from the least one. None when
    the column is not strings or integers, or holds too many values to be worth ranking (a sort key of its own
    then): more distinct strings, or a wider integer range, than one in eight rows."""
    kind = column.type
    most = max(n // _RANKED_SHARE, 16)
    if pa.types.is_integer(kind):
        # Integers rank by their distance from the least value: no dictionary, and a wide range (hashes) is
        # refused from its bounds alone.
        bounds = pc.min_max(column)
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if low is None:  # all null
            return np.zeros(n, dtype=np.int64), 1
        if high - low + 1 > most or high > np.iinfo(np.int64).max:
            return None
        ranks = pc.add(pc.subtract(column.cast(pa.int64()), low), 1).fill_null(0)
        return np.asarray(ranks.to_numpy(), dtype=np.int64), high - low + 2
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return None
    encoded = pc.dictionary_encode(column.combine_chunks())
    distinct = len(encoded.dictionary)
    if distinct > most:
        return None
    order = pc.sort_indices(encoded.dictionary).to_numpy()
    rank = np.empty(distinct + 1, dtype=np.int64)
    rank[order] = np.arange(1, distinct + 1, dtype=np.int64)
    rank[distinct] = 0  # nulls first
    indices = encoded.indices.fill_null(distinct).to_numpy(zero_copy_only=False)
    return rank[indices], distinct + 1


_RANKED_SHARE = 8  # a column is ranked when it holds at most one distinct value in this many rows


# write_partitioned writes files side by side on a thread per core once each thread gets this many files.
_FILES_PER_THREAD = 4
# A Parquet writer hands its stream every page header and page on its own and asks for its position after each:
# unbuffered, a 40 kB file cost about 60 write and lseek system calls. Buffered, a file that fits goes out in one.
_WRITE_BUFFER = 1 << 20


def _partition_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
