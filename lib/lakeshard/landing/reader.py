"""Read a landing zone with Spark: list its files, split them into lines, parse each line once.

:func:`list_landing_files` (:mod:`lakeshard.landing.listing`) finds the input. :func:`read_landing` reads
exactly those files — or the byte range of each that a batch plan names, checked against the plan's checksum —
with Spark's ``binaryFile`` source (the bytes as written, so sizes and line numbers are exact), and one vectorised
``mapInArrow`` pass per partition gunzips, splits lines and calls
:meth:`lakeshard.landing.parse.RecordParser.check`. The result is cached once and split into
``events`` and ``quarantine``: every non-blank line lands in exactly one of them.

Lines, decided here because DESIGN.md is silent:

* a line ends at ``\\n``; a ``\\r`` before it is part of the terminator (CRLF files read like LF files);
  the last line needs no terminator;
* empty and whitespace-only lines are not records: skipped, not quarantined, but counted in
  ``line_number`` so it always points at the physical line;
* a UTF-8 byte-order mark at the very start of a file is dropped (Windows tools write one);
* compression is recognised by the gzip magic bytes, not by the name (a mislabelled file still reads);
  concatenated gzip members are read as one stream. A corrupt or truncated gzip stream yields the
  lines decompressed before the damage plus one ``invalid_json`` quarantine row for the file saying
  where it broke, so the damage is visible instead of failing the whole batch.

Memory: ``binaryFile`` holds each file whole, and a gzip file is held compressed and decompressed
at once, so landing files of tens of megabytes are fine; files beyond ~1 GB are not what this reader
is for (Spark's ``binaryFile`` refuses files over 2 GB).
"""

from __future__ import annotations

import gc
import os
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import itemgetter
from types import TracebackType
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from lakeshard.config import LandingConfig
from lakeshard.landing import reasons
from lakeshard.landing.listing import (
    LANDING_SUFFIXES,
    LandingFile,
    LandingReadError,
    LandingScan,
    content_checksum,
    list_landing_files,
    open_landing_file,
    scan_landing,
)
from lakeshard.landing.parse import EventFields, RecordParser
from lakeshard.landing.schema import EVENT_SCHEMA, QUARANTINE_RAW_LIMIT_BYTES, QUARANTINE_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "LANDING_SUFFIXES",
    "LandingBatch",
    "LandingFile",
    "LandingReadError",
    "LandingScan",
    "content_checksum",
    "list_landing_files",
    "open_landing_file",
    "parse_landing_arrow",
    "read_landing",
    "scan_landing",
]

_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = b"\xef\xbb\xbf"
_BLANK = b" \t\r"
# Output batches are cut by rows and by bytes: Arrow string columns have 32-bit offsets, and one
# batch of 256 KiB records must stay far below 2 GiB.
_BATCH_ROWS = 8192
_BATCH_BYTES = 32 * 1024 * 1024
_GLOB_CHARS = frozenset("\\{}[]*?")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_STRING = pa.string()
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_ATTRIBUTES = pa.map_(pa.string(), pa.string())
# One Arrow schema for both outcomes, so the file is parsed once; ``is_event`` tells them apart.
_PARSED = pa.schema(
    [
        ("is_event", pa.bool_()),
        ("tenant_id", _STRING),
        ("event_id", _STRING),
        ("ts", _TIMESTAMP),
        ("service", _STRING),
        ("status", _STRING),
        ("env", _STRING),
        ("host", _STRING),
        ("message", _STRING),
        ("attributes", _ATTRIBUTES),
        ("size_bytes", pa.int32()),
        ("source_file", _STRING),
        ("line_number", pa.int64()),
        ("raw", _STRING),
        ("raw_truncated", pa.bool_()),
        ("reason", _STRING),
        ("category", _STRING),
        ("quarantined_at", _TIMESTAMP),
    ]
)
_EVENT_ONLY = ("tenant_id", "event_id", "ts", "service", "status", "env", "host", "message", "attributes")
_REJECTION_ONLY = ("raw", "raw_truncated", "reason", "category", "quarantined_at")


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


# --------------------------------------------------------------------------------------------- parsing


def _gunzip(data: bytes) -> tuple[bytes, str | None]:
    """Return the decompressed bytes of a gzip file and, if it is damaged, what broke and where."""
    parts: list[bytes] = []
    rest = data
    while rest:
        stream = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            parts.append(stream.decompress(rest))
        except zlib.error as exc:
            done = sum(map(len, parts))
            return b"".join(parts), f"gzip stream is corrupt after {done} decompressed bytes ({exc})"
        if not stream.eof:
            parts.append(stream.flush())
            done = sum(map(len, parts))
            return b"".join(parts), f"gzip stream is truncated after {done} decompressed bytes"
        rest = stream.unused_data
        if not rest.strip(b"\x00"):  # gzip(1) tolerates zero padding after the last member
            break
    return b"".join(parts), None


def _raw_text(line: bytes) -> tuple[str, bool]:
    """Return the line as text for the quarantine (bad UTF-8 replaced), cut to the raw limit."""
    if len(line) <= QUARANTINE_RAW_LIMIT_BYTES:
        return line.decode("utf-8", "replace"), False
    cut = QUARANTINE_RAW_LIMIT_BYTES
    # Cut on a character boundary: step back over up to 3 UTF-8 continuation bytes (10xxxxxx).
    for back in range(4):
        if line[cut - back] & 0xC0 != 0x80:
            cut -= back
            break
    return line[:cut].decode("utf-8", "replace"), True


class _Sink:
    """Column buffers of one output batch; events and rejections become two record batches."""

    def __init__(self, source_file: str, quarantined_at_us: int) -> None:
        self.source_file = source_file
        self.quarantined_at_us = quarantined_at_us
        self.events: list[EventFields] = []
        self.event_sizes: list[int] = []
        self.event_lines: list[int] = []
        self.rejected: list[tuple[str, bool, int, str, str, int]] = []

    def reject(self, line: bytes, reason: str, line_number: int) -> None:
        raw, truncated = _raw_text(line)
        self.rejected.append((raw, truncated, len(line), reason, reasons.category_of(reason), line_number))

    def batches(self) -> Iterator[pa.RecordBatch]:
        if self.events:
            n = len(self.events)
            # One pass per column: zip(*rows) is several times slower on batches this long.
            columns = [list(map(itemgetter(i), self.events)) for i in range(len(_EVENT_ONLY))]
            arrays: dict[str, pa.Array] = {
                "is_event": pa.repeat(pa.scalar(True), n),
                "tenant_id": pa.array(columns[0], _STRING),
                "event_id": pa.array(columns[1], _STRING),
                "ts": pa.array(columns[2], _TIMESTAMP),
                "service": pa.array(columns[3], _STRING),
                "status": pa.array(columns[4], _STRING),
                "env": pa.array(columns[5], _STRING),
                "host": pa.array(columns[6], _STRING),
                "message": pa.array(columns[7], _STRING),
                "attributes": pa.array(columns[8], _ATTRIBUTES),
                "size_bytes": pa.array(self.event_sizes, pa.int32()),
                "source_file": pa.repeat(pa.scalar(self.source_file, _STRING), n),
                "line_number": pa.array(self.event_lines, pa.int64()),
            }
            for name in _REJECTION_ONLY:
                arrays[name] = pa.nulls(n, _PARSED.field(name).type)
            yield pa.RecordBatch.from_arrays([arrays[f.name] for f in _PARSED], schema=_PARSED)
        if self.rejected:
            n = len(self.rejected)
            raw, truncated, size, reason, category, line_number = (
                list(map(itemgetter(i), self.rejected)) for i in range(6)
            )
            arrays = {
                "is_event": pa.repeat(pa.scalar(False), n),
                "size_bytes": pa.array(size, pa.int32()),
                "source_file": pa.repeat(pa.scalar(self.source_file, _STRING), n),
                "line_number": pa.array(line_number, pa.int64()),
                "raw": pa.array(raw, _STRING),
                "raw_truncated": pa.array(truncated, pa.bool_()),
                "reason": pa.array(reason, _STRING),
                "category": pa.array(category, _STRING),
                "quarantined_at": pa.repeat(pa.scalar(self.quarantined_at_us, _TIMESTAMP), n),
            }
            for name in _EVENT_ONLY:
                arrays[name] = pa.nulls(n, _PARSED.field(name).type)
            yield pa.RecordBatch.from_arrays([arrays[f.name] for f in _PARSED], schema=_PARSED)


def _parse_file(parser: RecordParser, source_file: str, content: bytes) -> Iterator[pa.RecordBatch]:
    """Return Arrow batches (the combined event/rejection layout) of one landing file's bytes."""
    damage: str | None = None
    if content.startswith(_GZIP_MAGIC):
        content, damage = _gunzip(content)
    if content.startswith(_UTF8_BOM):
        content = content[len(_UTF8_BOM) :]
    lines = content.split(b"\n")
    if lines[-1] == b"":  # the terminator of the last line, not an empty line after it
        lines.pop()
    quarantined_at_us = parser.now_ms * 1000
    sink = _Sink(source_file, quarantined_at_us)
    check = parser.check
    pending = pending_bytes = 0
    for number, line in enumerate(lines, 1):
        if line[-1:] == b"\r":
            line = line[:-1]
        if not line.strip(_BLANK):
            continue
        got = check(line)
        if isinstance(got, str):
            sink.reject(line, got, number)
        else:
            sink.events.append(got)
            sink.event_sizes.append(len(line))
            sink.event_lines.append(number)
        pending += 1
        pending_bytes += len(line)
        if pending >= _BATCH_ROWS or pending_bytes >= _BATCH_BYTES:
            yield from sink.batches()
            sink = _Sink(source_file, quarantined_at_us)
            pending = pending_bytes = 0
    if damage is not None:
        sink.reject(b"", f"{reasons.INVALID_JSON}: {damage}; the rest of the file cannot be read", len(lines) + 1)
    yield from sink.batches()


@dataclass(frozen=True)
class _ParseFiles:
    """The ``mapInArrow`` function: ``(path, content)`` batches in, combined parse batches out.

    A picklable object rather than a closure, so what ships to executors is exactly these fields. ``content``
    is a file's bytes from ``offset`` on (0 on Spark, which reads files whole); each file's planned range is cut
    out of it and checked against its checksum before the parse.
    """

    limits: LandingConfig
    now_ms: int
    sources: dict[str, LandingFile]  # Spark's spelling of a path (see _path_key) -> the file and its range

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        parser = RecordParser(self.limits, self.now_ms)
        # Parsing allocates millions of short-lived, acyclic dicts and tuples: the cyclic collector's
        # passes over them find nothing and cost ~15% of the parse. It is back on when this ends.
        collecting = gc.isenabled()
        gc.disable()
        try:
            for batch in batches:
                paths = batch.column("path").to_pylist()
                contents = batch.column("content")
                offsets = batch.column("offset").to_pylist() if "offset" in batch.schema.names else None
                for i, path in enumerate(paths):
                    f = self.sources.get(_path_key(path)) or LandingFile(path, 0, _EPOCH)
                    yield from _parse_range(parser, f, contents[i].as_py(), offsets[i] if offsets else 0)
        finally:
            if collecting:
                gc.enable()


def _parse_range(parser: RecordParser, f: LandingFile, content: bytes, offset: int) -> Iterator[pa.RecordBatch]:
    """Return the parse batches of ``f``'s range, given the file's bytes from ``offset`` on."""
    data = content[f.start - offset :] if f.end is None else content[f.start - offset : f.end - offset]
    if f.checksum is not None and content_checksum(data) != f.checksum:
        sink = _Sink(f.path, parser.now_ms * 1000)
        sink.reject(b"", f"{reasons.FILE_CHANGED}: bytes [{f.start}, {f.end}) of the file are not the ones its "
                         "batch was planned with (it was rewritten meanwhile); its new content is routed as a "
                         "rewritten file", f.first_line)
        yield from sink.batches()
        return
    shift = f.first_line - 1
    for batch in _parse_file(parser, f.path, data):
        if shift:  # line numbers of the file, not of the range
            index = batch.schema.get_field_index("line_number")
            batch = batch.set_column(index, "line_number", pc.add(batch.column(index), shift))
        yield batch


def _path_key(uri: str) -> str:
    """Return a file's URI in one spelling: Spark writes ``file:/x`` where lakeshard writes ``file:///x``."""
    if uri.startswith("file:"):
        return "file:///" + uri[len("file:") :].lstrip("/")
    return uri


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
    job). Rows come in no particular order. Nothing runs until the frames are used; the parse is then
    cached — release it with :meth:`LandingBatch.release` (or a ``with`` block).

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

    sources = {_path_key(f.path): f for f in files}
    contents = spark.read.format("binaryFile").load([_spark_path(f.path) for f in files]).select("path", "content")
    parsed = contents.mapInArrow(_ParseFiles(limits, clock, sources), _spark_schema()).persist(
        StorageLevel.MEMORY_AND_DISK_DESER
    )

    def column(name: str, nullable: bool, default: Any) -> Any:
        # A filter does not make Spark's schema non-nullable; coalescing with a literal does, and
        # the default is never used: the parser sets these fields on every row of this side.
        return F.coalesce(F.col(name), F.lit(default)).alias(name) if not nullable else F.col(name)

    events = parsed.where(F.col("is_event")).select(
        *[column(f.name, f.nullable, _EPOCH if f.name == "ts" else "") for f in EVENT_SCHEMA.fields]
    )
    quarantine = parsed.where(~F.col("is_event")).select(
        *[column(f.name, f.nullable, "") for f in QUARANTINE_SCHEMA.fields]
    )
    return LandingBatch(events=events, quarantine=quarantine, files=files, now_ms=clock, parsed=parsed)


def parse_landing_arrow(
    files: Sequence[LandingFile], *, limits: LandingConfig, now_ms: int | None = None
) -> tuple[pa.Table, pa.Table]:
    """Return ``(events, quarantine)`` of these landing files, parsed in this process as Arrow tables.

    The same parse as :func:`read_landing` (the same function over the same bytes, so the same rows and
    reasons), without Spark: for batches small enough that a Spark job's fixed cost would dominate.
    ``events`` holds the :data:`EVENT_SCHEMA` columns, ``quarantine`` the :data:`QUARANTINE_SCHEMA` ones
    (Arrow types as the parse makes them; a store's write casts them to the table's).

    Raises:
        LandingReadError: a file cannot be read (it vanished, or its location is not understood).
    """
    clock = int(time.time() * 1000) if now_ms is None else now_ms
    parse = _ParseFiles(limits, clock, {_path_key(f.path): f for f in files})
    batches: list[pa.RecordBatch] = []
    for f in files:
        try:
            with open_landing_file(f.path) as stream:  # exactly the planned bytes
                stream.seek(f.start)
                content = stream.read() if f.end is None else stream.read(f.end - f.start)
        except (OSError, pa.ArrowException) as exc:
            raise LandingReadError(f"cannot read landing file {f.path}: {exc}") from None
        one = pa.record_batch({"path": pa.array([f.path]), "content": pa.array([content], pa.binary()),
                               "offset": pa.array([f.start], pa.int64())})
        batches.extend(parse(iter([one])))
    parsed = pa.Table.from_batches(batches, schema=_PARSED)
    is_event = parsed.column("is_event")
    events = parsed.filter(is_event).select([f.name for f in EVENT_SCHEMA.fields])
    quarantine = parsed.filter(pc.invert(is_event)).select([f.name for f in QUARANTINE_SCHEMA.fields])
    return events, quarantine


def _spark_schema() -> Any:
    """Return the Spark schema of the combined parse (every column nullable but ``is_event``)."""
    from pyspark.sql.types import BooleanType, StructField, StructType

    by_name = {f.name: f.dataType for f in [*EVENT_SCHEMA.fields, *QUARANTINE_SCHEMA.fields]}
    fields = [StructField("is_event", BooleanType(), nullable=False)]
    fields += [StructField(f.name, by_name[f.name], nullable=True) for f in _PARSED if f.name != "is_event"]
    return StructType(fields)
