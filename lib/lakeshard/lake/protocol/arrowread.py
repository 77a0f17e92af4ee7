"""Data files of a Delta table read with pyarrow in this process: both adapters' Arrow reads where the process
reaches the table's storage (the embedded adapter always; the native one on a session whose commits take files
this process wrote, the same storage)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.dataset as ds

from lakeshard.lake.base import arrow_columns
from lakeshard.lake.protocol.datafiles import damaged, with_log_rows
from lakeshard.lake.protocol.filesystem import filesystem
from lakeshard.lake.protocol.rowgroups import read_data_file

if TYPE_CHECKING:
    import pyarrow.compute as pc

    from lakeshard.lake.types import FileInfo

__all__ = ["read_file_groups"]

K = TypeVar("K")

# Threads that read data files: pyarrow decodes Parquet without the GIL.
_READ_THREADS = 4


def read_file_groups(uri: str, schema: pa.Schema, partition_by: Sequence[str], groups: Mapping[K, Sequence[FileInfo]],
                     columns: Sequence[str] | None = None, *, where: pc.Expression | None = None
                     ) -> dict[K, pa.Table]:
    """Return, per group of data files of the table at ``uri`` (Arrow ``schema``, partition columns included), their
    rows read in one pass by a pool of threads: only ``columns`` (all by default), a partition column filled in
    from the add actions, every column cast to the table's type (a column a file lacks reads as null, as Spark
    reads it); ``where`` keeps the matching rows, decoding only row groups whose statistics admit it.

    Raises:
        DamagedDataFile: a file is missing, unreadable, or holds another row count than its add action says.
    """
    parts = set(partition_by)
    names, wanted = arrow_columns(uri, schema, columns)
    read_schema = pa.schema([schema.field(c).with_nullable(True) for c in schema.names if c not in parts])
    fs, base = filesystem(uri)
    everything = [f for files in groups.values() for f in files]
    fragments = list(ds.FileSystemDataset.from_paths(
        [f"{base}/{unquote(f.path)}" for f in everything], schema=read_schema, format=ds.ParquetFileFormat(),
        filesystem=fs).get_fragments()) if everything else []

    def read(at: int) -> pa.Table:
        file = everything[at]
        try:
            rows = read_data_file(fragments[at], file, read_schema, schema, names, parts, where)
        except (OSError, pa.ArrowException) as exc:
            raise damaged(uri, file, exc) from None
        return rows if where is not None else with_log_rows(uri, file, rows)

    with ThreadPoolExecutor(max_workers=_READ_THREADS) as pool:
        tables = list(pool.map(read, range(len(fragments))))
    out: dict[K, pa.Table] = {}
    at = 0
    for key, files in groups.items():
        out[key] = pa.concat_tables(tables[at:at + len(files)]) if files else wanted.empty_table()
        at += len(files)
    return out
