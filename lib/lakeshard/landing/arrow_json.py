"""Parse many landing lines at once with Arrow's JSON reader; only the lines it cannot vouch for go line by line.

:class:`BlockParser` takes a block of one file's lines (byte ranges of the decoded text) and returns the columns
of the lines that are valid events under every rule of :mod:`lakeshard.landing.parse`, plus the indexes of the
lines it leaves to the exact per-record rules (:meth:`lakeshard.landing.parse.RecordParser.check`). It only ever
*accepts* a line; it never words a rejection, so every quarantine reason still comes from the exact rules.

A line is accepted here only when each of these holds, all checked on whole columns:

* it starts with ``{``, ends with ``}`` and has at most ``max_record_bytes`` bytes, and is strict UTF-8; no
  known field's value starts as another JSON type than the schema's (one regex pass: such a line would make
  Arrow refuse its whole part);
* Arrow's reader parses it (explicit schema: the required and optional fields as strings, ``ts`` as an
  integer or a string, ``attributes`` as an object whose members are inferred, other members inferred), and
  it made exactly one row of it. Arrow refuses duplicate keys, NaN/Infinity, integers beyond 64 bits for
  ``ts``, a lone surrogate escape, control characters in strings, trailing commas, a value of another JSON
  type where the schema names one, and trailing garbage after the object. Arrow is handed parts of at most
  :data:`_PART_BYTES` and stops at the first line it refuses, naming its row: that line goes to the exact rules
  and the reader goes on past it in windows about as long as the gap before it, so a refused line costs about one
  read. Where refusals come every few dozen lines, the rest of the part goes to the exact rules, which then cost
  less than Arrow's reads (:data:`_DENSE`);
* ``tenant_id``, ``event_id`` and ``ts`` are present, the ids non-empty and within their length limits, ``ts``
  an RFC 3339 string (the same grammar as :func:`lakeshard.landing.parse.parse_rfc3339_us`) or integer
  milliseconds, inside ``[earliest_ts, now + max_future_seconds]``;
* every ``attributes`` member is a string or ``null``, and every unknown top-level member a string, an
  integer, a boolean or ``null`` (Arrow infers ISO-looking strings as timestamps and re-encoding floats or
  nested values would not match ``json.dumps``: such lines go to the exact rules).

Everything else is the exact rules' business; they run on few lines, so a block of clean lines costs one
Arrow parse and a handful of column kernels.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from lakeshard.landing.parse import OPTIONAL_STRING_FIELDS, REQUIRED_FIELDS, RecordParser

__all__ = ["BlockParser", "ParsedBlock", "split_lines"]

IntArray = npt.NDArray[np.int64]

_STRING = pa.string()
_ATTRIBUTES = pa.map_(pa.string(), pa.string())
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_KNOWN = frozenset((*REQUIRED_FIELDS, *OPTIONAL_STRING_FIELDS, "attributes"))
_FOLDABLE = (pa.types.is_string, pa.types.is_int64, pa.types.is_boolean)  # unknown members json.dumps like Arrow
_OPEN, _CLOSE, _NEWLINE, _CR = ord("{"), ord("}"), ord("\n"), ord("\r")
# Where Arrow says which row it failed on ("... in row 17").
_ROW = re.compile(r"in row (\d+)")
# A top-level-looking "ts": followed by a string; a line misread by this only costs a failed Arrow parse.
_TS_STRING = r'"ts"[ \t\r]*:[ \t\r]*"'
# RE2's \d is ASCII only, like the exact rules' re.ASCII.
_RFC3339 = r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:[Zz]|[+-]\d{2}:\d{2})$"
_ZERO = ord("0")
# Known fields whose value starts as another JSON type than the explicit schema names (a number or an array where
# a string is expected, ...). Only a key followed by ``:`` matches: a string value ``"event_id"`` does not.
_SUSPECT = (
    r'"(?:tenant_id|event_id|service|status|env|host|message)"[ \t\r]*:[ \t\r]*[^"n \t\r]'
    r'|"ts"[ \t\r]*:[ \t\r]*[^"n \t\r0-9-]|"attributes"[ \t\r]*:[ \t\r]*[^{n \t\r]'
)
# Lines handed to Arrow's JSON reader at once: a refused line costs at most this much read again. Each part also
# costs some forty numpy and Arrow calls whose Python side holds the GIL the writer's threads wait for: 4 MiB parts
# parsed the 1M zone in 0.9x the CPU of 1 MiB ones (lines of the wrong JSON types are screened out before).
_PART_BYTES = 1 << 22
# Lines read at least at once past a refused line, while looking for the part's next refusal.
_MIN_WINDOW = 32
# After this many refusals in a part, at less than this many lines apart on average, the rest of the part goes to the
# exact rules: a refusal costs about 0.3 ms (a read of the window, the lines before it read again), some fifty lines'
# worth of the exact rules.
_DENSE = (8, 64)
_MAX_RUNS = 16  # runs of accepted rows kept as slices of a part; more are gathered with one take
_DAYS_IN_MONTH = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)


def split_lines(text: bytes) -> tuple[IntArray, IntArray]:
    """Return ``(starts, ends)``: the byte range of each line of ``text``, without ``\\n`` or a ``\\r`` before it.

    Line ``i`` (0-based) is physical line ``i + 1``; a text ending in ``\\n`` has no empty line after it.
    """
    if not text:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    buf = np.frombuffer(text, dtype=np.uint8)
    newlines = np.flatnonzero(buf == _NEWLINE).astype(np.int64)
    starts = np.concatenate([np.zeros(1, np.int64), newlines + 1])
    ends = np.concatenate([newlines, np.array([len(text)], np.int64)])
    if text[-1] == _NEWLINE:
        starts, ends = starts[:-1], ends[:-1]
    ends = ends - ((ends > starts) & (buf[np.maximum(ends - 1, 0)] == _CR))
    return starts, ends


@dataclass(frozen=True)
class ParsedBlock:
    """What :meth:`BlockParser.parse` made of a block: accepted events and the lines left to the exact rules.

    ``columns`` holds ``tenant_id`` … ``attributes``, ``size_bytes`` and ``line_number`` of the accepted lines
    (Arrow arrays of the reader's types); ``exact`` the block-relative indexes of every other line;
    ``arrow_bytes`` how many bytes were handed to Arrow's JSON reader (a refused part read again counts again),
    ``arrow_reads`` in how many calls.
    """

    columns: dict[str, pa.Array]
    exact: IntArray
    arrow_bytes: int = 0
    arrow_reads: int = 0


class BlockParser:
    """Vectorised acceptance of landing lines under a :class:`RecordParser`'s limits and clock."""

    def __init__(self, parser: RecordParser) -> None:
        limits = parser.limits
        self.max_record_bytes = limits.max_record_bytes
        self.max_tenant_id = limits.max_tenant_id_chars
        self.max_event_id = limits.max_event_id_chars
        self.earliest_us = parser._earliest_us
        self.latest_us = parser._latest_us
        # ts * 1000 within [earliest_us, latest_us], decided in milliseconds so nothing overflows.
        self.earliest_ms = -(-self.earliest_us // 1000)
        self.latest_ms = self.latest_us // 1000
        tenant, event, when = REQUIRED_FIELDS
        optional = [(name, _STRING) for name in OPTIONAL_STRING_FIELDS]
        self._schemas = {
            ts_type: pa.schema([(tenant, _STRING), (event, _STRING), (when, ts_type), *optional,
                                ("attributes", pa.struct([]))])
            for ts_type in (pa.int64(), _STRING)
        }

    def parse(self, text: bytes, starts: IntArray, ends: IntArray, numbers: IntArray) -> ParsedBlock:
        """Return the accepted events of the lines ``text[starts[i]:ends[i]]`` and the lines left to the exact rules.

        ``numbers`` are the lines' 1-based line numbers; the lines are consecutive lines of ``text`` (each
        line's bytes up to the next line's start, terminator included, are handed to Arrow as they are).
        """
        n = len(starts)
        if n == 0:
            return ParsedBlock({}, np.zeros(0, np.int64))
        buf = np.frombuffer(text, dtype=np.uint8)
        lengths = ends - starts
        nonempty = lengths > 0
        candidate = nonempty & (lengths <= self.max_record_bytes)
        candidate &= buf[np.where(nonempty, starts, 0)] == _OPEN
        candidate &= buf[np.where(nonempty, ends - 1, 0)] == _CLOSE
        stop = text.find(b"\n", int(ends[-1])) + 1 or len(text)
        offsets = pa.py_buffer(np.append(starts, stop).astype(np.int64))
        lines = pa.LargeBinaryArray.from_buffers(pa.large_binary(), n, [None, offsets, pa.py_buffer(text)])
        candidate &= _utf8_lines(lines)
        # Lines whose known field holds a value of another JSON type than the explicit schema's would fail Arrow's
        # parse of their whole part; they go to the exact rules at once (a key this misreads costs nothing wrong).
        candidate &= ~_true(pc.match_substring_regex(lines, _SUSPECT))
        ts_string = _true(pc.match_substring_regex(lines, _TS_STRING))
        accepted: list[dict[str, pa.Array]] = []
        exact: list[IntArray] = [np.flatnonzero(~candidate)]
        handed = [0, 0]  # bytes, reads
        for is_string in (False, True):
            group = np.flatnonzero(candidate & (ts_string == is_string))
            for table, part in self._arrow_parts(lines, lengths, group, is_string, exact, handed):
                ok, columns = self._accept(table, is_string)
                columns["size_bytes"] = pa.array(lengths[part].astype(np.int32))
                columns["line_number"] = pa.array(numbers[part].astype(np.int64))
                exact.append(part[~ok])
                accepted.extend(_runs(columns, ok))
        exact_rows = np.sort(np.concatenate(exact))
        if not accepted:
            return ParsedBlock({}, exact_rows, *handed)
        chunked = {name: pa.chunked_array([a[name] for a in accepted]) for name in accepted[0]}
        return ParsedBlock(chunked, exact_rows, *handed)

    def _arrow_parts(
        self, lines: pa.LargeBinaryArray, lengths: IntArray, group: IntArray, is_string: bool,
        exact: list[IntArray], handed: list[int],
    ) -> list[tuple[pa.Table, IntArray]]:
        """Return Arrow tables of ``group``'s lines, one row per line; lines Arrow refuses are added to ``exact``.

        Parts hold at most :data:`_PART_BYTES`. Arrow stops at the first line it refuses and names its row: that
        line goes to the exact rules and the reader goes on from the line after it, in a window twice as long as
        the gap before it (at least :data:`_MIN_WINDOW` lines, doubled after each window read whole). So a refused
        line costs about one read of a window past it, not a read of its part's rest. The lines read in windows are
        read once more, all together as one part, so the column checks run once per part. After :data:`_DENSE`
        refusals close together, the rest of the part goes to the exact rules. A window Arrow names no row of is
        halved into new parts; so is one that parses into another number of rows than it has lines (a line holding
        two objects), down to single lines. ``handed`` counts the bytes given to Arrow and the reads.
        """
        schema = self._schemas[_STRING if is_string else pa.int64()]
        done: list[tuple[pa.Table, IntArray]] = []
        todo = _cut(group, lengths[group] + 1, _PART_BYTES)
        while todo:
            part = todo.pop()
            chosen = lines.take(pa.array(part)) if part[-1] - part[0] + 1 != len(part) else (
                lines.slice(int(part[0]), len(part)))  # consecutive lines: no copy
            again: list[IntArray] = []  # lines read before a refusal: read once more, together, at the end
            at, window, refused = 0, len(part), 0
            while at < len(part):
                if refused >= _DENSE[0] and at < _DENSE[1] * refused:
                    exact.append(part[at:])  # a refusal every few lines: the exact rules cost less than Arrow here
                    break
                n = min(window, len(part) - at)
                read = _read_json(chosen.slice(at, n), schema, handed)
                if isinstance(read, pa.Table) and read.num_rows == n and _sound(read):
                    if n == len(part):
                        done.append((read, part))
                    else:  # read again with the rest: one table per part keeps the column work per part
                        again.append(part[at : at + n])
                    at, window = at + n, 2 * window
                elif isinstance(read, int) and 0 <= read < n:
                    exact.append(part[at + read : at + read + 1])
                    again.append(part[at : at + read])
                    at, window, refused = at + read + 1, max(2 * read, _MIN_WINDOW), refused + 1
                elif n == 1:
                    exact.append(part[at : at + 1])
                    at += 1
                else:  # no row named, or another number of rows than lines (a line holding two objects)
                    todo.extend(_halves(part[at : at + n]))
                    at += n
            rest = np.concatenate(again) if again else part[:0]
            if len(rest):
                todo.append(rest)
        return done

    def _accept(self, table: pa.Table, is_string: bool) -> tuple[npt.NDArray[np.bool_], dict[str, pa.Array]]:
        """Return which rows of ``table`` are valid events, and the event columns of all its rows."""
        tenant_id = _one(table.column("tenant_id"))
        event_id = _one(table.column("event_id"))
        ts = _one(table.column("ts"))
        ok = _valid(tenant_id) & _valid(event_id) & _valid(ts)
        tenant_len = _ints(pc.utf8_length(tenant_id))
        event_len = _ints(pc.utf8_length(event_id))
        ok &= (tenant_len >= 1) & (tenant_len <= self.max_tenant_id)
        ok &= (event_len >= 1) & (event_len <= self.max_event_id)
        if is_string:
            ts_us, parsed = _rfc3339_us(ts)
            ok &= parsed & (ts_us >= self.earliest_us) & (ts_us <= self.latest_us)
        else:
            ms = _ints(ts)
            ok &= (ms >= self.earliest_ms) & (ms <= self.latest_ms)
            ts_us = np.where(ok, ms, 0) * 1000
        attributes, attributes_ok = _attributes(table)
        ok &= attributes_ok
        columns: dict[str, pa.Array] = {
            "tenant_id": tenant_id,
            "event_id": event_id,
            "ts": pa.array(np.where(ok, ts_us, 0)).cast(_TIMESTAMP),
        }
        for name in OPTIONAL_STRING_FIELDS:
            columns[name] = _one(table.column(name))
        columns["attributes"] = attributes
        return ok, columns


def _read_json(chosen: pa.LargeBinaryArray, schema: pa.Schema, handed: list[int]) -> pa.Table | int:
    """Return Arrow's table of the lines ``chosen``, or the row it refused (-1: it named none)."""
    data = chosen.buffers()[2]
    offsets = np.frombuffer(chosen.buffers()[1], dtype=np.int64, count=len(chosen) + 1, offset=chosen.offset * 8)
    size = int(offsets[-1] - offsets[0])
    body = data.slice(int(offsets[0]), size) if data is not None else pa.py_buffer(b"")
    handed[0] += size
    handed[1] += 1
    try:
        return pj.read_json(
            pa.BufferReader(body),
            read_options=pj.ReadOptions(use_threads=False, block_size=max(size + 1, 1 << 16)),
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="infer"),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        found = _ROW.search(str(exc))
        return int(found.group(1)) if found else -1


def _halves(part: IntArray) -> tuple[IntArray, IntArray]:
    return part[: len(part) // 2], part[len(part) // 2 :]


def _one(values: pa.ChunkedArray) -> pa.Array:
    """Return a column as one array: its only chunk as it is (``combine_chunks`` copies a single chunk too, and
    the message column of a part is most of its bytes)."""
    return values.chunk(0) if values.num_chunks == 1 else values.combine_chunks()


def _true(values: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.bool_]:
    """Return a boolean column as numpy, null counted as false (read from its bitmaps, no conversion)."""
    if isinstance(values, pa.ChunkedArray):
        values = _one(values)
    truth = _bits(values.buffers()[1], values.offset, len(values))
    return truth & _valid(values) if values.null_count else truth


def _valid(values: pa.Array) -> npt.NDArray[np.bool_]:
    """Return which rows of an array hold a value, from its validity bitmap."""
    if not values.null_count:
        return np.ones(len(values), dtype=bool)
    if pa.types.is_null(values.type):
        return np.zeros(len(values), dtype=bool)
    return _bits(values.buffers()[0], values.offset, len(values))


def _bits(buffer: pa.Buffer | None, offset: int, n: int) -> npt.NDArray[np.bool_]:
    """Return ``n`` bits of an Arrow bitmap from bit ``offset`` on, as booleans."""
    if buffer is None or n == 0:
        return np.zeros(n, dtype=bool)
    packed = np.frombuffer(buffer, dtype=np.uint8, count=(offset + n + 7) // 8)
    return np.unpackbits(packed, count=offset + n, bitorder="little")[offset:].view(bool)


def _sound(table: pa.Table) -> bool:
    """Return whether every nested column Arrow's JSON reader built is structurally valid: for some inputs (a
    list of nulls in an object, ``{"": [null, null]}``) it builds one whose offsets overrun its values, which
    fails whatever reads it. A part holding such a line is cut like a part Arrow refuses, down to that line,
    which the exact rules then decide."""
    try:
        for column in table.columns:
            if pa.types.is_nested(column.type):
                column.validate()
    except pa.ArrowInvalid:
        return False
    return True


def _not_null(values: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.bool_]:
    """Return which rows of a column this parser does not decode hold a value; all rows if the column is corrupt.

    Arrow's JSON reader can build an invalid nested column (a list of nulls whose offsets overrun its values):
    only a fully validated column's validity is trusted, otherwise every row goes to the exact rules.
    """
    try:
        values.validate(full=True)
    except pa.ArrowInvalid:
        return np.ones(len(values), dtype=bool)
    return _valid(_one(values) if isinstance(values, pa.ChunkedArray) else values)


def _ints(values: pa.Array | pa.ChunkedArray) -> IntArray:
    """Return an integer column as int64 numpy, null as 0 (callers have already ruled null rows out)."""
    return np.asarray(pc.fill_null(values, 0).to_numpy(zero_copy_only=False), dtype=np.int64)


def _utf8_lines(lines: pa.LargeBinaryArray) -> npt.NDArray[np.bool_]:
    """Return which lines are strict UTF-8: Arrow validates the whole block, then halves of a block that is not."""
    good = np.ones(len(lines), dtype=bool)
    todo = [(0, len(lines))]
    while todo:
        lo, hi = todo.pop()
        text = lines.slice(lo, hi - lo).view(pa.large_string())
        try:
            text.validate(full=True)
            continue
        except pa.ArrowInvalid:
            pass
        if hi - lo == 1:
            good[lo] = False
        else:
            todo.extend(((lo, (lo + hi) // 2), ((lo + hi) // 2, hi)))
    return good


def _cut(rows: IntArray, sizes: IntArray, limit: int) -> list[IntArray]:
    """Return ``rows`` cut into consecutive parts of at most ``limit`` bytes (a row larger than that alone)."""
    if not len(rows):
        return []
    total = np.cumsum(sizes)
    bounds = [0]
    while bounds[-1] < len(rows):
        base = int(total[bounds[-1] - 1]) if bounds[-1] else 0
        bounds.append(max(int(np.searchsorted(total, base + limit, side="right")), bounds[-1] + 1))
    return [rows[lo:hi] for lo, hi in pairwise(bounds)]


def _runs(columns: dict[str, pa.Array], ok: npt.NDArray[np.bool_]) -> list[dict[str, pa.Array]]:
    """Return the rows of ``columns`` where ``ok`` holds: zero-copy slices of the runs of accepted rows, or one
    ``take`` when the rows are too scattered for slices to pay."""
    if ok.all():
        return [columns]
    edges = np.flatnonzero(np.diff(np.concatenate([[False], ok, [False]]).astype(np.int8)))
    if len(edges) > 2 * _MAX_RUNS:
        keep = pa.array(np.flatnonzero(ok))
        return [{k: v.take(keep) for k, v in columns.items()}]
    return [{k: v.slice(lo, hi - lo) for k, v in columns.items()} for lo, hi in zip(edges[::2], edges[1::2],
                                                                                       strict=True)]


def _rfc3339_us(ts: pa.Array) -> tuple[IntArray, npt.NDArray[np.bool_]]:
    """Return epoch microseconds of RFC 3339 strings and which rows are ones (same grammar as the exact rules).

    One regex pass checks the shape; every field then sits at a fixed position from the string's start (date,
    time, fraction) or end (offset), so the numbers are read from the bytes with numpy, without a regex capture.
    """
    n = len(ts)
    us = np.zeros(n, np.int64)
    ok = np.zeros(n, dtype=bool)
    rows = np.flatnonzero(_true(pc.match_substring_regex(ts, _RFC3339)))
    if not len(rows):
        return us, ok
    offsets = np.frombuffer(ts.buffers()[1], dtype=np.int32, count=n + 1, offset=ts.offset * 4)
    data = np.frombuffer(ts.buffers()[2], dtype=np.uint8)
    start = offsets[rows].astype(np.int64)
    end = offsets[rows + 1].astype(np.int64)

    def number(at: IntArray, width: int) -> IntArray:
        value = np.zeros(len(rows), np.int64)
        for k in range(width):
            value = value * 10 + (data[at + k].astype(np.int64) - _ZERO)
        return value

    year, month, day = number(start, 4), number(start + 5, 2), number(start + 8, 2)
    hour, minute, second = number(start + 11, 2), number(start + 14, 2), number(start + 17, 2)
    last = data[end - 1]
    utc = (last == ord("Z")) | (last == ord("z"))
    zone = np.where(utc, end - 1, end - 6)  # where "Z" or "+HH:MM" starts
    off_h = np.where(utc, 0, number(np.where(utc, start, zone + 1), 2))
    off_m = np.where(utc, 0, number(np.where(utc, start, zone + 4), 2))
    digits = zone - start - 20  # fractional digits after "SS." (negative: no fraction)
    micros = np.zeros(len(rows), np.int64)
    for k in range(6):  # digits below a microsecond are truncated
        has = k < digits
        micros += np.where(has, data[np.where(has, start + 20 + k, start)].astype(np.int64) - _ZERO, 0) * 10 ** (5 - k)
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    month_ok = (month >= 1) & (month <= 12)
    dim = _DAYS_IN_MONTH[np.where(month_ok, month, 1)] + ((month == 2) & leap)
    good = month_ok & (day >= 1) & (day <= dim) & (hour <= 23) & (minute <= 59) & (second <= 59)
    good &= (off_h <= 23) & (off_m <= 59)
    offset = (off_h * 3600 + off_m * 60) * np.where(~utc & (data[zone] == ord("-")), -1, 1)
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * np.where(month > 2, month - 3, month + 9) + 2) // 5 + day - 1
    days = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
    seconds = days * 86400 + hour * 3600 + minute * 60 + second - offset
    us[rows] = np.where(good, seconds * 1_000_000 + micros, 0)
    ok[rows] = good
    return us, ok


def _attributes(table: pa.Table) -> tuple[pa.Array, npt.NDArray[np.bool_]]:
    """Return the ``attributes`` map column (explicit members, then unknown top-level ones) and which rows hold
    only members this parser can encode exactly."""
    n = table.num_rows
    ok = np.ones(n, dtype=bool)
    explicit = _one(table.column("attributes"))
    present = _valid(explicit)
    values: dict[str, pa.Array] = {}
    for i, field in enumerate(explicit.type):
        child = explicit.field(i)
        if pa.types.is_null(field.type):
            continue
        if not pa.types.is_string(field.type):
            ok &= ~_not_null(child)
            continue
        values[field.name] = child
    for name, chunked in zip(table.column_names, table.columns, strict=True):
        if name in _KNOWN or pa.types.is_null(chunked.type):
            continue
        if not any(check(chunked.type) for check in _FOLDABLE):
            ok &= ~_not_null(chunked)
            continue
        column = _one(chunked)
        text = column if pa.types.is_string(column.type) else pc.cast(column, _STRING)
        values[name] = pc.coalesce(values[name], text) if name in values else text
    if not values:
        offsets = pa.array(np.zeros(n + 1, np.int32))
        return pa.MapArray.from_arrays(offsets, pa.array([], _STRING), pa.array([], _STRING), type=_ATTRIBUTES,
                                       mask=pa.array(~present)), ok
    names = list(values)
    arrays = [values[name] for name in names]
    valid = np.stack([_valid(a) for a in arrays], axis=1)  # rows x keys
    row, key = np.nonzero(valid)  # row-major: each row's members together
    counts = valid.sum(axis=1)
    offsets = np.concatenate([np.zeros(1, np.int64), np.cumsum(counts)]).astype(np.int32)
    items = pa.concat_arrays(arrays).take(pa.array(key * n + row))
    keys = pa.array(names, _STRING).take(pa.array(key))
    mask = ~(present | (counts > 0))
    return pa.MapArray.from_arrays(pa.array(offsets), keys, items, type=_ATTRIBUTES, mask=pa.array(mask)), ok
