"""Read a landing zone with Spark: list its files, read their bytes, parse each line once.

:func:`lakeshard.landing.listing.list_landing_files` finds the input. :func:`read_landing` reads exactly those files
— or the byte range of each that a batch plan names, checked against the plan's checksum — with Spark's
``binaryFile`` source (the bytes as written, so sizes and line numbers are exact), and one ``mapInArrow`` pass per
partition runs the parse of :mod:`lakeshard.landing.batches` over them (the one the in-driver path runs). The result
is cached once and split into ``events`` and ``quarantine``: every non-blank line lands in exactly one of them.

Memory: ``binaryFile`` holds each file whole; a gzip file is decompressed with a bounded output, so it
costs at most ``max_file_bytes`` however far it would expand (a gzip bomb stops at the bound). Landing
files of tens of megabytes are what this reader is for (Spark's ``binaryFile`` refuses files over 2 GB).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakeshard.config import LandingConfig
from lakeshard.landing.batches import EPOCH, PARSED, ParseFiles, path_key, unreadable
from lakeshard.landing.listing import LandingFile, list_landing_files
from lakeshard.landing.parse import RecordParser
from lakeshard.tables import EVENT_SCHEMA, QUARANTINE_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["LandingBatch", "read_landing"]

_GLOB_CHARS = frozenset("\\{}[]*?")


@dataclass(frozen=True, eq=False)  # DataFrames have no meaningful equality
class LandingBatch:
    """What one :func:`read_landing` call read: valid events, quarantined records and the files.

    ``events`` and ``quarantine`` are two selections of one parse that Spark caches on first use
    (``parsed``, persisted memory-and-disk): counting both parses each file once. The caller owns that
    cache and releases it with :meth:`release`, or by using the batch as a context manager::

        with read_landing(spark, "/data/landing", limits=cfg.landing_format) as batch:
            batch.events.write...
            batch.quarantine.write...
    """

    events: DataFrame
    quarantine: DataFrame
    files: list[LandingFile]
    now_ms: int  # the clock the absurd-timestamp check used, and quarantined_at
    parsed: DataFrame | None = field(default=None, repr=False)  # the cached combined parse (None: no files)

    def release(self, blocking: bool = False) -> None:
        """Return nothing; drop the cached parse (the frames stay usable, but would parse again)."""
        if self.parsed is not None:
            self.parsed.unpersist(blocking)

    def __enter__(self) -> LandingBatch:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def _spark_path(uri: str) -> str:
    """Return ``uri`` with Hadoop glob characters escaped, so Spark reads the file and not a pattern."""
    if not any(c in _GLOB_CHARS for c in uri):
        return uri
    return "".join("\\" + c if c in _GLOB_CHARS else c for c in uri)


# --------------------------------------------------------------------------------------------- reading


def read_landing(
    spark: SparkSession,
    landing_or_files: str | os.PathLike[str] | Sequence[LandingFile],
    *,
    limits: LandingConfig,
    now_ms: int | None = None,
) -> LandingBatch:
    """Return the valid events and the quarantined records of a landing zone (or of given files).

    Every non-blank line of every file ends in exactly one of ``events`` (:data:`EVENT_SCHEMA`) and
    ``quarantine`` (:data:`QUARANTINE_SCHEMA`); duplicates are kept (dropping them is the writers'
    job). A file Spark does not find (gone since it was listed or planned, or while the read runs) is one
    ``unreadable_file`` quarantine row naming it and its range, as on the driver path. Rows come in no particular
    order. The parse runs here, once, and is cached (a file that gave no row is then looked for) — release it with
    :meth:`LandingBatch.release` (or a ``with`` block).

    Args:
        spark: the session to read with.
        landing_or_files: a landing root (path or URI, listed with :func:`list_landing_files`) or the
            exact files to read (e.g. the new ones since the last run).
        limits: the record format's limits (``LakeshardConfig.landing_format``).
        now_ms: the clock for the absurd-timestamp check and ``quarantined_at``, in epoch
            milliseconds; default: now. Pass it to make a read reproducible.

    Raises:
        LandingReadError: the landing root does not exist.
        ConfigError: ``limits.earliest_ts`` is not an RFC 3339 timestamp.

    Example::

        batch = read_landing(spark, "/data/landing", limits=load_config().landing_format)
        batch.events.groupBy("tenant_id").count().show()
        batch.release()
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    if isinstance(landing_or_files, (str, os.PathLike)):
        files = list_landing_files(landing_or_files)
    else:
        files = list(landing_or_files)
    clock = int(time.time() * 1000) if now_ms is None else now_ms
    RecordParser(limits, clock)  # fail on a bad config here, not inside a Spark task
    if not files:
        return LandingBatch(
            events=spark.createDataFrame([], EVENT_SCHEMA),
            quarantine=spark.createDataFrame([], QUARANTINE_SCHEMA),
            files=files,
            now_ms=clock,
        )

    sources = {path_key(f.path): f for f in files}
    contents, gone = _binary_contents(spark, files, clock)
    cached = (contents.mapInArrow(ParseFiles(limits, clock, sources), _spark_schema()) if contents is not None
              else spark.createDataFrame([], _spark_schema())).persist(StorageLevel.MEMORY_AND_DISK_DESER)
    if contents is not None:  # the files Spark found at the analysis, unless one went before its task read it
        refused = {path_key(p) for p in _paths(gone)}
        gone += _vanished(cached, [f for f in files if path_key(f.path) not in refused], clock)
    parsed = cached
    if gone:  # the rows of the files Spark did not find, made in this process
        parsed = parsed.unionByName(spark.createDataFrame(pa.Table.from_batches(gone).to_pylist(), _spark_schema()))

    def column(name: str, nullable: bool, default: Any) -> Any:
        # A filter does not make Spark's schema non-nullable; coalescing with a literal does, and
        # the default is never used: the parser sets these fields on every row of this side.
        return F.coalesce(F.col(name), F.lit(default)).alias(name) if not nullable else F.col(name)

    events = parsed.where(F.col("is_event")).select(
        *[column(f.name, f.nullable, EPOCH if f.name == "ts" else "") for f in EVENT_SCHEMA.fields]
    )
    quarantine = parsed.where(~F.col("is_event")).select(
        *[column(f.name, f.nullable, "") for f in QUARANTINE_SCHEMA.fields]
    )
    return LandingBatch(events=events, quarantine=quarantine, files=files, now_ms=clock, parsed=cached)


def _paths(rows: Sequence[pa.RecordBatch]) -> list[str]:
    """Return the ``source_file`` of quarantine rows made in this process."""
    return [str(p) for batch in rows for p in batch.column("source_file").to_pylist()]


def _vanished(parsed: DataFrame, files: Sequence[LandingFile], clock_ms: int) -> list[pa.RecordBatch]:
    """Return the ``unreadable_file`` row of each of ``files`` that went between the read's analysis and its task
    (Spark, told to ignore missing files, read nothing of it), with its planned range.

    Runs the parse (``parsed``, cached) once: a file that gave no row either held only blank lines or was gone;
    the one that cannot be opened now is the latter.
    """
    from lakeshard.landing.listing import open_landing_file

    seen = {path_key(str(r["source_file"])) for r in parsed.select("source_file").distinct().collect()}
    rows = []
    for f in files:
        if path_key(f.path) in seen:
            continue
        try:
            open_landing_file(f.path).close()
        except (OSError, pa.ArrowException) as exc:
            end = f.size_bytes if f.end is None else f.end
            rows.append(unreadable(f.path, f.size_bytes, f"cannot read the file ({_first_line(exc)})",
                                   clock_ms * 1000, byte_range=(f.start, end)))
    return rows



def _binary_contents(spark: SparkSession, files: Sequence[LandingFile], clock_ms: int
                     ) -> tuple[DataFrame | None, list[pa.RecordBatch]]:
    """Return the ``(path, content)`` frame of the files Spark finds (None: it finds none) and the quarantine row
    (:func:`~lakeshard.landing.batches.unreadable`) of each one it does not, naming the file and its planned range.

    Spark refuses a read naming a path that does not exist (``PATH_NOT_FOUND``, one path per refusal): the path
    it names is left out and the read tried again, so a normal read costs one analysis. Analysed here (the schema
    is asked for), so Spark Connect refuses here too, not in the caller's first action. A file that vanishes after
    this is skipped by the read (``ignoreMissingFiles``) and quarantined by :func:`_vanished`.
    """
    left = list(files)
    gone: list[pa.RecordBatch] = []
    while left:
        try:
            # A file gone after this analysis is skipped by the task, not a failed job: _vanished names it.
            frame = (spark.read.format("binaryFile").option("ignoreMissingFiles", "true")
                     .load([_spark_path(f.path) for f in left]).select("path", "content"))
            frame.schema  # noqa: B018 - analysis: where Spark refuses a missing path
            return frame, gone
        except Exception as exc:
            missing = _missing_path(left, exc)
            if missing is None:
                raise
            left.remove(missing)
            end = missing.size_bytes if missing.end is None else missing.end
            gone.append(unreadable(missing.path, missing.size_bytes, f"cannot read the file ({_first_line(exc)})",
                                   clock_ms * 1000, byte_range=(missing.start, end)))
    return None, gone


def _first_line(exc: BaseException) -> str:
    """Return the first line of an error's text (Spark's carry a JVM trace), cut to 300 characters."""
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


_PATH_NOT_FOUND = re.compile(r"Path does not exist: (.+?)\.?(?:\s+SQLSTATE|\s*$)", re.MULTILINE)


def _missing_path(files: Sequence[LandingFile], exc: BaseException) -> LandingFile | None:
    """Return the file of ``files`` a failed Spark read names as not existing, or None when it names none."""
    found = _PATH_NOT_FOUND.search(str(exc))
    if found is None:
        return None
    named = path_key(found.group(1))
    return next((f for f in files if named in (path_key(f.path), path_key(_spark_path(f.path)))), None)


def _spark_schema() -> Any:
    """Return the Spark schema of the combined parse (every column nullable but ``is_event``)."""
    from pyspark.sql.types import BooleanType, StructField, StructType

    by_name = {f.name: f.dataType for f in [*EVENT_SCHEMA.fields, *QUARANTINE_SCHEMA.fields]}
    fields = [StructField("is_event", BooleanType(), nullable=False)]
    fields += [StructField(f.name, by_name[f.name], nullable=True) for f in PARSED if f.name != "is_event"]
    return StructType(fields)
