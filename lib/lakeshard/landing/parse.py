"""Parse one landing line into a valid event or a quarantine rejection (docs/design.md §2), in pure Python.

These are the exact rules of what a valid landing record is. The parse of a file (:mod:`lakeshard.landing.batches`)
parses blocks of lines with Arrow (:mod:`lakeshard.landing.arrow_json`), which only accepts lines every rule below
holds for, and calls these rules for every other line: every quarantine reason is worded here.

Rules, checked in the precedence order of :mod:`lakeshard.landing.reasons`
(``invalid_json > not_an_object > oversize > missing_field > bad_type > empty_field > too_long >
bad_timestamp > absurd_timestamp``); the first that applies is the reason:

* **invalid_json** — the line is not strict UTF-8 (a UTF-8 byte-order mark inside a line counts as
  invalid too; the reader strips one at the very start of a file), or not one JSON text. ``NaN`` and
  ``Infinity`` are rejected (they are not JSON); duplicate keys are accepted, the last one wins. A
  string (key or value, at any depth) holding a lone UTF-16 surrogate escape such as ``"\\ud800"`` is
  invalid too: JSON's grammar allows it, but it is no Unicode character and no column can store it
  (an escaped pair ``"\\ud83d\\ude80"`` is one character and fine).
* **not_an_object** — valid JSON that is not an object: an array (even of records), a number, a
  string, ``true``/``false``, ``null``.
* **oversize** — the line (without its newline) has more than ``max_record_bytes`` bytes. To keep the
  precedence exact, such a line is still parsed as JSON — unless it is longer than
  :data:`UNPARSED_OVERSIZE_FACTOR` times the limit: then it is quarantined as oversize right away, so a
  pathological line (a whole multi-megabyte JSON array on one line) costs nothing to reject.
* **missing_field** — ``tenant_id``, ``event_id`` or ``ts`` absent or ``null``.
* **bad_type** — ``tenant_id``/``event_id`` not strings; ``ts`` neither a string nor a JSON integer
  (``true``, ``1.5``, ``1.0``, ``1e12``, arrays and objects are bad types); ``service``, ``status``,
  ``env``, ``host``, ``message`` present, not ``null`` and not strings; ``attributes`` present, not
  ``null`` and not an object, or holding a value that is neither a string nor ``null``.
* **empty_field** — ``tenant_id`` or ``event_id`` is ``""`` (whitespace is content, not emptiness).
* **too_long** — ``tenant_id`` longer than ``max_tenant_id_chars`` or ``event_id`` longer than
  ``max_event_id_chars``, counted in Unicode code points.
* **bad_timestamp** — ``ts`` is a string but not RFC 3339 (see :func:`parse_rfc3339_us`).
* **absurd_timestamp** — ``ts`` lies before ``earliest_ts`` or after ``now + max_future_seconds``
  (both bounds inclusive, so a ``ts`` exactly on a bound is valid).

Everything else is kept, decided here because docs/design.md is silent:

* ``null`` means absent everywhere: for optional fields, for ``attributes``, for attribute values and
  for unknown top-level fields (none of them turns into a key).
* Unknown top-level fields are folded into ``attributes``: string values as they are, other values
  JSON-encoded (compact, non-ASCII kept), e.g. ``{"retries": 3}`` → ``{"retries": "3"}``. When a key
  exists both in ``attributes`` and at the top level, the explicit ``attributes`` entry wins.
* ``attributes`` is ``None`` when the record has neither an ``attributes`` object nor unknown fields;
  an explicit ``{}`` stays an empty mapping.
* ``ts`` as an integer is epoch milliseconds, UTC; as a string it may carry any offset and any number
  of fractional digits from 1 to 9; it is normalised to UTC and truncated to microseconds.
* ``size_bytes`` is the byte length of the raw line as given (the reader passes it without ``\\n`` and
  without the ``\\r`` of a CRLF line ending).

Example::

    limits = LandingConfig()
    got = parse_record(b'{"tenant_id":"t1","event_id":"e1","ts":1767225600000}',
                       source_file="file:///landing/a.jsonl", line_number=1,
                       limits=limits, now_ms=1767225600000)
    assert isinstance(got, ParsedEvent) and got.ts_us == 1767225600000000
"""

from __future__ import annotations

import json
import json.scanner
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

from lakeshard.config import LandingConfig
from lakeshard.errors import ConfigError
from lakeshard.landing import reasons
from lakeshard.tables import EVENT_KEY

__all__ = [
    "OPTIONAL_STRING_FIELDS",
    "REQUIRED_FIELDS",
    "UNPARSED_OVERSIZE_FACTOR",
    "EventFields",
    "ParsedEvent",
    "RecordParser",
    "Rejection",
    "is_blank",
    "parse_record",
    "parse_rfc3339_us",
]

REQUIRED_FIELDS = EVENT_KEY  # a record names the event it is
OPTIONAL_STRING_FIELDS: tuple[str, ...] = ("service", "status", "env", "host", "message")
_KNOWN_FIELDS = frozenset((*REQUIRED_FIELDS, *OPTIONAL_STRING_FIELDS, "attributes"))

UNPARSED_OVERSIZE_FACTOR = 16
"""Lines longer than this many times ``max_record_bytes`` are called oversize without a JSON parse."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DAYS_IN_MONTH = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_BLANK = b" \t\r"  # JSON whitespace other than the newline the reader splits on
_DETAIL_CHARS = 80  # how much of an offending value a reason quotes

# RFC 3339 §5.6 date-time. re.ASCII: without it \d also matches non-ASCII digits such as "٢".
# 'T'/'Z' may be lower case (RFC 3339 §5.6 note); a space instead of 'T' is not accepted.
_RFC3339 = re.compile(r"(\d{4}-\d{2}-\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})", re.ASCII)


@dataclass(frozen=True, slots=True)
class ParsedEvent:
    """A valid landing record, normalised: ``ts_us`` is epoch microseconds, UTC."""

    tenant_id: str
    event_id: str
    ts_us: int
    service: str | None
    status: str | None
    env: str | None
    host: str | None
    message: str | None
    attributes: dict[str, str] | None
    size_bytes: int
    source_file: str
    line_number: int

    @property
    def ts(self) -> datetime:
        """Return ``ts_us`` as a timezone-aware UTC datetime."""
        return _EPOCH + timedelta(microseconds=self.ts_us)


@dataclass(frozen=True, slots=True)
class Rejection:
    """A landing record that goes to quarantine: the raw line and why (``"<category>: <detail>"``)."""

    reason: str
    raw: bytes
    source_file: str
    line_number: int

    @property
    def category(self) -> str:
        """Return the reason's category, one of :data:`lakeshard.landing.reasons.CATEGORIES`."""
        return reasons.category_of(self.reason)

    @property
    def size_bytes(self) -> int:
        """Return the byte length of the raw line."""
        return len(self.raw)


def is_blank(line: bytes) -> bool:
    """Return whether ``line`` is empty or JSON whitespace only: such lines are skipped, not records."""
    return not line.strip(_BLANK)


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Return days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm)."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def parse_rfc3339_us(text: str) -> int | None:
    """Return the epoch microseconds (UTC) of an RFC 3339 date-time, or ``None`` if it is not one.

    Accepted: ``YYYY-MM-DDTHH:MM:SS[.f{1,9}](Z|+HH:MM|-HH:MM)``, ``T``/``Z`` in either case, real
    calendar dates only, offsets up to ±23:59 (``-00:00`` is UTC). Digits below a microsecond are
    truncated. Not accepted: a leap second ``:60`` (POSIX time cannot hold it), ``24:00:00``, a missing
    offset, a space instead of ``T``, date-only or week dates, more than 9 fractional digits.

    Example::

        parse_rfc3339_us("2026-01-01T02:00:00.123456789+02:00")  # 1767225600123456
    """
    m = _RFC3339.fullmatch(text)
    if m is None:
        return None
    date, hs, mis, ss, frac, suffix = m.groups()
    day_seconds = _date_seconds(date)
    offset = _offset_seconds(suffix)
    if day_seconds is None or offset is None:
        return None
    hour, minute, second = int(hs), int(mis), int(ss)
    if hour > 23 or minute > 59 or second > 59:
        return None
    seconds = day_seconds + hour * 3600 + minute * 60 + second - offset
    if frac is None:
        return seconds * 1_000_000
    return seconds * 1_000_000 + int((frac + "00000")[:6])


def _is_leap_second(text: str) -> bool:
    """Return whether ``text`` is an RFC 3339 date-time whose second is 60 (valid in RFC 3339, refused here)."""
    m = _RFC3339.fullmatch(text)
    return (m is not None and m.group(4) == "60"
            and parse_rfc3339_us(text[:m.start(4)] + "59" + text[m.end(4):]) is not None)


# A landing file's timestamps share a handful of dates and offsets: caching their arithmetic makes
# parsing a timestamp little more than the regex match.
@lru_cache(maxsize=4096)
def _date_seconds(date: str) -> int | None:
    """Return epoch seconds of midnight UTC of ``YYYY-MM-DD``, or ``None`` if no such date exists."""
    year, month, day = int(date[0:4]), int(date[5:7]), int(date[8:10])
    if not 1 <= month <= 12 or day < 1:
        return None
    if day > _DAYS_IN_MONTH[month] and not (
        month == 2 and day == 29 and year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    ):
        return None
    return _days_from_civil(year, month, day) * 86400


@lru_cache(maxsize=1024)
def _offset_seconds(suffix: str) -> int | None:
    """Return seconds east of UTC of ``Z`` or ``±HH:MM``, or ``None`` if the offset is out of range."""
    if suffix in ("Z", "z"):
        return 0
    hours, minutes = int(suffix[1:3]), int(suffix[4:6])
    if hours > 23 or minutes > 59:
        return None
    seconds = hours * 3600 + minutes * 60
    return seconds if suffix[0] == "+" else -seconds


@lru_cache(maxsize=16)
def _earliest_us(earliest_ts: str) -> int:
    us = parse_rfc3339_us(earliest_ts)
    if us is None:
        raise ConfigError(f"landing.earliest_ts: expected an RFC 3339 timestamp, found {earliest_ts!r}")
    return us


def _json_type(value: Any) -> str:
    """Return the JSON type of a decoded value, with an article, as a reason names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _quote(value: Any) -> str:
    """Return a JSON rendering of ``value`` short enough to put into a reason."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 3] + "..."


def _reject_constant(name: str) -> Any:
    # json.loads accepts NaN/Infinity by default; they are not JSON (RFC 8259), so the record is not either.
    raise ValueError(f"{name} is not a JSON value")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_decode_json = _DECODER.decode
# The C scanner under decode(), without decode()'s Python wrappers (a tenth of the cost of a line).
# typeshed types make_scanner's argument as the scanner class itself; it takes the decoder.
_scan_json: Any = json.scanner.make_scanner(_DECODER)  # type: ignore[arg-type]


def _loads(text: str) -> Any:
    """Return the JSON value of ``text``; raises what ``json.loads`` raises, NaN/Infinity included."""
    try:
        value, end = _scan_json(text, 0)
    except StopIteration:
        # Leading whitespace or no value at all: the full decoder handles it and words the error.
        return _decode_json(text)
    if end != len(text):
        return _decode_json(text)  # trailing whitespace is fine, anything else is "Extra data"
    return value


# A JSON escape of a UTF-16 surrogate (\\uD800-\\uDFFF, hex digits in either case). json decodes a
# high+low pair into one character but leaves a lone one in the string as a surrogate code point, which
# is not Unicode: it cannot be encoded as UTF-8, so no Arrow column can hold it. Only lines holding such
# an escape (rare) pay for the exact check.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _lone_surrogate(obj: Any) -> str | None:
    """Return what is wrong if a decoded value holds a lone surrogate in a key or string, else ``None``."""
    try:
        text = json.dumps(obj, ensure_ascii=False)
    except RecursionError:
        return "nesting too deep to store"
    found = _SURROGATE.search(text)
    if found is None:
        return None
    code = ord(found.group())
    return f"a string holds a lone UTF-16 surrogate escape \\u{code:04x}, which is not a Unicode character"


def _encode_attribute(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


EventFields = tuple[str, str, int, str | None, str | None, str | None, str | None, str | None, dict[str, str] | None]
"""A valid record's values in :class:`ParsedEvent` order, from ``tenant_id`` to ``attributes``."""


class RecordParser:
    """A :func:`parse_record` with the limits and the clock resolved once, for loops over many lines.

    :meth:`parse` returns the dataclasses; :meth:`check` returns plain tuples and strings so a reader
    that fills columns does not build an object per line.

    Raises:
        ConfigError: ``limits.earliest_ts`` is not an RFC 3339 timestamp.
    """

    __slots__ = (
        "_earliest_us",
        "_latest_us",
        "_max_event_id",
        "_max_record_bytes",
        "_max_tenant_id",
        "_unparsed_bytes",
        "limits",
        "now_ms",
    )

    def __init__(self, limits: LandingConfig, now_ms: int) -> None:
        self.limits = limits
        self.now_ms = now_ms
        self._max_record_bytes = limits.max_record_bytes
        self._unparsed_bytes = limits.max_record_bytes * UNPARSED_OVERSIZE_FACTOR
        self._max_tenant_id = limits.max_tenant_id_chars
        self._max_event_id = limits.max_event_id_chars
        self._earliest_us = _earliest_us(limits.earliest_ts)
        self._latest_us = (now_ms + limits.max_future_seconds * 1000) * 1000

    def parse(self, line: bytes, source_file: str, line_number: int) -> ParsedEvent | Rejection:
        """Return the event ``line`` holds, or the rejection that says why it holds none.

        ``line`` is one record without its line terminator (see the module docstring for the rules).
        """
        got = self.check(line)
        if isinstance(got, str):
            return Rejection(got, line, source_file, line_number)
        tenant_id, event_id, ts_us, service, status, env, host, message, attributes = got
        return ParsedEvent(
            tenant_id, event_id, ts_us, service, status, env, host, message, attributes,
            len(line), source_file, line_number,
        )  # fmt: skip

    def check(self, line: bytes) -> EventFields | str:
        """Return a valid record's :data:`EventFields`, or the quarantine reason as a string."""
        size = len(line)
        if size > self._unparsed_bytes:
            return self._oversize(size)
        try:
            obj = _loads(line.decode("utf-8"))
        except UnicodeDecodeError as exc:
            return f"{reasons.INVALID_JSON}: not UTF-8 ({exc.reason} at byte {exc.start})"
        except json.JSONDecodeError as exc:
            return f"{reasons.INVALID_JSON}: {exc.msg} (character {exc.pos})"
        except (ValueError, RecursionError) as exc:
            # NaN/Infinity, integers beyond Python's digit limit, nesting deeper than the recursion limit.
            return f"{reasons.INVALID_JSON}: {exc}"
        if _SURROGATE_ESCAPE.search(line) is not None and (lone := _lone_surrogate(obj)) is not None:
            return f"{reasons.INVALID_JSON}: {lone}"
        if type(obj) is not dict:
            return f"{reasons.NOT_AN_OBJECT}: {_json_type(obj)}, expected an object"
        if size > self._max_record_bytes:
            return self._oversize(size)

        get = obj.get
        tenant_id = get("tenant_id")
        event_id = get("event_id")
        ts = get("ts")
        if tenant_id is None or event_id is None or ts is None:
            return _missing(obj)

        # Exact type checks: json only builds exact types, and a bool must not pass as an int.
        if type(tenant_id) is not str:
            return _bad_type("tenant_id", tenant_id, "a string")
        if type(event_id) is not str:
            return _bad_type("event_id", event_id, "a string")
        ts_type = type(ts)
        if ts_type is not str and ts_type is not int:
            found = "a non-integer number" if ts_type is float else _json_type(ts)
            return f"{reasons.BAD_TYPE}: ts is {found}, expected an RFC 3339 string or integer epoch milliseconds"
        service = get("service")
        status = get("status")
        env = get("env")
        host = get("host")
        message = get("message")
        if service is not None and type(service) is not str:
            return _bad_type("service", service, "a string")
        if status is not None and type(status) is not str:
            return _bad_type("status", status, "a string")
        if env is not None and type(env) is not str:
            return _bad_type("env", env, "a string")
        if host is not None and type(host) is not str:
            return _bad_type("host", host, "a string")
        if message is not None and type(message) is not str:
            return _bad_type("message", message, "a string")
        attributes = get("attributes")
        if attributes is not None:
            if type(attributes) is not dict:
                return _bad_type("attributes", attributes, "an object of strings")
            has_null = False
            for key, value in attributes.items():
                if type(value) is not str:
                    if value is not None:
                        return _bad_type(f"attributes.{key}", value, "a string")
                    has_null = True  # every value is still checked: a null does not end the scan
            if has_null:
                attributes = {k: v for k, v in attributes.items() if v is not None}
        if not obj.keys() <= _KNOWN_FIELDS:
            try:
                attributes = _fold_unknown(obj, attributes)
            except RecursionError:
                # Encoding starts a few frames deeper than decoding did: a value nested right at the
                # recursion limit decodes but does not encode.
                return f"{reasons.INVALID_JSON}: nesting too deep to store"

        if not tenant_id or not event_id:
            return f"{reasons.EMPTY_FIELD}: {'tenant_id' if not tenant_id else 'event_id'} is empty"
        if len(tenant_id) > self._max_tenant_id:
            return f"{reasons.TOO_LONG}: tenant_id has {len(tenant_id)} characters, limit is {self._max_tenant_id}"
        if len(event_id) > self._max_event_id:
            return f"{reasons.TOO_LONG}: event_id has {len(event_id)} characters, limit is {self._max_event_id}"

        if ts_type is int:
            ts_us: int = ts * 1000
        else:
            parsed = parse_rfc3339_us(ts)
            if parsed is None:
                if _is_leap_second(ts):
                    return (f"{reasons.BAD_TIMESTAMP}: ts {_quote(ts)} is a leap second, which lakeshard does not "
                            "take (POSIX time has no second 60)")
                return f"{reasons.BAD_TIMESTAMP}: ts {_quote(ts)} is not an RFC 3339 timestamp"
            ts_us = parsed
        if ts_us < self._earliest_us:
            return f"{reasons.ABSURD_TIMESTAMP}: ts {_quote(ts)} is before {self.limits.earliest_ts}"
        if ts_us > self._latest_us:
            return (
                f"{reasons.ABSURD_TIMESTAMP}: ts {_quote(ts)} is more than "
                f"{self.limits.max_future_seconds} s after now ({_format_us(self.now_ms * 1000)})"
            )
        return tenant_id, event_id, ts_us, service, status, env, host, message, attributes

    def _oversize(self, size: int) -> str:
        return f"{reasons.OVERSIZE}: record is {size} bytes, limit is {self._max_record_bytes}"


def _missing(obj: dict[str, Any]) -> str:
    names = [f if f not in obj else f"{f} (null)" for f in REQUIRED_FIELDS if obj.get(f) is None]
    return f"{reasons.MISSING_FIELD}: {', '.join(names)}"


def _bad_type(name: str, value: Any, expected: str) -> str:
    return f"{reasons.BAD_TYPE}: {name} is {_json_type(value)}, expected {expected}"


def _fold_unknown(obj: dict[str, Any], attributes: dict[str, str] | None) -> dict[str, str] | None:
    """Return ``attributes`` plus the record's unknown top-level fields (explicit attributes win)."""
    folded = dict(attributes) if attributes else {}
    for key, value in obj.items():
        if key in _KNOWN_FIELDS or value is None or key in folded:
            continue
        folded[key] = value if type(value) is str else _encode_attribute(value)
    if not folded and attributes is None:
        return None
    return folded


def _format_us(us: int) -> str:
    return (_EPOCH + timedelta(microseconds=us)).isoformat().replace("+00:00", "Z")


def parse_record(
    line: bytes,
    *,
    source_file: str,
    line_number: int,
    limits: LandingConfig,
    now_ms: int,
) -> ParsedEvent | Rejection:
    """Return the valid event one landing line holds, or the :class:`Rejection` that quarantines it.

    Args:
        line: the raw record, without its line terminator. Blank lines are not records: callers skip
            them (:func:`is_blank`); passed here, one is ``invalid_json``.
        source_file: the file the line came from (kept on the result for lineage).
        line_number: 1-based line number inside the (decompressed) file.
        limits: the format's limits (sizes, the earliest and latest acceptable ``ts``).
        now_ms: the reader's clock in epoch milliseconds; ``ts`` may lie up to
            ``limits.max_future_seconds`` after it.

    Raises:
        ConfigError: ``limits.earliest_ts`` is not an RFC 3339 timestamp.

    Example::

        got = parse_record(b'[1,2]', source_file="f", line_number=3, limits=LandingConfig(), now_ms=0)
        assert isinstance(got, Rejection) and got.reason == "not_an_object: an array, expected an object"
    """
    return RecordParser(limits, now_ms).parse(line, source_file, line_number)
