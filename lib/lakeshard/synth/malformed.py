"""Malformed landing records, one known quarantine category each (:mod:`lakeshard.landing.reasons`).

Every line is built so that exactly one category applies under the rule order
``invalid_json > not_an_object > oversize > missing_field > bad_type > empty_field > too_long >
bad_timestamp > absurd_timestamp``: apart from its one defect, a record is valid. Variants that a
lenient parser could read either way (single quotes, trailing commas, NaN, floats as ``ts``, digit
strings as ``ts``, date-only strings, optional fields of the wrong type) are deliberately not produced.
No line contains a raw newline.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from lakeshard.landing import (
    ABSURD_TIMESTAMP,
    BAD_TIMESTAMP,
    BAD_TYPE,
    EMPTY_FIELD,
    INVALID_JSON,
    MISSING_FIELD,
    NOT_AN_OBJECT,
    OVERSIZE,
    TOO_LONG,
)
from lakeshard.synth.timestamps import format_rfc3339
from lakeshard.synth.vocabulary import ENVS, SERVICES, STATUSES
from lakeshard.tables import EVENT_KEY

__all__ = ["BAD_WEIGHTS", "arrow_refused_line", "base_record", "malformed_line"]

# Share of each category among malformed records; oversize records are large, so they stay rare.
BAD_WEIGHTS: dict[str, float] = {
    INVALID_JSON: 0.25,
    NOT_AN_OBJECT: 0.08,
    OVERSIZE: 0.004,
    MISSING_FIELD: 0.16,
    BAD_TYPE: 0.15,
    EMPTY_FIELD: 0.08,
    TOO_LONG: 0.07,
    BAD_TIMESTAMP: 0.106,
    ABSURD_TIMESTAMP: 0.10,
}

_BAD_TIMESTAMPS = (
    "yesterday",
    "soon",
    "N/A",
    "not-a-timestamp",
    "2026-13-45T25:61:00Z",
    "2026-00-10T10:00:00Z",
    "2026-01-01T99:99:99Z",
    "01/02/2026 10:00:00",
    "2026/01/01 10:00:00",
)

_ABSURD_TIMESTAMPS: tuple[str | int, ...] = (
    "1970-01-01T00:00:00Z",
    "1999-12-31T23:59:59.999Z",
    "1985-06-15T12:00:00+02:00",
    "2999-12-31T23:59:59Z",
    "2999-01-01T00:00:00.000-05:00",
    0,
    1000,
    -86_400_000,
    1_767_225_600,  # epoch *seconds* sent as milliseconds: a producer bug that lands in January 1970
    32_503_680_000_000,  # 3000-01-01
)

_NOT_OBJECTS = ("[1,2]", "[]", "42", "null", '"just a string"', "true")


def _pick(rng: np.random.Generator, options: tuple[Any, ...]) -> Any:
    return options[int(rng.integers(0, len(options)))]


def base_record(rng: np.random.Generator, tenant_id: str, ts_ms: int) -> dict[str, Any]:
    """Return a valid record (as a dict) for ``tenant_id`` at ``ts_ms``; a malformed line starts from it."""
    ts: str | int = ts_ms if rng.random() < 0.4 else format_rfc3339(ts_ms, None, 3)
    return {
        "tenant_id": tenant_id,
        "event_id": rng.bytes(16).hex(),
        "ts": ts,
        "service": _pick(rng, SERVICES),
        "status": _pick(rng, STATUSES),
        "env": _pick(rng, ENVS),
        "host": f"host-{int(rng.integers(0, 100)):02d}",
        "message": f"request handled in {int(rng.integers(1, 5000))} ms",
    }


def _dumps(record: Any) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def _invalid_json(rng: np.random.Generator, rec: dict[str, Any], _limit: int) -> str:
    if rng.random() < 0.15:
        # A plain-text (logfmt) line where JSON was expected.
        return f'level=error tenant={rec["tenant_id"]} msg="connection reset" ts={rec["ts"]}'
    text = _dumps(rec)
    # Cut before the closing brace: the outer object stays open, so no JSON parser can accept it.
    cut = int(rng.integers(max(8, len(text) // 4), len(text) - 1))
    return text[:cut]


def _not_an_object(rng: np.random.Generator, rec: dict[str, Any], _limit: int) -> str:
    if rng.random() < 0.2:
        return _dumps([rec])  # a JSON array holding a record is still not an object
    return str(_pick(rng, _NOT_OBJECTS))


def _oversize(rng: np.random.Generator, rec: dict[str, Any], limit: int) -> str:
    rec["message"] = ""
    room = limit - len(_dumps(rec).encode("utf-8"))
    target = room + int(rng.integers(1, 4097))  # strictly larger than the limit, by up to 4 KiB
    filler = "0123456789abcdefghijklmnopqrstuvwxyz "
    rec["message"] = (filler * (target // len(filler) + 1))[:target]
    return _dumps(rec)


def _missing_field(rng: np.random.Generator, rec: dict[str, Any], _limit: int) -> str:
    field = _pick(rng, EVENT_KEY)  # a required field
    if rng.random() < 0.25:
        rec[field] = None  # null counts as missing
    else:
        del rec[field]
    return _dumps(rec)


def _bad_type(rng: np.random.Generator, rec: dict[str, Any], _limit: int) -> str:
    kind = int(rng.integers(0, 7))
    if kind == 0:
        rec["event_id"] = int(rng.integers(1, 10**12))
    elif kind == 1:
        rec["tenant_id"] = [rec["tenant_id"]]
    elif kind == 2:
        rec["tenant_id"] = {"id": rec["tenant_id"]}
    elif kind == 3:
        rec["ts"] = bool(rng.random() < 0.5)  # a bool is not an integer here, whatever Python says
    elif kind == 4:
        rec["ts"] = [rec["ts"]]
    elif kind == 5:
        rec["attributes"] = ["http.method", "GET"]
    else:
        rec["attributes"] = "http.method=GET"
    return _dumps(rec)


def _empty_field(rng: np.random.Generator, rec: dict[str, Any], _limit: int) -> str:
    rec[_pick(rng, EVENT_KEY[:2])] = ""  # a string field of the key
    return _dumps(rec)


def _too_long(rng: np.random.Generator, rec: dict[str, Any], _limit: int) -> str:
    if rng.random() < 0.7:
        rec["event_id"] = "evt-" + rng.bytes(int(rng.integers(127, 400))).hex()  # 258..802 chars
    else:
        rec["tenant_id"] = rec["tenant_id"] + "-" + "x" * int(rng.integers(129, 300))
    return _dumps(rec)


def _bad_timestamp(rng: np.random.Generator, rec: dict[str, Any], _limit: int) -> str:
    rec["ts"] = _pick(rng, _BAD_TIMESTAMPS)
    return _dumps(rec)


def _absurd_timestamp(rng: np.random.Generator, rec: dict[str, Any], _limit: int) -> str:
    rec["ts"] = _pick(rng, _ABSURD_TIMESTAMPS)
    return _dumps(rec)


_BUILDERS: dict[str, Callable[[np.random.Generator, dict[str, Any], int], str]] = {
    INVALID_JSON: _invalid_json,
    NOT_AN_OBJECT: _not_an_object,
    OVERSIZE: _oversize,
    MISSING_FIELD: _missing_field,
    BAD_TYPE: _bad_type,
    EMPTY_FIELD: _empty_field,
    TOO_LONG: _too_long,
    BAD_TIMESTAMP: _bad_timestamp,
    ABSURD_TIMESTAMP: _absurd_timestamp,
}


def malformed_line(rng: np.random.Generator, category: str, tenant_id: str, ts_ms: int, max_record_bytes: int) -> str:
    """Return one malformed JSON line (no newline) of quarantine ``category``.

    Raises:
        KeyError: ``category`` is not one of :data:`lakeshard.landing.reasons.CATEGORIES`.
    """
    return _BUILDERS[category](rng, base_record(rng, tenant_id, ts_ms), max_record_bytes)


def arrow_refused_line(rng: np.random.Generator, tenant_id: str, ts_ms: int) -> str:
    """Return a line of a valid record with one thing a strict JSON reader (Arrow's) refuses and no type screen
    catches: a trailing comma, a duplicate key, ``NaN``, an integer beyond 64 bits or a raw control character in
    a string. Not one quarantine category: the exact rules decide it (a duplicate key or a big integer in an
    unknown field leaves a valid event; a trailing comma, ``NaN`` or a raw control character is ``invalid_json``)."""
    line = _dumps(base_record(rng, tenant_id, ts_ms))[:-1]
    ending: str = _pick(rng, (",}", f', "tenant_id": {json.dumps(tenant_id)}}}', ', "score": NaN}',
                              ', "big": 123456789012345678901234567890}', ', "note": "a\x01b"}'))
    return line + ending
