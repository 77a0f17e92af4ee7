"""Where a table's files live: the pyarrow filesystem behind a local path or a URI, and Hive-style
partition directories written from Arrow (what a store's ``write=`` function produces)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from urllib.parse import quote, unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

__all__ = ["filesystem", "hive_escape", "normalise_uri", "write_partitioned"]


def normalise_uri(table: str) -> str:
    """Return a local table location as a plain absolute path, and a remote one as its URI."""
    if table.startswith("file:"):
        # file:/x, file:///x and delta-rs' percent-encoded file:///odd%20names all mean a local path.
        return os.path.abspath(unquote(urlparse(table).path))
    if "://" in table:
        return table.rstrip("/")
    return os.path.abspath(table)


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """Return the filesystem holding ``uri`` and the path on it (a plain path is local)."""
    if "://" in uri:
        fs, path = pafs.FileSystem.from_uri(uri)
        return fs, path
    return pafs.LocalFileSystem(), uri


def hive_escape(value: str) -> str:
    """Return a partition value as Spark/Hive write it in a directory name (odd characters percent-encoded)."""
    return quote(value, safe=" !$&()+,-.;@_`~")


def write_partitioned(rows: pa.Table, directory: str, schema: pa.Schema, partition_by: Sequence[str],
                      sort_by: Sequence[str] = ()) -> None:
    """Write ``rows`` under ``directory`` as one Parquet file per distinct partition value, each sorted by
    ``sort_by`` (ascending, nulls first: Spark's order; the sort is stable, so rows equal on every key keep
    their order); no rows, no file.

    ``schema`` is the table's Arrow schema: files hold its columns minus ``partition_by``, in its order and
    types, inside ``col=value`` directories (values escaped as Spark escapes them), which is what
    :meth:`~lakeshard.lake.TableStore.append`'s ``write`` contract asks for. Partition columns must be
    non-null.
    """
    if not rows.num_rows:
        return
    keys = [*partition_by, *sort_by]
    order = (pc.sort_indices(rows.select(keys), sort_keys=[(c, "ascending", "at_start") for c in keys]) if keys
             else pa.array(np.arange(rows.num_rows)))
    file_schema = pa.schema([f for f in schema if f.name not in partition_by])
    body = rows.select(file_schema.names).cast(file_schema).take(order)
    n = body.num_rows
    change = np.zeros(n, dtype=bool)
    change[0] = True
    values = []
    for col in partition_by:
        column = rows.column(col).take(order)
        if column.null_count:
            raise ValueError(f"partition column {col!r} holds nulls; partition values must be set")
        if n > 1:
            change[1:] |= pc.not_equal(column.slice(1), column.slice(0, n - 1)).to_numpy(zero_copy_only=False)
        values.append(column)
    starts = np.flatnonzero(change)
    firsts = [v.take(pa.array(starts)).to_pylist() for v in values]
    fs, base = filesystem(directory)
    tag = uuid.uuid4().hex[:12]

    for i, (start, end) in enumerate(zip(starts.tolist(), [*starts[1:].tolist(), n], strict=True)):
        parts = "/".join(f"{c}={hive_escape(_partition_text(firsts[j][i]))}" for j, c in enumerate(partition_by))
        where = f"{base}/{parts}" if parts else base
        fs.create_dir(where, recursive=True)
        pq.write_table(body.slice(start, end - start), f"{where}/part-{i:05d}-{tag}.parquet", filesystem=fs)

def _partition_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
