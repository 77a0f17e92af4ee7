"""A landing file's bytes into Arrow batches of events and rejections: the parse both read paths run.

:func:`lakeshard.landing.read_landing` (Spark, inside ``mapInArrow``) and :func:`lakeshard.landing.parse_landing_arrow`
(in the driver) hand :class:`ParseFiles` the same bytes, so they give the same rows and reasons. A file's range is
checked against its batch plan's checksum, gunzipped (:mod:`lakeshard.landing.gzip`), split into lines and parsed
by blocks with :class:`lakeshard.landing.arrow_json.BlockParser` (Arrow's JSON reader), which hands the lines it
does not accept to :meth:`lakeshard.landing.parse.RecordParser.check`. Each batch is all events or all rejections, in
one combined layout (:data:`PARSED`, ``is_event`` tells them apart).

Lines, decided here because docs/design.md is silent:

* a line ends at ``\\n``; a ``\\r`` before it is part of the terminator (CRLF files read like LF files);
  the last line needs no terminator;
* empty and whitespace-only lines are not records: skipped, not quarantined, but counted in
  ``line_number`` so it always points at the physical line;
* a UTF-8 byte-order mark at the very start of a file is dropped (Windows tools write one);
* compression is recognised by the gzip magic bytes, not by the name (a mislabelled file still reads);
  concatenated gzip members are read as one stream.

Files, decided here because docs/design.md is silent: a file that cannot be read at all — more than
``max_file_bytes`` once decompressed, or (on the in-driver path) vanished or not readable — gives one
``unreadable_file`` quarantine row (``line_number`` 0, empty ``raw``, ``size_bytes`` the file's stored size) and
none of its lines; the other files of the batch go on. A damaged gzip file (cut short, a member zlib refuses,
garbage after its last member) gives up every record before the damage: its whole members and the complete lines
decoded before the damage are parsed as usual, and the rest is one ``unreadable_file`` row on the line it begins
on, with its compressed byte range in ``start_byte``/``end_byte`` (and named in the reason) and its decompressed
bytes in ``raw``/``size_bytes``. A producer that
stopped mid-write costs only what it did not finish. A gzip file still being written is not read before it is
settled (:mod:`lakeshard.routing.lifecycle` holds it back), and a replay reads the same bytes (the plan's
checksum), so it reaches the same verdict.

Every non-blank line of a readable file becomes exactly one row: an event, or a rejection with its
reason. Should Arrow refuse a value the parser accepted (a parser gap), the rows that do not convert
are quarantined as ``unconvertible`` instead of failing the batch.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import itemgetter

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from lakeshard.config import LandingConfig
from lakeshard.landing import reasons
from lakeshard.landing.arrow_json import BlockParser, split_lines
from lakeshard.landing.gzip import GZIP_HEADER_BYTES, GzipDamage, gunzip, is_gzip
from lakeshard.landing.listing import LandingFile, content_checksum
from lakeshard.landing.parse import OPTIONAL_STRING_FIELDS, REQUIRED_FIELDS, EventFields, RecordParser
from lakeshard.tables import QUARANTINE_RAW_LIMIT_BYTES

__all__ = ["EPOCH", "PARSED", "ParseFiles", "path_key", "unreadable"]

_UTF8_BOM = b"\xef\xbb\xbf"
_BLANK = b" \t\r"
# Output batches are cut by rows and by bytes: Arrow string columns have 32-bit offsets, and one
# batch of 256 KiB records must stay far below 2 GiB. A batch is also the vectorised parser's block, whose fixed
# cost is Python's: a landing file of a few MB is one block (8,192 rows made two, the second small).
_BATCH_ROWS = 65536
_BATCH_BYTES = 32 * 1024 * 1024
_MAX_INT32 = (1 << 31) - 1
_DETAIL_CHARS = 160  # how much of a conversion error a quarantine reason quotes
# What building an Arrow array raises on a value it cannot hold (a lone surrogate, an int attribute, an
# out-of-range timestamp).
_CONVERSION_ERRORS = (pa.ArrowException, UnicodeError, ValueError, TypeError, OverflowError)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
"""The modification time of a file Spark read that no plan named (it is read whole)."""

_STRING = pa.string()
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_ATTRIBUTES = pa.map_(pa.string(), pa.string())
# One Arrow schema for both outcomes, so the file is parsed once; ``is_event`` tells them apart.
PARSED = pa.schema(
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
        ("start_byte", pa.int64()),
        ("end_byte", pa.int64()),
    ]
)
_Parsers = tuple[RecordParser, BlockParser]  # the exact rules and the vectorised parser over the same limits
_EVENT_ONLY = (*REQUIRED_FIELDS, *OPTIONAL_STRING_FIELDS, "attributes")
_REJECTION_ONLY = ("raw", "raw_truncated", "reason", "category", "quarantined_at", "start_byte", "end_byte")
_ByteRange = tuple[int, int]  # [start, end) of a landing file's bytes



def _decode(content: bytes, limit: int) -> tuple[bytes, GzipDamage | None, str | None]:
    """Return a landing file's text bytes (gunzipped, BOM dropped), where a gzip stream's damage begins (None: it
    has none), and why the file cannot be read at all (then the text is ``b""``)."""
    damage = None
    if is_gzip(content[:GZIP_HEADER_BYTES]):
        got = gunzip(content, limit)
        if got.problem is not None:
            return b"", None, got.problem
        content, damage = got.text, got.damage
    elif len(content) > limit:
        return b"", None, f"file holds more than landing_format.max_file_bytes = {limit} bytes ({len(content)})"
    if content.startswith(_UTF8_BOM):
        content = content[len(_UTF8_BOM) :]
    return content, damage, None


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
        self.event_lines: list[bytes] = []
        self.event_numbers: list[int] = []
        self.rejected: list[tuple[str, bool, int, str, str, int, int | None, int | None]] = []

    def event(self, fields: EventFields, line: bytes, line_number: int) -> None:
        self.events.append(fields)
        self.event_lines.append(line)
        self.event_numbers.append(line_number)

    def reject(self, line: bytes, reason: str, line_number: int, size: int | None = None,
               byte_range: _ByteRange | None = None) -> None:
        raw, truncated = _raw_text(line)
        size = len(line) if size is None else size
        start, end = byte_range or (None, None)
        self.rejected.append((raw, size > len(line) or truncated, size, reason, reasons.category_of(reason),
                              line_number, start, end))

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Return the record batches of the buffered rows: events first, then rejections."""
        if self.events:
            try:
                yield self._event_batch(range(len(self.events)))
            except _CONVERSION_ERRORS:
                yield from self._convertible_events()
        if self.rejected:
            n = len(self.rejected)
            raw, truncated, size, reason, category, line_number, start, end = (
                list(map(itemgetter(i), self.rejected)) for i in range(8)
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
                "start_byte": pa.array(start, pa.int64()),
                "end_byte": pa.array(end, pa.int64()),
            }
            for name in _EVENT_ONLY:
                arrays[name] = pa.nulls(n, PARSED.field(name).type)
            yield pa.RecordBatch.from_arrays([arrays[f.name] for f in PARSED], schema=PARSED)

    def _event_batch(self, rows: Sequence[int]) -> pa.RecordBatch:
        """Return the record batch of the buffered events at ``rows``; raises what Arrow raises on a bad value."""
        events = self.events if len(rows) == len(self.events) else [self.events[i] for i in rows]
        n = len(events)
        # One pass per column: zip(*rows) is several times slower on batches this long.
        columns = [list(map(itemgetter(i), events)) for i in range(len(_EVENT_ONLY))]
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
            "size_bytes": pa.array([len(self.event_lines[i]) for i in rows], pa.int32()),
            "source_file": pa.repeat(pa.scalar(self.source_file, _STRING), n),
            "line_number": pa.array([self.event_numbers[i] for i in rows], pa.int64()),
        }
        for name in _REJECTION_ONLY:
            arrays[name] = pa.nulls(n, PARSED.field(name).type)
        return pa.RecordBatch.from_arrays([arrays[f.name] for f in PARSED], schema=PARSED)

    def _convertible_events(self) -> Iterator[pa.RecordBatch]:
        """Return the batch of the events that convert one by one; quarantine the others as unconvertible.

        Whatever the parser accepts should convert, so this runs only when the parser has a gap: the rows
        it let through are quarantined instead of failing the whole batch (and the batch plan with it).
        """
        good: list[int] = []
        for i in range(len(self.events)):
            try:
                self._event_batch([i])
            except _CONVERSION_ERRORS as exc:
                detail = f"{type(exc).__name__}: {exc}"[:_DETAIL_CHARS]
                self.reject(self.event_lines[i], f"{reasons.UNCONVERTIBLE}: {detail}", self.event_numbers[i])
            else:
                good.append(i)
        self.rejected.sort(key=itemgetter(5))
        if good:
            yield self._event_batch(good)


def _parse_file(parsers: _Parsers, source_file: str, content: bytes) -> Iterator[pa.RecordBatch]:
    """Return Arrow batches (the combined event/rejection layout) of one landing file's bytes.

    Lines go by blocks through the vectorised parser (:mod:`lakeshard.landing.arrow_json`); the lines it does not
    accept go one by one through the exact rules, which word every rejection. A file past ``max_file_bytes``
    gives one ``unreadable_file`` row (line 0) and none of its lines; a damaged gzip file gives its complete lines
    before the damage, then one ``unreadable_file`` row for the rest (see the module's docstring).
    """
    parser, blocks = parsers
    quarantined_at_us = parser.now_ms * 1000
    text, damage, problem = _decode(content, parser.limits.max_file_bytes)
    if problem is not None:
        yield unreadable(source_file, len(content), problem, quarantined_at_us)
        return
    rest_head, rest_bytes = b"", 0
    if damage is not None:  # the complete lines before the damage are parsed; the rest is one row
        complete = text.rfind(b"\n") + 1
        keep = QUARANTINE_RAW_LIMIT_BYTES + 4  # what raw can hold, and the bytes its cut looks back over
        rest_head = (text[complete : complete + keep] + damage.untrusted[:keep])[:keep]
        rest_bytes = len(text) - complete + len(damage.untrusted)
        text = text[:complete]
    starts, ends = split_lines(text)
    numbers = np.arange(1, len(starts) + 1, dtype=np.int64)
    check = parser.check
    for lo, hi in _blocks(ends - starts):
        got = blocks.parse(text, starts[lo:hi], ends[lo:hi], numbers[lo:hi])
        if got.columns:
            yield from _accepted_batches(got.columns, source_file)
        sink = _Sink(source_file, quarantined_at_us)
        for i in (got.exact + lo).tolist():
            line = text[starts[i] : ends[i]]
            if not line.strip(_BLANK):
                continue
            fields = check(line)
            if isinstance(fields, str):
                sink.reject(line, fields, i + 1)
            else:
                sink.event(fields, line, i + 1)
        yield from sink.batches()
    if damage is not None:
        yield _damaged_rest(source_file, damage, rest_head, rest_bytes, text.count(b"\n") + 1, quarantined_at_us)


def _blocks(lengths: npt.NDArray[np.int64]) -> Iterator[tuple[int, int]]:
    """Return ``[lo, hi)`` line ranges of at most ``_BATCH_ROWS`` lines and about ``_BATCH_BYTES`` bytes each."""
    total = np.cumsum(lengths)
    lo = 0
    while lo < len(lengths):
        base = int(total[lo - 1]) if lo else 0
        by_bytes = int(np.searchsorted(total, base + _BATCH_BYTES, side="right"))
        hi = min(lo + _BATCH_ROWS, max(by_bytes, lo + 1), len(lengths))
        yield lo, hi
        lo = hi


def _accepted_batches(columns: dict[str, pa.ChunkedArray], source_file: str) -> list[pa.RecordBatch]:
    """Return the combined-layout batches of the events the vectorised parser accepted (one per chunk, no copy)."""
    n = len(columns["tenant_id"])
    arrays: dict[str, pa.Array | pa.ChunkedArray] = dict(columns)
    arrays["is_event"] = pa.repeat(pa.scalar(True), n)
    arrays["source_file"] = pa.repeat(pa.scalar(source_file, _STRING), n)
    for name in _REJECTION_ONLY:
        arrays[name] = pa.nulls(n, PARSED.field(name).type)
    batches: list[pa.RecordBatch] = pa.Table.from_arrays([arrays[f.name] for f in PARSED], schema=PARSED).to_batches()
    return batches


def unreadable(source_file: str, size: int, problem: str, quarantined_at_us: int,
               byte_range: _ByteRange | None = None) -> pa.RecordBatch:
    """Return the one quarantine row of a landing file that cannot be read: line 0, no raw text, and the bytes
    that could not be read when they are a planned range (None: the file)."""
    sink = _Sink(source_file, quarantined_at_us)
    sink.reject(b"", f"{reasons.UNREADABLE_FILE}: {problem}", 0, size=min(size, _MAX_INT32), byte_range=byte_range)
    return next(sink.batches())


def _damaged_rest(source_file: str, damage: GzipDamage, head: bytes, size: int, line_number: int,
                  quarantined_at_us: int) -> pa.RecordBatch:
    """Return the one quarantine row of a gzip file's damaged rest: its compressed byte range in ``start_byte`` and
    ``end_byte`` (offsets of the bytes parsed; the caller shifts them to the file's) and, with why, in the reason;
    its ``size`` decompressed bytes (the unfinished line, and what a refused member decoded to) in ``size_bytes``
    and, from their ``head``, in ``raw``; ``line_number`` the line it begins on."""
    where = f"compressed bytes [{damage.start}, {damage.end})"
    if damage.truncated:
        what = f"gzip stream is truncated: {where} end inside a gzip member"
    else:
        what = f"gzip stream is corrupt: {where} begin with a gzip member zlib refuses ({damage.detail})"
    reason = (f"{reasons.UNREADABLE_FILE}: {what}; the {size} decompressed bytes from line {line_number} on "
              "are not routed")
    sink = _Sink(source_file, quarantined_at_us)
    sink.reject(head, reason, line_number, size=min(size, _MAX_INT32), byte_range=(damage.start, damage.end))
    return next(sink.batches())


@dataclass(frozen=True)
class ParseFiles:
    """The ``mapInArrow`` function: ``(path, content)`` batches in, combined parse batches out.

    A picklable object rather than a closure, so what ships to executors is exactly these fields. ``content``
    is a file's bytes from ``offset`` on (0 on Spark, which reads files whole); each file's planned range is cut
    out of it and checked against its checksum before the parse.
    """

    limits: LandingConfig
    now_ms: int
    sources: dict[str, LandingFile]  # Spark's spelling of a path (see path_key) -> the file and its range

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        def contents() -> Iterator[tuple[LandingFile, bytes, int]]:
            for batch in batches:
                paths = batch.column("path").to_pylist()
                column = batch.column("content")
                offsets = batch.column("offset").to_pylist() if "offset" in batch.schema.names else None
                for i, path in enumerate(paths):
                    f = self.sources.get(path_key(path)) or LandingFile(path, 0, EPOCH)
                    yield f, column[i].as_py(), offsets[i] if offsets else 0

        return self.parse(contents())

    def parse(self, contents: Iterable[tuple[LandingFile, bytes, int]]) -> Iterator[pa.RecordBatch]:
        """Return the parse batches of ``(file, its bytes from offset on, offset)`` triples."""
        parser = RecordParser(self.limits, self.now_ms)
        parsers = (parser, BlockParser(parser))
        # Parsing allocates millions of short-lived, acyclic dicts and tuples: the cyclic collector's
        # passes over them find nothing and cost ~15% of the parse. It is back on when this ends.
        collecting = gc.isenabled()
        gc.disable()
        try:
            for f, content, offset in contents:
                yield from _parse_range(parsers, f, content, offset)
        finally:
            if collecting:
                gc.enable()


def _parse_range(parsers: _Parsers, f: LandingFile, content: bytes, offset: int) -> Iterator[pa.RecordBatch]:
    """Return the parse batches of ``f``'s range, given the file's bytes from ``offset`` on."""
    parser = parsers[0]
    data = content[f.start - offset :] if f.end is None else content[f.start - offset : f.end - offset]
    if f.checksum is not None and content_checksum(data) != f.checksum:
        sink = _Sink(f.path, parser.now_ms * 1000)
        sink.reject(b"", f"{reasons.FILE_CHANGED}: bytes [{f.start}, {f.end}) of the file are not the ones its "
                         "batch was planned with (it was rewritten meanwhile); its new content is routed as a "
                         "rewritten file", f.first_line, byte_range=(f.start, f.start + len(data)))
        yield from sink.batches()
        return
    shift = f.first_line - 1
    for batch in _parse_file(parsers, f.path, data):
        if shift:  # line numbers of the file, not of the range
            index = batch.schema.get_field_index("line_number")
            batch = batch.set_column(index, "line_number", pc.add(batch.column(index), shift))
        if f.start:  # byte offsets of the file, not of the range
            for name in ("start_byte", "end_byte"):
                index = batch.schema.get_field_index(name)
                batch = batch.set_column(index, name, pc.add(batch.column(index), f.start))
        yield batch


def path_key(uri: str) -> str:
    """Return a file's URI in one spelling: Spark writes ``file:/x`` where lakeshard writes ``file:///x``."""
    if uri.startswith("file:"):
        return "file:///" + uri[len("file:") :].lstrip("/")
    return uri
