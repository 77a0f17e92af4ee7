"""The native adapter's Arrow reads through Spark: for a session whose process does not reach the table's storage
(Spark Connect, or Delta's internal API absent), where pyarrow in this process cannot read the files."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

from lakeshard.lake.base import arrow_columns

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql import DataFrame

    from lakeshard.lake.types import FileInfo

__all__ = ["read_groups_through_spark"]

K = TypeVar("K")


def read_groups_through_spark(uri: str, schema: pa.Schema, read_files: Callable[[Sequence[FileInfo]], DataFrame],
                              groups: Mapping[K, Sequence[FileInfo]], columns: Sequence[str] | None,
                              where: pc.Expression | None) -> dict[K, pa.Table]:
    """Return, per group of data files, their rows (``columns`` of those matching ``where``) typed as ``schema``:
    each group a Spark read (``read_files``) brought back as Arrow, ``where`` applied in this process."""
    names, wanted = arrow_columns(uri, schema, columns)
    _, whole = arrow_columns(uri, schema, None)
    out: dict[K, pa.Table] = {}
    for key, files in groups.items():
        if not files:
            out[key] = wanted.empty_table()
        elif where is None:
            out[key] = read_files(files).select(*names).toArrow().cast(wanted)
        else:
            out[key] = read_files(files).select(*whole.names).toArrow().cast(whole).filter(where).select(names)
    return out
