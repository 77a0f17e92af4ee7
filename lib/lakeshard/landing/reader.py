"""Read a landing zone with Spark: list its files, split them into lines, parse each line once.

:func:`list_landing_files` finds the input (``*.json``, ``*.jsonl``, ``*.json.gz``, ``*.jsonl.gz``
below the landing root, skipping every path component that starts with ``_`` or ``.``: ground truth,
checkpoints, in-progress uploads). :func:`read_landing` reads exactly those files with Spark's
``binaryFile`` source (the bytes as written, so sizes and line numbers are exact), and one vectorised
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
import hashlib
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
import pyarrow.fs as pafs

from lakeshard.config import LandingConfig
from lakeshard.errors import LakeshardError
from lakeshard.landing import reasons
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

LANDING_SUFFIXES: tuple[str, ...] = (".json", ".jsonl", ".json.gz", ".jsonl.gz")
"""File names the reader takes as landing input (case-sensitive)."""

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


class LandingReadError(LakeshardError):
    """The landing zone cannot be listed: it does not exist, or its location is not understood."""


@dataclass(frozen=True)
class LandingFile:
    """One input file of a landing zone: its URI (``file:///...`` locally), size and modification time, and
    which of its bytes a read takes.

    A listed file is read whole. A batch plan narrows it to the byte range ``[start, end)`` whose first line is
    physical line ``first_line`` (line numbers stay those of the file), and records the range's ``checksum``
    (:func:`content_checksum`): a read that finds other bytes there quarantines one ``file_changed`` row for the
    range instead of parsing them. ``target`` is the file the path resolves to when it is (or lies below) a
    symbolic link, as a URI; empty otherwise. :attr:`identity` is what the router tracks a file by.
    """

    path: str
    size_bytes: int
    mtime: datetime  # UTC
    start: int = 0
    end: int | None = None  # None: to the end of the file
    first_line: int = 1
    checksum: str | None = None
    target: str = ""

    @property
    def identity(self) -> str:
        """Return the URI of the real file: ``target`` for a link, else ``path``."""
        return self.target or self.path

    @property
    def read_bytes(self) -> int:
        """Return how many bytes a read of this file takes (the range's length, or the size)."""
        return (self.size_bytes if self.end is None else self.end) - self.start


@dataclass(frozen=True)
class LandingScan:
    """A landing zone's listing: the files to read, and the symbolic links whose target does not exist."""

    files: list[LandingFile]
    dangling: list[str] = field(default_factory=list)  # URIs of links with a landing name and no target


def content_checksum(data: bytes) -> str:
    """Return the checksum a batch plan records for a byte range of a landing file: SHA-256, as hex."""
    return hashlib.sha256(data).hexdigest()


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


# --------------------------------------------------------------------------------------------- listing


def _local_path_of_file_uri(uri: str) -> str:
    rest = uri[len("file:") :]
    if rest.startswith("//"):
        rest = rest[2:]
        host, sep, path = rest.partition("/")
        if host not in ("", "localhost"):
            raise LandingReadError(f"landing zone {uri}: file URIs on another host ({host}) are not supported")
        rest = sep + path
    if not rest.startswith("/"):
        raise LandingReadError(f"landing zone {uri}: a file URI needs an absolute path, e.g. file:///data/landing")
    return rest


def _resolve(landing: str) -> tuple[pafs.FileSystem, str, str]:
    """Return ``(filesystem, path inside it, URI prefix)``; a file's URI is prefix + its path."""
    if landing.startswith("file:"):
        return pafs.LocalFileSystem(), os.path.normpath(_local_path_of_file_uri(landing)), "file://"
    if "://" in landing:
        scheme = landing.split("://", 1)[0]
        try:
            fs, path = pafs.FileSystem.from_uri(landing)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
            raise LandingReadError(f"landing zone {landing}: cannot open this location ({exc})") from None
        return fs, path.rstrip("/"), f"{scheme}://"
    return pafs.LocalFileSystem(), os.path.abspath(landing), "file://"


def _is_landing_name(name: str) -> bool:
    return name.endswith(LANDING_SUFFIXES)


def _mtime(info: pafs.FileInfo) -> datetime:
    when: datetime | None = info.mtime
    if when is None:
        return _EPOCH
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def list_landing_files(landing: str | os.PathLike[str]) -> list[LandingFile]:
    """Return the landing zone's input files, sorted by path (for generated zones: arrival order).

    Looks recursively below ``landing`` (a local path or a ``file:`` URI; other URIs that
    ``pyarrow.fs`` understands, e.g. ``s3://``, are listed the same way) for files named
    ``*.json``, ``*.jsonl``, ``*.json.gz`` or ``*.jsonl.gz``, skipping every file or directory below the
    root whose name starts with ``_`` or ``.`` (``_truth/``, ``_checkpoints/``, ``.part-0001.jsonl``).
    ``landing`` may also name one file, which is then the whole list. Symbolic links: see :func:`scan_landing`.

    Raises:
        LandingReadError: ``landing`` does not exist or its location is not understood.

    Example::

        files = list_landing_files("/data/landing")
        files[0].path  # 'file:///data/landing/2026-01-01/00/part-000000.jsonl'
    """
    return scan_landing(landing).files


def scan_landing(landing: str | os.PathLike[str]) -> LandingScan:
    """Return the landing zone's input files (as :func:`list_landing_files`) and its dangling links.

    Symbolic links on a local file system: a link to a file is read as that file, and each real file once —
    under the first of its names in path order (``target`` says which file it is); a link to a directory is
    followed, each real directory at most once, so a link cycle ends; a link with a landing name whose target
    does not exist is listed in ``dangling`` (it is read once its target appears).

    Raises:
        LandingReadError: ``landing`` does not exist or its location is not understood.
    """
    text = os.fspath(landing)
    fs, root, prefix = _resolve(text)
    if isinstance(fs, pafs.LocalFileSystem):
        return _scan_local(text, root, prefix)
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        raise LandingReadError(f"landing zone {text} does not exist")
    if info.type == pafs.FileType.File:
        return LandingScan([LandingFile(prefix + root, info.size or 0, _mtime(info))] if _is_landing_name(root) else [])
    out: list[LandingFile] = []
    for entry in fs.get_file_info(pafs.FileSelector(root, recursive=True)):
        if entry.type != pafs.FileType.File or not _is_landing_name(entry.base_name):
            continue
        relative = entry.path[len(root) :].lstrip("/")
        if any(part.startswith(("_", ".")) for part in relative.split("/")):
            continue
        out.append(LandingFile(prefix + entry.path, entry.size or 0, _mtime(entry)))
    out.sort(key=lambda f: f.path)
    return LandingScan(out)


def _stat_mtime(st: os.stat_result) -> datetime:
    # Exactly as pyarrow's FileInfo.mtime rounds it (checked): the router compares a file's mtime with the one a
    # batch plan recorded, and plans made by earlier versions recorded pyarrow's.
    return datetime.fromtimestamp(st.st_mtime_ns / 1e9, UTC)


def _scan_local(text: str, root: str, prefix: str) -> LandingScan:
    """Return the scan of a local landing zone, walking it with ``os.scandir`` to see its symbolic links."""
    if not os.path.exists(root):
        raise LandingReadError(f"landing zone {text} does not exist")
    real_root = os.path.realpath(root)

    def uri_of_real(real: str) -> str:
        # A target inside the landing zone is named as the zone names it (its root unresolved), so a file's
        # identity does not depend on links above the root.
        if real == real_root or real.startswith(real_root + os.sep):
            return prefix + root + real[len(real_root) :]
        return prefix + real

    if not os.path.isdir(root):
        if not _is_landing_name(root):
            return LandingScan([])
        real, st = os.path.realpath(root), os.stat(root)
        return LandingScan([LandingFile(prefix + root, st.st_size, _stat_mtime(st),
                                        target=prefix + real if real != root else "")])
    found: list[tuple[str, os.stat_result, str]] = []  # (path, stat of the real file, target URI or "")
    dangling: list[str] = []
    visited = {real_root}  # real directories entered through a link (and the root): each once
    stack: list[tuple[str, bool]] = [(root, False)]  # (directory, whether a link led into it)
    while stack:
        directory, linked = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:  # vanished or unreadable between listing and walking: like a file that is gone
            continue
        for entry in entries:
            if entry.name.startswith(("_", ".")):
                continue
            link = entry.is_symlink()
            try:
                is_dir = entry.is_dir()
                is_file = not is_dir and entry.is_file()
            except OSError:
                is_dir = is_file = False
            if is_dir:
                if link:
                    real = os.path.realpath(entry.path)
                    if real in visited:
                        continue
                    visited.add(real)
                stack.append((entry.path, linked or link))
            elif is_file and _is_landing_name(entry.name):
                try:
                    st = entry.stat()
                except OSError:
                    continue
                target = uri_of_real(os.path.realpath(entry.path)) if link or linked else ""
                found.append((entry.path, st, target))
            elif link and not is_file and _is_landing_name(entry.name) and not os.path.exists(entry.path):
                dangling.append(prefix + entry.path)
    found.sort(key=lambda f: f[0])
    files: list[LandingFile] = []
    seen: set[str] = set()
    for path, st, target in found:
        identity = target or prefix + path
        if identity in seen:  # a second name of a file listed already
            continue
        seen.add(identity)
        files.append(LandingFile(prefix + path, st.st_size, _stat_mtime(st), target=target))
    return LandingScan(files, sorted(dangling))


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


def open_landing_file(uri: str) -> pa.NativeFile:
    """Return a landing file (a URI as :class:`LandingFile` holds it) opened for random access; close it after.

    Raises:
        OSError, pyarrow.ArrowException: the file cannot be opened.
        LandingReadError: the location is not understood.
    """
    fs, path, _ = _resolve(uri)
    return fs.open_input_file(path)


def _spark_schema() -> Any:
    """Return the Spark schema of the combined parse (every column nullable but ``is_event``)."""
    from pyspark.sql.types import BooleanType, StructField, StructType

    by_name = {f.name: f.dataType for f in [*EVENT_SCHEMA.fields, *QUARANTINE_SCHEMA.fields]}
    fields = [StructField("is_event", BooleanType(), nullable=False)]
    fields += [StructField(f.name, by_name[f.name], nullable=True) for f in _PARSED if f.name != "is_event"]
    return StructType(fields)
