"""Reading a Parquet data file's rows that match a filter, decoding only the row groups that can hold them.

A table whose rows a writer laid out sorted by a column, in small row groups (the bookkeeping tables compacted
by :mod:`lakeshard.maintenance`), has per row group a min/max of that column in the file's footer; a
filter on the column then rules out every row group whose range cannot match (``pyarrow``'s statistics
simplification of the expression, ``is_in`` included), and only the others are decoded.

Example::

    rows = read_matching(fragment, schema, ["tenant_id", "window_start"], pc.field("window_start") >= start)
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from lakeshard.lake.protocol.datafiles import partition_scalar
from lakeshard.lake.types import FileInfo

if TYPE_CHECKING:
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

__all__ = ["matching_row_groups", "read_data_file", "read_matching"]


def matching_row_groups(fragment: ds.ParquetFileFragment, where: pc.Expression, schema: pa.Schema
                        ) -> ds.ParquetFileFragment:
    """Return the part of ``fragment`` holding only the row groups whose statistics do not rule ``where`` out
    (all of them when the file has no statistics for the columns ``where`` names)."""
    return fragment.subset(filter=where, schema=schema)


def read_matching(fragment: ds.ParquetFileFragment, schema: pa.Schema, columns: Sequence[str],
                  where: pc.Expression | None) -> pa.Table:
    """Return ``columns`` of the rows of ``fragment`` that match ``where`` (every row when None), typed as
    ``schema``; only the row groups :func:`matching_row_groups` keeps are decoded."""
    if where is None:
        return fragment.to_table(schema=schema, columns=list(columns), use_threads=False)
    kept = matching_row_groups(fragment, where, schema)
    if not kept.num_row_groups:
        return schema.empty_table().select(list(columns))
    return kept.to_table(schema=schema, columns=list(columns), filter=where, use_threads=False)


def read_data_file(fragment: ds.ParquetFileFragment, file: FileInfo, file_schema: pa.Schema, table_schema: pa.Schema,
                   columns: Sequence[str], partition_by: Collection[str], where: pc.Expression | None) -> pa.Table:
    """Return ``columns`` of the rows of one data file of a table that match ``where`` (all when None), typed as
    ``table_schema`` (every field nullable), partition values filled in from ``file``'s add action.

    ``file_schema`` is the table's data columns (what the file holds). On a table without partition columns the
    filter is pushed into the Parquet read (:func:`read_matching`); on one with them it applies to the assembled
    rows, since it may name a partition column the file does not hold.
    """
    pushed = where if not partition_by else None
    names = list(columns) if where is None or pushed is not None else table_schema.names
    wanted = pa.schema([table_schema.field(c).with_nullable(True) for c in names])
    rows = read_matching(fragment, file_schema, [c for c in names if c not in partition_by], pushed)
    out = pa.table([rows.column(c) if c not in partition_by else
                    pa.array([partition_scalar(file.partition_values.get(c), wanted.field(c).type)] * rows.num_rows,
                             wanted.field(c).type) for c in names], schema=wanted)
    return out if where is None or pushed is not None else out.filter(where).select(list(columns))
