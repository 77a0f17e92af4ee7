"""Tests of lakeshard.landing.parse: one line in, one event or one rejection with the right reason out."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeshard.config import LandingConfig
from lakeshard.errors import ConfigError
from lakeshard.landing import reasons
from lakeshard.landing.parse import (
    UNPARSED_OVERSIZE_FACTOR,
    ParsedEvent,
    RecordParser,
    Rejection,
    is_blank,
    parse_record,
    parse_rfc3339_us,
)
from lakeshard.synth.malformed import base_record, malformed_line

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
LIMITS = LandingConfig()
NOW_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
TS_MS = NOW_MS - 3_600_000
EARLIEST_MS = 946_684_800_000  # 2000-01-01T00:00:00Z
PRECEDENCE = (
    reasons.INVALID_JSON,
    reasons.NOT_AN_OBJECT,
    reasons.OVERSIZE,
    reasons.MISSING_FIELD,
    reasons.BAD_TYPE,
    reasons.EMPTY_FIELD,
    reasons.TOO_LONG,
    reasons.BAD_TIMESTAMP,
    reasons.ABSURD_TIMESTAMP,
)


def record(**fields: Any) -> dict[str, Any]:
    """Return a valid record with ``fields`` replaced (a value of ``...`` deletes the field)."""
    out: dict[str, Any] = {"tenant_id": "tenant-1", "event_id": "evt-1", "ts": TS_MS, "service": "api"}
    for key, value in fields.items():
        if value is ...:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def line_of(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def parse(line: bytes | dict[str, Any] | list[Any], *, now_ms: int = NOW_MS) -> ParsedEvent | Rejection:
    raw = line if isinstance(line, bytes) else line_of(line)
    return parse_record(raw, source_file="file:///landing/a.jsonl", line_number=7, limits=LIMITS, now_ms=now_ms)


def accepted(line: bytes | dict[str, Any]) -> ParsedEvent:
    got = parse(line)
    assert isinstance(got, ParsedEvent), got
    return got


def rejected(line: bytes | dict[str, Any] | list[Any]) -> Rejection:
    got = parse(line)
    assert isinstance(got, Rejection), got
    assert got.category in reasons.CATEGORIES
    assert got.reason.startswith(got.category + ": ") and len(got.reason) > len(got.category) + 2
    return got


def ms_of(dt: datetime) -> int:
    return (dt - EPOCH) // timedelta(milliseconds=1)


# --------------------------------------------------------------------------- valid records


def test_a_minimal_record_becomes_an_event_with_lineage_and_size() -> None:
    line = b'{"tenant_id":"t1","event_id":"e1","ts":1767225600123}'
    got = accepted(line)
    assert (got.tenant_id, got.event_id, got.ts_us) == ("t1", "e1", 1_767_225_600_123_000)
    assert got.ts == datetime(2026, 1, 1, 0, 0, 0, 123_000, tzinfo=UTC)
    assert (got.service, got.status, got.env, got.host, got.message, got.attributes) == (None,) * 6
    assert (got.size_bytes, got.source_file, got.line_number) == (len(line), "file:///landing/a.jsonl", 7)


def test_rfc3339_timestamps_are_normalised_to_utc_and_kept_at_microseconds() -> None:
    assert accepted(record(ts="2026-01-01T02:00:00.123456789+02:00")).ts_us == 1_767_225_600_123_456
    assert accepted(record(ts="2025-12-31T18:30:00-05:30")).ts_us == 1_767_225_600_000_000
    assert accepted(record(ts="2026-01-01t00:00:00.5z")).ts_us == 1_767_225_600_500_000
    assert accepted(record(ts="2026-01-01T00:00:00-00:00")).ts_us == 1_767_225_600_000_000


def test_optional_fields_attributes_and_unknown_fields() -> None:
    got = accepted(
        record(
            service="api",
            status="info",
            env="prod",
            host="web-01",
            message="naïve café 東京 ✓",
            attributes={"http.method": "GET", "dropped": None, "region": "explicit wins"},
            region="eu-1",  # unknown and already an attribute: the explicit attribute wins
            retries=3,
            nested={"a": [1, "é"]},
            ok=True,
            gone=None,
        )
    )
    assert (got.service, got.status, got.env, got.host) == ("api", "info", "prod", "web-01")
    assert got.message == "naïve café 東京 ✓"
    assert got.attributes == {
        "http.method": "GET",
        "region": "explicit wins",
        "retries": "3",
        "nested": '{"a":[1,"é"]}',
        "ok": "true",
    }


def test_null_means_absent() -> None:
    got = accepted(record(service=None, status=None, message=None, attributes=None))
    assert (got.service, got.status, got.message, got.attributes) == (None, None, None, None)
    assert accepted(record(attributes={})).attributes == {}
    assert accepted(record(attributes={"a": None})).attributes == {}
    assert accepted(record(extra="x")).attributes == {"extra": "x"}


def test_duplicate_keys_keep_the_last_value() -> None:
    assert accepted(b'{"tenant_id":"a","tenant_id":"b","event_id":"e","ts":1767225600000}').tenant_id == "b"


def test_limits_are_inclusive() -> None:
    assert accepted(record(tenant_id="t" * 128, event_id="e" * 256)).tenant_id == "t" * 128
    assert accepted(record(tenant_id="é" * 128)).tenant_id == "é" * 128  # characters, not bytes
    assert accepted(record(ts=EARLIEST_MS)).ts_us == EARLIEST_MS * 1000
    assert accepted(record(ts="2000-01-01T00:00:00Z")).ts_us == EARLIEST_MS * 1000
    assert accepted(record(ts=NOW_MS + 86_400_000)).ts_us == (NOW_MS + 86_400_000) * 1000
    assert rejected(record(ts=EARLIEST_MS - 1)).category == reasons.ABSURD_TIMESTAMP
    assert rejected(record(ts="1999-12-31T23:59:59.999999Z")).category == reasons.ABSURD_TIMESTAMP
    assert rejected(record(ts=NOW_MS + 86_400_001)).category == reasons.ABSURD_TIMESTAMP


def test_a_record_of_exactly_the_limit_is_not_oversize() -> None:
    base = line_of(record(message=""))
    exact = line_of(record(message="x" * (LIMITS.max_record_bytes - len(base))))
    assert len(exact) == LIMITS.max_record_bytes
    assert accepted(exact).size_bytes == LIMITS.max_record_bytes
    over = line_of(record(message="x" * (LIMITS.max_record_bytes - len(base) + 1)))
    assert rejected(over).reason == f"oversize: record is {len(over)} bytes, limit is {LIMITS.max_record_bytes}"


def test_is_blank() -> None:
    assert is_blank(b"") and is_blank(b"  \t\r")
    assert not is_blank(b" {} ") and not is_blank(b"x")


# --------------------------------------------------------------------------- every category


TRAPS: dict[str, list[bytes | dict[str, Any] | list[Any]]] = {
    reasons.INVALID_JSON: [
        b'{"tenant_id":"t","event_id":"e","ts":17672',
        b"level=error tenant=t msg=boom",
        b'{"tenant_id":"t\xff","event_id":"e","ts":1767225600000}',  # not UTF-8
        b'\xef\xbb\xbf{"tenant_id":"t","event_id":"e","ts":1767225600000}',  # BOM inside a line
        b'{"tenant_id":"t","event_id":"e","ts":NaN}',
        b'{"tenant_id":"t","event_id":"e","ts":1767225600000} {}',
        b"{'tenant_id':'t'}",
        b'{"tenant_id":"t","event_id":"e","ts":1767225600000,}',
        b"",
    ],
    reasons.NOT_AN_OBJECT: [b"[1,2]", b"[]", b"42", b"null", b'"just a string"', b"true", [record()]],
    reasons.OVERSIZE: [record(message="x" * LIMITS.max_record_bytes)],
    reasons.MISSING_FIELD: [record(tenant_id=...), record(event_id=None), record(ts=...), {}],
    reasons.BAD_TYPE: [
        record(event_id=42),
        record(tenant_id=["tenant-1"]),
        record(tenant_id={"id": "tenant-1"}),
        record(ts=True),
        record(ts=False),
        record(ts=1767225600000.0),
        record(ts=1.7672256e12),
        record(ts=[TS_MS]),
        record(ts={"ms": TS_MS}),
        record(attributes=["http.method", "GET"]),
        record(attributes="http.method=GET"),
        record(attributes={"http.status_code": 200}),
        record(service=5),
        record(message={"text": "hi"}),
        record(host=False),
    ],
    reasons.EMPTY_FIELD: [record(tenant_id=""), record(event_id="")],
    reasons.TOO_LONG: [record(tenant_id="t" * 129), record(event_id="e" * 257)],
    reasons.BAD_TIMESTAMP: [
        record(ts=ts)
        for ts in (
            "yesterday",
            "2026-13-45T25:61:00Z",
            "2026-01-01T99:99:99Z",
            "01/02/2026 10:00:00",
            "1767225600000",  # digits in a string are not epoch milliseconds
            "2026-01-01",
            "2026-01-01T00:00:00",  # no offset: which instant is it?
            "2026-01-01 00:00:00Z",
            "2025-12-31T23:59:60Z",
            "2026-01-01T24:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-01-01T00:00:00.1234567890Z",
            "2026-01-01T00:00:00.Z",
            "2026-01-01T00:00:00+24:00",
            "2026-01-01T00:00:00+05:60",
            "2026-01-01T00:00:00+0500",
            "٢٠٢٦-01-01T00:00:00Z",
            "",
        )
    ],
    reasons.ABSURD_TIMESTAMP: [
        record(ts=ts)
        for ts in (
            "1970-01-01T00:00:00Z",
            "1985-06-15T12:00:00+02:00",
            "2999-12-31T23:59:59Z",
            0,
            -86_400_000,
            1_767_225_600,  # epoch seconds sent as milliseconds
            32_503_680_000_000,
            10**40,
        )
    ],
}


def test_every_category_has_examples() -> None:
    assert set(TRAPS) == set(reasons.CATEGORIES)


@pytest.mark.parametrize(
    ("category", "line"), [(c, line) for c, lines in TRAPS.items() for line in lines], ids=lambda v: str(v)[:40]
)
def test_trap_is_quarantined_in_its_category(category: str, line: bytes | dict[str, Any] | list[Any]) -> None:
    got = rejected(line)
    assert got.category == category, got.reason
    assert got.raw == (line if isinstance(line, bytes) else line_of(line))
    assert (got.source_file, got.line_number, got.size_bytes) == ("file:///landing/a.jsonl", 7, len(got.raw))


def test_reasons_name_the_problem() -> None:
    assert rejected(record(tenant_id=...)).reason == "missing_field: tenant_id"
    assert rejected(record(ts=None, event_id=...)).reason == "missing_field: event_id, ts (null)"
    assert rejected(record(event_id=42)).reason == "bad_type: event_id is a number, expected a string"
    assert rejected(record(ts=True)).reason.startswith("bad_type: ts is a boolean, expected")
    assert rejected(record(ts=1.5)).reason.startswith("bad_type: ts is a non-integer number")
    assert rejected(record(attributes={"k": 1})).reason == "bad_type: attributes.k is a number, expected a string"
    assert rejected(record(event_id="")).reason == "empty_field: event_id is empty"
    assert rejected(record(event_id="e" * 300)).reason == "too_long: event_id has 300 characters, limit is 256"
    assert rejected(record(ts="soon")).reason == 'bad_timestamp: ts "soon" is not an RFC 3339 timestamp'
    assert rejected(record(ts="2016-12-31T23:59:60Z")).reason == (
        'bad_timestamp: ts "2016-12-31T23:59:60Z" is a leap second, which lakeshard does not take '
        "(POSIX time has no second 60)"
    )
    leap = "is a leap second, which lakeshard does not take (POSIX time has no second 60)"
    assert rejected(record(ts="2016-12-31T23:59:60.5+01:00")).reason.endswith(leap)
    assert rejected(record(ts="2016-02-30T23:59:60Z")).reason.endswith("is not an RFC 3339 timestamp")
    assert rejected(record(ts=0)).reason == "absurd_timestamp: ts 0 is before 2000-01-01T00:00:00Z"
    assert rejected(b"[1]").reason == "not_an_object: an array, expected an object"
    assert rejected(b"\xff").reason.startswith("invalid_json: not UTF-8")


@pytest.mark.parametrize("category", reasons.CATEGORIES)
def test_the_generators_malformed_records_get_the_intended_category(category: str) -> None:
    rng = np.random.default_rng(sorted(reasons.CATEGORIES).index(category))
    for _ in range(5 if category == reasons.OVERSIZE else 150):
        line = malformed_line(rng, category, "tenant-00003", TS_MS, LIMITS.max_record_bytes).encode()
        got = rejected(line)
        assert got.category == category, (got.reason, line[:300])


def test_the_generators_base_records_are_valid() -> None:
    rng = np.random.default_rng(5)
    for _ in range(200):
        rec = base_record(rng, "tenant-00003", TS_MS)
        got = accepted(line_of(rec))
        assert (got.tenant_id, got.event_id, got.ts_us) == ("tenant-00003", rec["event_id"], TS_MS * 1000)


# --------------------------------------------------------------------------- precedence


@pytest.mark.parametrize(
    ("line", "category"),
    [
        # invalid_json / not_an_object beat oversize: a big broken line is reported as broken.
        (line_of(record(message="x" * LIMITS.max_record_bytes))[:-1], reasons.INVALID_JSON),
        (line_of([record(message="x" * LIMITS.max_record_bytes)]), reasons.NOT_AN_OBJECT),
        (line_of(record(ts=..., message="x" * LIMITS.max_record_bytes)), reasons.OVERSIZE),
        (line_of(record(ts=..., event_id=5)), reasons.MISSING_FIELD),
        (line_of(record(tenant_id="", service=5)), reasons.BAD_TYPE),
        (line_of(record(tenant_id="", event_id="e" * 300)), reasons.EMPTY_FIELD),
        (line_of(record(event_id="e" * 300, ts="soon")), reasons.TOO_LONG),
        (line_of(record(attributes=[1], ts="soon")), reasons.BAD_TYPE),
        (line_of(record(tenant_id="", ts=0)), reasons.EMPTY_FIELD),
    ],
)
def test_precedence_examples(line: bytes, category: str) -> None:
    assert rejected(line).category == category


def test_a_huge_line_is_oversize_without_being_parsed() -> None:
    # Beyond UNPARSED_OVERSIZE_FACTOR x the limit the parse is skipped: the documented exception.
    huge = b"[" + b"1," * (LIMITS.max_record_bytes * UNPARSED_OVERSIZE_FACTOR // 2) + b"x"
    assert rejected(huge).category == reasons.OVERSIZE


# Per field, the values that make one defect; a record draws one option per field, so the expected
# category is the highest-precedence defect drawn.
FIELD_DEFECTS: dict[str, list[tuple[str | None, Any]]] = {
    "tenant_id": [(None, "tenant-1"), (reasons.MISSING_FIELD, ...), (reasons.BAD_TYPE, ["t"]),
                  (reasons.EMPTY_FIELD, ""), (reasons.TOO_LONG, "t" * 200)],
    "event_id": [(None, "evt-1"), (reasons.MISSING_FIELD, None), (reasons.BAD_TYPE, 7),
                 (reasons.EMPTY_FIELD, ""), (reasons.TOO_LONG, "e" * 300)],
    "ts": [(None, TS_MS), (reasons.MISSING_FIELD, ...), (reasons.BAD_TYPE, True),
           (reasons.BAD_TIMESTAMP, "2026-01-01"), (reasons.ABSURD_TIMESTAMP, "1999-01-01T00:00:00Z")],
    "service": [(None, "api"), (reasons.BAD_TYPE, 1)],
    "attributes": [(None, {"a": "b"}), (reasons.BAD_TYPE, {"a": 1})],
    "message": [(None, "hi"), (reasons.OVERSIZE, "x" * (LIMITS.max_record_bytes + 1))],
}  # fmt: skip


@given(
    choices=st.fixed_dictionaries({k: st.sampled_from(v) for k, v in FIELD_DEFECTS.items()}),
    wrap=st.sampled_from([None, reasons.NOT_AN_OBJECT, reasons.INVALID_JSON]),
)
@settings(max_examples=300)
def test_the_highest_precedence_defect_wins(choices: dict[str, tuple[str | None, Any]], wrap: str | None) -> None:
    rec = record(**{k: v for k, (_, v) in choices.items()})
    line = line_of(rec)
    if wrap == reasons.NOT_AN_OBJECT:
        line = b"[" + line + b"]"
    elif wrap == reasons.INVALID_JSON:
        line = line[:-1]
    defects = [c for c, _ in choices.values() if c is not None] + ([wrap] if wrap else [])
    got = parse(line)
    if not defects:
        assert isinstance(got, ParsedEvent)
    else:
        assert isinstance(got, Rejection)
        assert got.category == min(defects, key=PRECEDENCE.index), got.reason


# --------------------------------------------------------------------------- timestamps


OFFSET_MINUTES = st.integers(min_value=-(23 * 60 + 59), max_value=23 * 60 + 59)


@given(
    instant=st.datetimes(min_value=datetime(1900, 1, 2), max_value=datetime(2199, 12, 30), timezones=st.just(UTC)),
    offset=OFFSET_MINUTES,
    digits=st.integers(min_value=0, max_value=9),
    extra=st.integers(min_value=0, max_value=999),
    utc_as_z=st.booleans(),
    lower=st.booleans(),
)
def test_rfc3339_with_any_offset_is_the_same_instant_as_pythons_datetime(
    instant: datetime, offset: int, digits: int, extra: int, utc_as_z: bool, lower: bool
) -> None:
    tz = timezone(timedelta(minutes=offset))
    local = instant.astimezone(tz)
    frac = f"{local.microsecond:06d}{extra:03d}"[:digits]
    if offset == 0 and utc_as_z:
        suffix = "Z"
    else:
        suffix = f"{'+' if offset >= 0 else '-'}{abs(offset) // 60:02d}:{abs(offset) % 60:02d}"
    text = local.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if digits else "") + suffix
    if lower:
        text = text.lower()
    # The instant Python's datetime gives, truncated to the precision the text carries.
    kept = int((frac + "000000")[:6]) if digits else 0
    expected = local.replace(microsecond=kept)
    assert parse_rfc3339_us(text) == (expected - EPOCH) // timedelta(microseconds=1)
    if digits <= 6 and not lower:
        assert parse_rfc3339_us(text) == (datetime.fromisoformat(text) - EPOCH) // timedelta(microseconds=1)


@given(st.text(max_size=40))
def test_parse_rfc3339_never_raises(text: str) -> None:
    got = parse_rfc3339_us(text)
    if got is not None:
        assert isinstance(got, int)


# --------------------------------------------------------------------------- round trip of valid records


IDS = st.text(st.characters(codec="utf-8"), min_size=1, max_size=40)  # utf-8: no lone surrogates
OPTIONAL = st.one_of(st.none(), st.text(max_size=30))


@given(
    tenant_id=IDS,
    event_id=IDS,
    ts_ms=st.integers(min_value=EARLIEST_MS, max_value=NOW_MS + 86_400_000),
    as_string=st.booleans(),
    optional=st.fixed_dictionaries({k: OPTIONAL for k in ("service", "status", "env", "host", "message")}),
    attributes=st.one_of(st.none(), st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=4)),
    ascii_only=st.booleans(),
)
@settings(max_examples=200)
def test_valid_records_round_trip(
    tenant_id: str,
    event_id: str,
    ts_ms: int,
    as_string: bool,
    optional: dict[str, str | None],
    attributes: dict[str, str] | None,
    ascii_only: bool,
) -> None:
    ts: int | str = ts_ms
    if as_string:
        ts = (EPOCH + timedelta(milliseconds=ts_ms)).isoformat(timespec="milliseconds")
    rec = {"tenant_id": tenant_id, "event_id": event_id, "ts": ts, **optional, "attributes": attributes}
    line = json.dumps(rec, ensure_ascii=ascii_only).encode()
    got = accepted(line)
    assert (got.tenant_id, got.event_id, got.ts_us) == (tenant_id, event_id, ts_ms * 1000)
    names = ("service", "status", "env", "host", "message")
    assert (got.service, got.status, got.env, got.host, got.message) == tuple(optional[k] for k in names)
    assert got.attributes == attributes
    assert got.size_bytes == len(line)


@given(st.binary(max_size=200))
@settings(max_examples=300)
def test_any_bytes_give_an_event_or_a_categorised_rejection(line: bytes) -> None:
    got = parse(line)
    if isinstance(got, Rejection):
        assert got.category in reasons.CATEGORIES and got.raw == line


# --------------------------------------------------------------------------- configuration


def test_a_bad_earliest_ts_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="earliest_ts"):
        RecordParser(LandingConfig(earliest_ts="2000-01-01"), NOW_MS)


def test_limits_come_from_the_config() -> None:
    limits = LandingConfig(max_record_bytes=100, max_tenant_id_chars=3, max_event_id_chars=4,
                           earliest_ts="2025-01-01T00:00:00+01:00", max_future_seconds=0)  # fmt: skip
    parser = RecordParser(limits, NOW_MS)

    def category(rec: dict[str, Any]) -> str | None:
        got = parser.parse(line_of(rec), "f", 1)
        return got.category if isinstance(got, Rejection) else None

    assert category(record(tenant_id="abc", event_id="e")) is None
    assert category(record(tenant_id="abcd", event_id="e")) == reasons.TOO_LONG
    assert category(record(tenant_id="t", event_id="e" * 5)) == reasons.TOO_LONG
    assert category(record(tenant_id="t", event_id="e", message="m" * 100)) == reasons.OVERSIZE
    assert category(record(tenant_id="t", event_id="e", ts="2024-12-31T23:00:00Z")) is None
    assert category(record(tenant_id="t", event_id="e", ts="2024-12-31T22:59:59Z")) == reasons.ABSURD_TIMESTAMP
    assert category(record(tenant_id="t", event_id="e", ts=NOW_MS)) is None
    assert category(record(tenant_id="t", event_id="e", ts=NOW_MS + 1)) == reasons.ABSURD_TIMESTAMP


# --------------------------------------------------------------------------- what validation accepts converts


@pytest.mark.parametrize(
    "attributes",
    [{"x": None, "y": 1}, {"x": None, "y": None, "z": [1]}, {"a": "s", "x": None, "y": {"k": "v"}}],
)
def test_an_attribute_after_a_null_is_still_type_checked(attributes: dict[str, Any]) -> None:
    got = rejected(record(attributes=attributes))
    assert got.category == reasons.BAD_TYPE and "attributes." in got.reason


def test_nulls_among_string_attributes_are_dropped() -> None:
    got = accepted(record(attributes={"a": "1", "x": None, "b": "2", "y": None}))
    assert got.attributes == {"a": "1", "b": "2"}


LONE_SURROGATES = [
    b'{"tenant_id":"t\\ud800","event_id":"e","ts":%d}',
    b'{"tenant_id":"t","event_id":"\\uDFFF","ts":%d}',
    b'{"tenant_id":"t","event_id":"e","ts":%d,"message":"a\\udbff"}',
    b'{"tenant_id":"t","event_id":"e","ts":%d,"attributes":{"k\\udc00":"v"}}',
    b'{"tenant_id":"t","event_id":"e","ts":%d,"attributes":{"k":"\\ud83d"}}',
    b'{"tenant_id":"t","event_id":"e","ts":%d,"extra":{"deep":["\\ude00"]}}',
    b'{"tenant_id":"t","event_id":"e","ts":%d,"\\ud800unknown":"v"}',
    b'{"tenant_id":"t","event_id":"e","ts":%d,"message":"\\ude00\\ud83d"}',  # a pair in the wrong order
]


@pytest.mark.parametrize("template", LONE_SURROGATES)
def test_a_lone_surrogate_escape_anywhere_is_invalid_json(template: bytes) -> None:
    got = rejected(template % TS_MS)
    assert got.category == reasons.INVALID_JSON and "surrogate" in got.reason


def test_escaped_surrogate_pairs_and_escaped_backslashes_are_fine() -> None:
    got = accepted(b'{"tenant_id":"t","event_id":"\\ud83d\\ude80\\\\ud800","ts":%d}' % TS_MS)
    assert got.event_id == "\U0001f680\\ud800"
