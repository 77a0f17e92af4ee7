"""Data files of a Delta table as Parquet: conform rows to the table, read footer statistics, read exact files.

Shared by the adapters: whichever commits a file, its rows are Parquet under the table's directory in
Hive-style partition directories, and its add action's statistics come from the Parquet footer.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lakeshard.errors import DamagedDataFile, TableStoreError
from lakeshard.lake.protocol.filesystem import filesystem, normalise_uri
from lakeshard.lake.protocol.partitions import PARTITION_VALUES_KEY
from lakeshard.lake.types import FileInfo
from lakeshard.utc import aware

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

__all__ = [
    "HIVE_NULL",
    "NO_STATS",
    "check_data_file",
    "conform",
    "damaged",
    "damaged_in_spark",
    "data_file_key",
    "file_key",
    "footer_stats",
    "footer_stats_and_values",
    "is_hidden",
    "metadata_stats",
    "naming_damaged_files",
    "partition_scalar",
    "partition_values_from_path",
    "read_data_files",
    "spark_file_uri",
    "stats_columns",
    "with_log_rows",
    "written_parquet",
    "written_partition_values",
]

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
# Delta truncates string statistics; longer values get no min/max (readers then treat them as unknown).
_MAX_STAT_STRING = 32
# What Delta writers append to a truncated string max: U+10FFFF (or U+007F when the next character is below it);
# U+FFFD in older delta-spark releases.
_TIE_BREAKERS = "\x7f\ufffd\U0010ffff"


# Characters java.net.URI quotes in a path; Spark's ``_metadata.file_path`` is a Hadoop Path's URI string.
_URI_QUOTED = frozenset(' "#%<>?[\\]^`{|}')


def _uri_quotes(c: str) -> bool:
    """Return whether java.net.URI quotes ``c`` in a path: the ASCII set above, ISO controls (C0, DEL, C1) and
    Unicode space characters (``Character.isSpaceChar``: categories Zs, Zl, Zp)."""
    o = ord(c)
    return (c in _URI_QUOTED or o < 0x20 or 0x7F <= o <= 0x9F
            or (o > 0x7F and unicodedata.category(c) in ("Zs", "Zl", "Zp")))


# A scheme of two or more characters and a path with no authority (``dbfs:/x``); one letter is a Windows drive.
_SCHEME_AND_PATH = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):(?=/)")


def spark_file_uri(uri: str) -> str:
    """Return the string Spark's ``_metadata.file_path`` shows for the file at ``uri`` (an on-disk path)."""
    if "://" in uri:
        scheme, rest = uri.split("://", 1)
        authority, _, path = rest.partition("/")
        prefix, path = ("file:" if scheme == "file" and not authority else f"{scheme}://{authority}"), "/" + path
    elif single := _SCHEME_AND_PATH.match(uri):  # dbfs:/x, as a Databricks runtime spells a volume's files
        prefix, path = f"{single.group(1)}:", uri[single.end():]
    else:
        prefix, path = "file:", uri
    quoted = "".join("".join(f"%{b:02X}" for b in c.encode("utf-8")) if _uri_quotes(c) else c for c in path)
    return prefix + quoted


# The schemes a runtime may qualify a local-looking path with (file:/x, file:///x, dbfs:/Volumes/x): a file's
# identity in a read is its path without them.
_LOCAL_SCHEME = r"^(file|dbfs):(//)?(?=/)"


def file_key(uri: str) -> str:
    """Return a file's URI (as Spark's ``_metadata.file_path`` shows it) without a local scheme: ``file:/x``,
    ``file:///x``, ``dbfs:/x`` and ``/x`` are all ``/x``; other URIs (``s3://bucket/x``) are kept whole."""
    return re.sub(_LOCAL_SCHEME, "", uri)


def is_hidden(relative: str) -> bool:
    """Return whether a path relative to the table root is Spark's or Delta's bookkeeping, not data."""
    return any(part.startswith(("_", ".")) for part in relative.split("/"))


def written_parquet(target: str) -> tuple[pafs.FileSystem, list[tuple[pafs.FileInfo, str]]]:
    """Return the filesystem of a write directory and each Parquet data file under it, with its path relative
    to the directory (hidden and bookkeeping files left out); none when the directory is absent."""
    from lakeshard.lake.protocol.filesystem import filesystem

    fs, base = filesystem(target)
    selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
    written = [(info, info.path[len(base):].lstrip("/")) for info in fs.get_file_info(selector)
               if info.type == pafs.FileType.File]
    return fs, [(info, rel) for info, rel in written if not is_hidden(rel) and rel.endswith(".parquet")]


def _stat_value(value: Any) -> Any:
    """Render one footer statistic as Delta's JSON stats expect, or None to leave it out."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Decimal):
        return None
    if isinstance(value, datetime):
        return value  # handled by the caller, which knows whether it is a min or a max
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str):
        return value if len(value) <= _MAX_STAT_STRING else None
    return None


def _ts_stat(value: datetime, *, upper: bool) -> str:
    value = aware(value)
    value = value.astimezone(UTC)
    # Delta keeps timestamp statistics at millisecond precision: round the max up so it stays an upper bound.
    millis = value.replace(microsecond=(value.microsecond // 1000) * 1000)
    if upper and millis != value:
        millis += timedelta(milliseconds=1)
    return millis.strftime("%Y-%m-%dT%H:%M:%S.") + f"{millis.microsecond // 1000:03d}Z"


# Delta's table properties that choose the columns a data file's stats cover (PROTOCOL.md, "Per-file Statistics").
STATS_COLUMNS = "delta.dataSkippingStatsColumns"
NUM_INDEXED_COLS = "delta.dataSkippingNumIndexedCols"
_DEFAULT_INDEXED_COLS = 32
# For tables that no reader prunes by file statistics (``routed``: read by the commits that added the files;
# ``event_ids``: paged in by partition): their add actions, which delta-rs parses for every live file on each
# snapshot update and commit, hold only the row count.
NO_STATS = {NUM_INDEXED_COLS: "0"}


def stats_columns(configuration: Mapping[str, str | None], columns: Sequence[str]) -> set[str] | None:
    """Return the columns whose min/max/null counts a new file's stats hold, or None for every column.

    As Delta writers do: the columns named by ``delta.dataSkippingStatsColumns``, else the first
    ``delta.dataSkippingNumIndexedCols`` columns of the schema (default 32, -1 = all). A table that no reader
    prunes by statistics (lakeshard's ``routed`` and ``event_ids``) sets 0: its add actions carry only the row
    count, so its log, snapshots and commits are smaller (delta-rs parses every live file's stats).
    """
    named = configuration.get(STATS_COLUMNS)
    if named:
        return {c.strip().strip("`") for c in named.split(",") if c.strip()}
    raw = configuration.get(NUM_INDEXED_COLS)
    try:
        n = _DEFAULT_INDEXED_COLS if raw is None else int(raw)
    except ValueError:
        raise TableStoreError(f"the table property {NUM_INDEXED_COLS} = {raw!r} is not a whole number") from None
    return None if n < 0 or n >= len(columns) else set(columns[:n])


def footer_stats(fs: pafs.FileSystem, path: str,
                 columns: Collection[str] | None = None) -> tuple[int, dict[str, Any]]:
    """Return the row count of a Parquet file and its Delta stats (numRecords, min/max, nullCount), the
    min/max/null counts of ``columns`` only (None: every top-level column; see :func:`stats_columns`)."""
    rows, stats, _ = footer_stats_and_values(fs, path, columns)
    return rows, stats


def footer_stats_and_values(fs: pafs.FileSystem, path: str, columns: Collection[str] | None = None
                            ) -> tuple[int, dict[str, Any], dict[str, str | None] | None]:
    """Return :func:`footer_stats` and the partition values the footer carries (None when it carries none:
    its directory names hold them; see :func:`lakeshard.lake.protocol.filesystem.partition_directory`)."""
    with fs.open_input_file(path) as handle:
        meta = pq.ParquetFile(handle).metadata
    return *_stats(meta, columns), _footer_values(meta, path)


def metadata_stats(meta: pq.FileMetaData, columns: Collection[str] | None = None) -> tuple[int, dict[str, Any]]:
    """Return the row count and Delta stats of a Parquet footer already in hand (a writer's metadata of the file
    it just closed): the same as :func:`footer_stats` reads back from the file."""
    return _stats(meta, columns)


def _footer_values(meta: pq.FileMetaData, path: str) -> dict[str, str | None] | None:
    raw = (meta.metadata or {}).get(PARTITION_VALUES_KEY)
    if raw is None:
        return None
    try:
        values = json.loads(raw)
    except ValueError:
        values = None
    if not isinstance(values, dict) or not all(isinstance(v, str | None) for v in values.values()):
        raise TableStoreError(f"written file {path}: footer key {PARTITION_VALUES_KEY.decode()} is not a JSON "
                              f"object of strings: {raw[:200]!r}")
    return values


def _footer_ranges(meta: pq.FileMetaData, columns: Collection[str] | None
                   ) -> dict[str, tuple[Any, Any, int | None]]:
    """Return each top-level column's (min, max, null count) over the footer's row groups, as Arrow gives them
    (None where some row group lacks them); ``columns`` None: every top-level column."""
    schema = meta.schema
    paths = [schema.column(i).path for i in range(meta.num_columns)]
    wanted = None if columns is None else set(columns)
    row_groups = [meta.row_group(rg) for rg in range(meta.num_row_groups)]
    ranges: dict[str, tuple[Any, Any, int | None]] = {}
    for col, name in enumerate(paths):
        if "." in name or (wanted is not None and name not in wanted):
            continue
        lo: Any = None
        hi: Any = None
        null_count: int | None = 0
        for group in row_groups:
            stats = group.column(col).statistics
            if stats is None:
                null_count, lo, hi = None, None, None
                break
            if null_count is not None:
                null_count = null_count + stats.null_count if stats.has_null_count else None
            if stats.has_min_max:
                lo = stats.min if lo is None else min(lo, stats.min)
                hi = stats.max if hi is None else max(hi, stats.max)
        ranges[name] = (lo, hi, null_count)
    return ranges


def _stats(meta: pq.FileMetaData, columns: Collection[str] | None) -> tuple[int, dict[str, Any]]:
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name, (lo, hi, null_count) in _footer_ranges(meta, columns).items():
        if null_count is not None:
            nulls[name] = null_count
        if lo is not None and hi is not None:
            lo_v, hi_v = _stat_value(lo), _stat_value(hi)
            if isinstance(lo_v, datetime) and isinstance(hi_v, datetime):
                mins[name], maxs[name] = _ts_stat(lo_v, upper=False), _ts_stat(hi_v, upper=True)
            elif lo_v is not None and hi_v is not None:
                mins[name], maxs[name] = lo_v, hi_v
    stats_json = {"numRecords": meta.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}
    return meta.num_rows, stats_json


def written_partition_values(relative: str, partition_by: Sequence[str],
                             footer: Mapping[str, str | None] | None) -> dict[str, str | None]:
    """Return a written file's partition values: from its footer when it carries them (values too long for a
    directory name), else from its ``col=value`` directories."""
    if footer is None:
        return partition_values_from_path(relative, partition_by)
    missing = [c for c in partition_by if c not in footer]
    if missing:
        raise TableStoreError(f"written file {relative}: its footer's partition values lack {missing}")
    return {c: footer[c] for c in partition_by}


def partition_scalar(text: str | None, arrow_type: pa.DataType) -> Any:
    """Return a partition value (as the log writes it) as a Python value of the column's type."""
    if text is None:
        return None
    if pa.types.is_integer(arrow_type):
        return int(text)
    if pa.types.is_boolean(arrow_type):
        return text.lower() == "true"
    if pa.types.is_date(arrow_type):
        return date.fromisoformat(text)
    return text


def partition_values_from_path(relative: str, partition_by: Sequence[str]) -> dict[str, str | None]:
    """Return the partition values of a file from its ``col=value`` directories (Hive escaping undone)."""
    found: dict[str, str | None] = {}
    for part in relative.split("/")[:-1]:
        if "=" in part:
            key, raw = part.split("=", 1)
            key = unquote(key)
            if key in partition_by:
                value = unquote(raw)
                found[key] = None if value == HIVE_NULL else value
    missing = [c for c in partition_by if c not in found]
    if missing:
        raise TableStoreError(f"written file {relative} lacks partition directories for {missing}")
    return found


def conform(df: DataFrame, schema: StructType, uri: str) -> DataFrame:
    """Return ``df`` with the table's columns in order, cast to the table's types."""
    from pyspark.sql import functions as F

    have = {f.name: f.dataType for f in df.schema.fields}
    extra = [c for c in have if c not in {f.name for f in schema.fields}]
    missing = [f.name for f in schema.fields if f.name not in have and not f.nullable]
    if extra or missing:
        raise TableStoreError(
            f"{uri}: the DataFrame does not fit the table schema: unexpected columns {extra}, "
            f"missing non-nullable columns {missing}; table columns are {[f.name for f in schema.fields]}"
        )
    cols = []
    for f in schema.fields:
        if f.name not in have:
            cols.append(F.lit(None).cast(f.dataType).alias(f.name))
        elif _same_type(have[f.name], f.dataType):
            cols.append(F.col(f"`{f.name}`"))
        else:
            cols.append(F.col(f"`{f.name}`").cast(f.dataType).alias(f.name))
    return df.select(*cols)


def _same_type(a: DataType, b: DataType) -> bool:
    return bool(a.simpleString() == b.simpleString())


def read_data_files(spark: SparkSession, root: str, schema: StructType, partition_by: Sequence[str],
                    files: Sequence[FileInfo], *, file_column: str | None = None) -> DataFrame:
    """Return the rows of exactly ``files`` (paths relative to ``root`` as in the log), partition values included.

    Data columns are read with the table's schema (a column a file lacks reads as null); partition columns
    are restored from each file's add action with the table's types. No files: an empty frame. ``file_column``:
    also a column of that name holding each row's :func:`data_file_key` (which file it came from).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField
    from pyspark.sql.types import StructType as SparkStruct

    parts = list(partition_by)
    if not files:
        if file_column:
            schema = SparkStruct([*schema.fields, StructField(file_column, StringType(), False)])
        return spark.createDataFrame([], schema)
    data_schema = SparkStruct([f for f in schema.fields if f.name not in parts])
    paths = [_location(root, f.path) for f in files]
    df = spark.read.schema(data_schema).parquet(*paths)
    # Keyed without a local scheme: a Databricks runtime qualifies /Volumes/... as dbfs:/Volumes/..., a local
    # session /x as file:/x.
    key = F.regexp_replace(F.col("_metadata.file_path"), _LOCAL_SCHEME, "")
    tagged = [key.alias(file_column)] if file_column else []
    if not parts:
        return df.select(*[F.col(f"`{f.name}`") for f in schema.fields], *tagged)
    # Spark reports each row's file as a URI string (``_metadata.file_path``); compute the same string
    # for every file and join its partition values in. Spark's file names repeat across the partition
    # directories of one write, so the whole path is the key, not the name.
    mapping_schema = SparkStruct(
        [StructField("__file", StringType(), False), StructField("__known", StringType(), False)]
        + [StructField(f"__p_{i}", StringType(), True) for i in range(len(parts))]
    )
    rows = [(data_file_key(root, f), "y", *[f.partition_values.get(p) for p in parts]) for f in files]
    mapping = spark.createDataFrame(rows, mapping_schema)
    types = {f.name: f.dataType for f in schema.fields}
    joined = df.withColumn("__file", key).join(F.broadcast(mapping), "__file", "left")
    # A row whose file found no add action would get wrong partition values: fail the query instead.
    guard = F.assert_true(F.col("__known").isNotNull(), F.concat(
        F.lit(f"{root}: cannot match data file "), F.col("__file"), F.lit(" to its add action")))
    out = []
    for f in schema.fields:
        if f.name in parts:
            value = F.col(f"__p_{parts.index(f.name)}")
            if f.name == parts[0]:
                value = F.when(guard.isNull(), value)
            out.append(value.cast(types[f.name]).alias(f.name))
        else:
            out.append(F.col(f"`{f.name}`"))
    return joined.select(*out, *([F.col("__file").alias(file_column)] if file_column else []))


def data_file_key(root: str, file: FileInfo) -> str:
    """Return the key Spark's reads give the rows of ``file`` of the table at ``root`` (see :func:`read_data_files`)."""
    return file_key(spark_file_uri(_location(root, file.path)))


def _location(root: str, path: str) -> str:
    """Return where a file of the log lives: its path is relative to the table root, or an absolute URI."""
    if path.startswith("file:"):
        return normalise_uri(path)
    decoded = unquote(path)
    return decoded if "://" in path else f"{root}/{decoded}"


def damaged(table: str, file: FileInfo, exc: BaseException) -> DamagedDataFile:
    """Return the error naming ``file`` of ``table`` for what reading it raised (missing, not Parquet, another
    schema), for a caller to raise in place of ``exc``."""
    if isinstance(exc, FileNotFoundError):
        return DamagedDataFile(table, file.path, file.partition_values, "it is missing (the log lists it as live)")
    return DamagedDataFile(table, file.path, file.partition_values,
                           f"it cannot be read as Parquet holding the table's columns ({type(exc).__name__}: {exc})")


def check_data_file(table: str, file: FileInfo) -> DamagedDataFile | None:
    """Return what is wrong with live data file ``file`` of ``table`` as its Parquet footer shows (missing, not
    Parquet, a row count other than the log's ``numRecords``, a value of a column below the log's ``minValues`` or
    above its ``maxValues``), or None when the footer agrees with the log. Statistics merely looser than the values
    (wider, or strings truncated as Delta truncates them) agree: pruning by them skips no row of the file.

    Only the columns the log's statistics carry are compared: a table whose add actions hold only the row count
    (``routed``, ``event_ids``: :data:`NO_STATS`) is checked by rows alone.

    Reads the footer only: cheap enough to look for the file at fault among a failed read's inputs."""
    fs, base = filesystem(table)
    try:
        with fs.open_input_file(_location(base, file.path)) as handle:
            meta = pq.ParquetFile(handle).metadata
    except (OSError, pa.ArrowException) as exc:
        return damaged(table, file, exc)
    rows = meta.num_rows
    if file.num_records is not None and rows != file.num_records:
        return DamagedDataFile(table, file.path, file.partition_values,
                               f"its footer holds {rows:,} rows where the log's numRecords says {file.num_records:,}")
    logged = set(file.min_values) | set(file.max_values)
    for name, (lo, hi, _) in sorted(_footer_ranges(meta, logged).items()):
        for bound, log_value, footer_value in (("min", file.min_values.get(name), lo),
                                               ("max", file.max_values.get(name), hi)):
            if log_value is not None and footer_value is not None and not _stat_bounds(
                    log_value, footer_value, upper=bound == "max"):
                beyond = "above" if bound == "max" else "below"
                return DamagedDataFile(table, file.path, file.partition_values,
                                       f"its footer's {bound} of {name} is {_shown(footer_value)} where the log's "
                                       f"{bound}Values says {_shown(log_value)}: the file holds a value {beyond} "
                                       "its statistics, which readers pruning by them would skip")
    return None


def _shown(value: Any) -> str:
    """Return a statistic as a message quotes it: timestamps in ISO form, strings quoted and cut to 80 chars."""
    if isinstance(value, datetime):
        return aware(value).astimezone(UTC).isoformat()
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _stat_bounds(log_value: Any, footer_value: Any, *, upper: bool) -> bool:
    """Return whether a log's min (or max, ``upper``) statistic of a column bounds the footer's: at most the file's
    smallest value (at least its largest). Looser statistics are valid Delta: a reader pruning by them still finds
    every row. Compared as Delta writers render them: timestamps at millisecond precision (a max rounded up by
    delta-rs, truncated by delta-spark), strings in code point order (UTF-8's byte order) with a truncated max's
    tie-breaker (U+007F, U+FFFD or U+10FFFF after a prefix of the value) standing for any continuation. A value of
    a kind not compared here bounds."""
    if isinstance(footer_value, datetime):
        logged = _as_instant(log_value)
        if logged is None:
            return True
        exact = aware(footer_value).astimezone(UTC)
        truncated = exact.replace(microsecond=exact.microsecond // 1000 * 1000)
        return logged >= truncated if upper else logged <= exact
    if isinstance(footer_value, str):
        if not isinstance(log_value, str):
            return True
        if not upper:
            return log_value <= footer_value  # a truncated min is a prefix, never above the value
        if log_value >= footer_value:
            return True
        prefix = log_value.rstrip(_TIE_BREAKERS)
        # A truncated max: the tie-breaker stands for whatever followed the prefix (older Delta appends U+FFFD even
        # before characters above it), so only the footer's own prefix of that length must not pass it.
        return prefix != log_value and footer_value[:len(prefix)] <= prefix
    if isinstance(footer_value, bool):
        return True
    if isinstance(footer_value, int | float) and isinstance(log_value, int | float) and not isinstance(log_value,
                                                                                                      bool):
        if isinstance(footer_value, float) and not (math.isfinite(footer_value) and math.isfinite(log_value)):
            return True
        slack = abs(footer_value) * 1e-6 + 1e-12 if isinstance(footer_value, float) else 0
        return bool(log_value + slack >= footer_value if upper else log_value - slack <= footer_value)
    if isinstance(footer_value, date):
        try:
            logged_day = date.fromisoformat(str(log_value))
        except ValueError:
            return True
        return logged_day >= footer_value if upper else logged_day <= footer_value
    return True


def _as_instant(value: Any) -> datetime | None:
    """Return a timestamp statistic of the log (a datetime, or Delta's ISO string) as an aware UTC datetime."""
    if isinstance(value, datetime):
        return aware(value).astimezone(UTC)
    if isinstance(value, str):
        try:
            return aware(datetime.fromisoformat(value.replace("Z", "+00:00"))).astimezone(UTC)
        except ValueError:
            return None
    return None


def with_log_rows(table: str, file: FileInfo, rows: pa.Table) -> pa.Table:
    """Return ``rows`` (every row of ``file``) when their number is the log's ``numRecords`` for it.

    Raises:
        DamagedDataFile: the file holds another number of rows than its add action says (overwritten, or
            another file's bytes).
    """
    if file.num_records is not None and rows.num_rows != file.num_records:
        raise DamagedDataFile(table, file.path, file.partition_values,
                              f"it holds {rows.num_rows:,} rows where the log's numRecords says {file.num_records:,}")
    return rows


@contextmanager
def naming_damaged_files(table: str, files: Sequence[FileInfo]) -> Iterator[None]:
    """Run the block (Spark actions over ``files`` of ``table``); a failure naming one of the files is raised as
    :class:`~lakeshard.errors.DamagedDataFile` (one line), any other failure as it was."""
    try:
        yield
    except Exception as exc:
        found = damaged_in_spark(table, files, exc)
        if found is None:
            raise
        raise found from None


def damaged_in_spark(table: str, files: Sequence[FileInfo], exc: BaseException) -> DamagedDataFile | None:
    """Return the error naming the file of ``files`` that a failed Spark read of ``table`` names, or None when
    the failure names none of them (it is then not the files' fault).

    Spark reports an unreadable file inside a chain of JVM exceptions (``FAILED_READ_FILE``, "is not a Parquet
    file", ``FileNotFoundException``); only its first line of each cause is kept.
    """
    text = str(exc)
    for f in files:
        for spelled in {f.path, unquote(f.path), spark_file_uri(_location(table, f.path))}:
            if spelled and spelled in text:
                missing = "FileNotFound" in text or "does not exist" in text
                # The innermost cause says what broke (e.g. "... is not a Parquet file"); frames are dropped.
                causes = [line.strip().removeprefix("Caused by:").strip() for line in text.splitlines()
                          if line.strip().startswith("Caused by:")]
                cause = causes[-1] if causes else text.strip().splitlines()[0].lstrip(": ")
                problem = ("it is missing (the log lists it as live)" if missing
                           else f"Spark cannot read it ({cause[:300]})")
                return DamagedDataFile(table, f.path, f.partition_values, problem)
    return None
