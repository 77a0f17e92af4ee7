"""Differential tests: the vectorised landing parse gives exactly the rows and reasons of the per-record rules.

The reference is computed here, independently of the reader: the file is split on ``\\n`` (one ``\\r`` before
it dropped, a BOM at the very start dropped, blank lines skipped) and every line goes through
:meth:`lakeshard.landing.parse.RecordParser.check`. The reader under test parses the same files through
Arrow's JSON reader and sends only the lines it cannot vouch for to those rules. Both must agree on every line:
the same event values (attributes compared as mappings) or the same quarantine reason.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakeshard.config import LandingConfig
from lakeshard.landing import arrow_json, list_landing_files, parse_landing_arrow, reasons
from lakeshard.landing.arrow_json import _PART_BYTES, BlockParser, split_lines
from lakeshard.landing.parse import RecordParser
from lakeshard.synth.malformed import BAD_WEIGHTS, arrow_refused_line, base_record, malformed_line

NOW_MS = int(time.time() * 1000)
BOM = b"\xef\xbb\xbf"
LIMITS = LandingConfig(max_record_bytes=2048, max_file_bytes=1 << 22)
SURROGATES = ["\\ud800", "\\uDFFF", "\\ud83d\\ude80", "\\u0000", "\\u00e9", "\\ufeff"]
MARK = "\x07"  # json.dumps writes \u0007; replaced by one of SURROGATES in the text
CHECKED = {"lines": 0, "accepted": 0}

Row = tuple[Any, ...]


def reference(files: dict[str, bytes], root: Path) -> tuple[set[Row], set[Row]]:
    """Return (events, rejections) of the per-record rules, keyed by file and line number."""
    parser = RecordParser(LIMITS, NOW_MS)
    events: set[Row] = set()
    rejected: set[Row] = set()
    for name, data in files.items():
        uri = (root / name).as_uri()
        data = data.removeprefix(BOM)
        pieces = data.split(b"\n")
        if data.endswith(b"\n"):
            pieces.pop()
        for number, line in enumerate(pieces, 1):
            line = line.removesuffix(b"\r")
            if not line.strip(b" \t\r"):
                continue
            got = parser.check(line)
            if isinstance(got, str):
                rejected.add((uri, number, got))
            else:
                tenant_id, event_id, ts_us, service, status, env, host, message, attributes = got
                attrs = None if attributes is None else tuple(sorted(attributes.items()))
                events.add((uri, number, tenant_id, event_id, ts_us, service, status, env, host, message, attrs,
                            len(line)))
    return events, rejected


def vectorised(root: Path) -> tuple[set[Row], set[Row]]:
    """Return (events, rejections) of the reader's parse, in the reference's shape."""
    events, quarantine = parse_landing_arrow(list_landing_files(root), limits=LIMITS, now_ms=NOW_MS)
    ts_us = events.column("ts").cast(pa.int64()).to_pylist()
    got: set[Row] = set()
    for row, us in zip(events.to_pylist(), ts_us, strict=True):
        attrs = None if row["attributes"] is None else tuple(sorted(row["attributes"]))
        got.add((row["source_file"], row["line_number"], row["tenant_id"], row["event_id"], us, row["service"],
                 row["status"], row["env"], row["host"], row["message"], attrs, row["size_bytes"]))
    rejected = {(r["source_file"], r["line_number"], r["reason"]) for r in quarantine.to_pylist()}
    assert len(got) == events.num_rows and len(rejected) == quarantine.num_rows  # one row per line
    return got, rejected


def assert_same(files: dict[str, bytes]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "landing"
        root.mkdir()
        for name, data in files.items():
            (root / name).write_bytes(data)
        want_events, want_rejected = reference(files, root)
        got_events, got_rejected = vectorised(root)
    assert got_rejected == want_rejected
    assert got_events == want_events
    CHECKED["lines"] += len(want_events) + len(want_rejected)
    blocks = BlockParser(RecordParser(LIMITS, NOW_MS))
    for data in files.values():  # how many lines Arrow's side accepted (the rest went to the exact rules)
        data = data.removeprefix(BOM)
        starts, ends = split_lines(data)
        got = blocks.parse(data, starts, ends, np.arange(1, len(starts) + 1))
        CHECKED["accepted"] += len(got.columns.get("tenant_id", []))


text = st.text(alphabet=st.characters(codec=None, exclude_categories=["Cs"]) | st.just(MARK), max_size=10)
json_scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-(10**30), max_value=10**30)
                | st.floats() | text | st.sampled_from(["2026-01-01T00:00:00Z", "2026-01-01", "1.5", "12"]))
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(text, inner, max_size=3), max_leaves=6)
timestamps = (
    st.integers(min_value=NOW_MS - 3_600_000, max_value=NOW_MS + 3_600_000)
    | st.integers(min_value=NOW_MS - 3_600_000, max_value=NOW_MS).map(
        lambda ms: time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + ".5+00:00")
    | st.builds(lambda d, h, frac, off: f"2026-{d}T{h}:00:00{frac}{off}",
                st.sampled_from(["01-01", "02-29", "02-28", "12-31", "13-01", "00-10", "04-31"]),
                st.sampled_from(["00", "23", "24", "9"]), st.sampled_from(["", ".1", ".123456789", ".1234567891"]),
                st.sampled_from(["Z", "z", "+02:00", "-00:00", "+24:00", "+05:60", ""]))
    | st.sampled_from([str(NOW_MS), 2**63, -(2**63), 2**64, 0, -1, 1.0, True, NOW_MS * 1.0])
    | json_values
)


@st.composite
def records(draw: st.DrawFn) -> dict[str, Any]:
    """Return a record that is valid more often than not, with hostile values anywhere."""
    rec: dict[str, Any] = {"tenant_id": draw(st.sampled_from(["t1", "t2", "té😀\u0000", ""]) | text | json_values),
                           "event_id": draw(st.sampled_from(["e1", "x" * 300]) | text | json_values),
                           "ts": draw(timestamps)}
    for name in draw(st.lists(st.sampled_from(["service", "status", "env", "host", "message"]), max_size=5)):
        rec[name] = draw(text | st.none() | json_values)
    if draw(st.booleans()):
        rec["attributes"] = draw(st.dictionaries(text, text | st.none(), max_size=4) | json_values)
    rec.update(draw(st.dictionaries(st.sampled_from(["region", "sdk", "", "attributes.x", "n"]) | text,
                                    json_values, max_size=3)))
    for field in draw(st.lists(st.sampled_from(["tenant_id", "event_id", "ts"]), max_size=1)):
        rec.pop(field, None)
    return rec


plain = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=10)
clean_records = st.fixed_dictionaries(
    {"tenant_id": st.sampled_from(["t1", "t2", "té😀\u0000", 'a"b\\c']),
     "event_id": plain.filter(bool),
     "ts": st.integers(min_value=NOW_MS - 3_600_000, max_value=NOW_MS) | st.sampled_from(
         ["2026-01-01T00:00:00Z", "2026-02-28T23:59:59.999999999-05:30", "2024-02-29t12:00:00.1z"])},
    optional={"service": plain | st.none(), "message": plain | st.none(), "host": plain,
              "attributes": st.dictionaries(plain, plain | st.none(), max_size=4) | st.none(),
              "region": plain | st.integers(-(10**6), 10**6) | st.booleans() | st.none(),
              "sdk": plain, "": plain},
)


def encode(value: Any, ascii_only: bool, escape: str, spaced: bool) -> bytes:
    separators = (", ", ": ") if spaced else (",", ":")
    dumped = json.dumps(value, ensure_ascii=ascii_only, separators=separators)
    return dumped.replace("\\u0007", escape).encode("utf-8", "surrogatepass")


def duplicate_key(rec: dict[str, Any], key: str) -> bytes:
    body = json.dumps(rec)
    return (body[:-1] + f', "{key}": "dup"}}').encode() if len(body) > 2 else body.encode()


encoded = st.builds(encode, records(), st.booleans(), st.sampled_from(SURROGATES), st.booleans())
clean = st.builds(encode, clean_records, st.booleans(), st.just(""), st.booleans())
lines = st.one_of(
    clean,
    clean,
    clean,
    encoded,
    st.builds(encode, json_values, st.booleans(), st.sampled_from(SURROGATES), st.booleans()),
    st.binary(max_size=30),
    st.builds(lambda a, b: a + b, encoded, st.sampled_from([b"{}", b" x", b"\x00", b"\xff", b" {\"a\":1}", b","])),
    st.builds(lambda a, cut: a[:cut], encoded, st.integers(min_value=0, max_value=60)),
    st.builds(lambda a, b: a + b, st.sampled_from([BOM, b"\x00", b"\r", b" ", b"\t"]), encoded),
    st.builds(duplicate_key, records(), st.sampled_from(["tenant_id", "ts", "region", "attributes", "service"])),
    st.builds(lambda a: a.replace(b'"ts"', b'"t\\u0073"', 1), encoded),
    st.builds(lambda a: a.replace(b"1", b"NaN", 1).replace(b'"t1"', b"Infinity"), encoded),
    st.sampled_from([b"", b"  ", b"\t\r", b"null", b"[]", b"42", b'"s"', b"{}", b"{'a': 1}", b"{\"a\":1,}"]),
    st.builds(lambda seed, cat: malformed_line(np.random.default_rng(seed), cat, "t1", NOW_MS - 1000,
                                               LIMITS.max_record_bytes).encode("utf-8", "surrogatepass"),
              st.integers(min_value=0, max_value=2**32), st.sampled_from(reasons.CATEGORIES)),
).map(lambda line: line.replace(b"\n", b" "))


@st.composite
def zones(draw: st.DrawFn) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for i in range(2):
        body = draw(st.lists(lines, min_size=1, max_size=12))
        data = (BOM if draw(st.booleans()) else b"") + draw(st.sampled_from([b"\n", b"\r\n"])).join(body)
        # A file that starts with the gzip magic bytes is read as gzip (test_reader covers that), not as lines.
        data = b"\n" + data if data.startswith(b"\x1f\x8b") else data
        out[f"part-{i:03d}.jsonl"] = data + draw(st.sampled_from([b"", b"\n", b"\r\n"]))
    return out


@given(zones())
@settings(max_examples=450, derandomize=True, suppress_health_check=[HealthCheck.too_slow,
                                                                                  HealthCheck.data_too_large])
def _differential(files: dict[str, bytes]) -> None:
    assert_same(files)


def test_the_vectorised_parse_gives_the_rows_and_reasons_of_the_per_record_rules() -> None:
    CHECKED["lines"] = CHECKED["accepted"] = 0
    _differential()
    # The property ran over this many non-blank lines, and Arrow's side decided a good share of them.
    assert CHECKED["lines"] >= 3000 and CHECKED["accepted"] >= 300, CHECKED


@pytest.mark.parametrize("dense_to_exact", [True, False])
def test_every_trap_of_the_generator_in_files_of_several_blocks(dense_to_exact: bool,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Synthetic traffic (valid records of every ts form, every malformed category) over block boundaries. One line
    in 17 is malformed, dense enough that parts go on to the exact rules; kept on Arrow, its side decides most (not
    all the valid lines: one whose unknown member has another type than the lines before it in its part is refused
    there too)."""
    if not dense_to_exact:
        monkeypatch.setattr(arrow_json, "_DENSE", (1 << 30, 0))
    rng = np.random.default_rng(7)
    out: list[bytes] = []
    for i in range(20_000):
        ts_ms = NOW_MS - int(rng.integers(0, 86_400_000))
        if i % 17 == 0:
            category = reasons.CATEGORIES[int(rng.integers(0, len(reasons.CATEGORIES)))]
            out.append(malformed_line(rng, category, f"t{i % 5}", ts_ms, LIMITS.max_record_bytes).encode())
        else:
            rec = base_record(rng, f"t{i % 5}", ts_ms)
            if i % 3 == 0:
                rec["attributes"] = {"http.method": "GET", "city": "Zürich", "gone": None}
            if i % 4 == 0:
                rec["region"] = "eu-1" if i % 8 else 3
            out.append(json.dumps(rec, ensure_ascii=i % 2 == 0).encode())
    CHECKED["accepted"] = 0
    assert_same({"part-000.jsonl": b"\n".join(out[:11_000]), "part-001.jsonl": b"\r\n".join(out[11_000:]) + b"\n"})
    assert CHECKED["accepted"] >= (0 if dense_to_exact else 14_000), CHECKED


def test_a_zone_with_one_percent_bad_lines_goes_through_arrow_about_once() -> None:
    """Refused lines cost a bounded re-read: Arrow is handed at most 1.3x the zone's bytes at 1 % bad lines."""
    rng = np.random.default_rng(11)
    categories = list(BAD_WEIGHTS)
    weights = np.array([BAD_WEIGHTS[c] for c in categories])
    out: list[bytes] = []
    for i in range(40_000):
        ts_ms = NOW_MS - int(rng.integers(0, 86_400_000))
        if rng.random() < 0.01:
            category = categories[int(rng.choice(len(categories), p=weights / weights.sum()))]
            out.append(malformed_line(rng, category, f"t{i % 5}", ts_ms, LIMITS.max_record_bytes).encode())
        else:
            out.append(json.dumps(base_record(rng, f"t{i % 5}", ts_ms)).encode())
    text = b"\n".join(out) + b"\n"
    starts, ends = split_lines(text)
    blocks = BlockParser(RecordParser(LIMITS, NOW_MS))
    handed = accepted = 0
    for lo in range(0, len(starts), 8192):  # the reader's block size
        hi = min(lo + 8192, len(starts))
        got = blocks.parse(text, starts[lo:hi], ends[lo:hi], np.arange(lo + 1, hi + 1))
        handed += got.arrow_bytes
        accepted += len(got.columns["tenant_id"])
    assert accepted >= 39_000
    assert handed <= 1.3 * len(text), f"Arrow was handed {handed / len(text):.2f}x the zone's bytes"


@pytest.mark.parametrize("bad", [0.001, 0.01, 0.05, 0.3])
def test_lines_only_arrow_refuses_cost_about_one_read_each_whatever_their_share(bad: float) -> None:
    """Lines the type screen cannot catch (trailing commas, duplicate keys, NaN, ...) are found by Arrow one at a
    time: each costs about one more read, of a window past it, not a re-read of its part's halves; where they are
    dense the rest of a part goes to the exact rules. The result is the exact rules' either way."""
    rng = np.random.default_rng(int(bad * 1000))
    out: list[bytes] = []
    made_bad = 0
    for i in range(30_000):
        ts_ms = NOW_MS - int(rng.integers(0, 86_400_000))
        if rng.random() < bad:
            made_bad += 1
            out.append(arrow_refused_line(rng, f"t{i % 5}", ts_ms).encode())
        else:
            out.append(json.dumps(base_record(rng, f"t{i % 5}", ts_ms)).encode())
    text = b"\n".join(out) + b"\n"
    starts, ends = split_lines(text)
    got = BlockParser(RecordParser(LIMITS, NOW_MS)).parse(text, starts, ends, np.arange(1, len(starts) + 1))
    parts = -(-len(text) // _PART_BYTES) * 2  # parts per ts group, both groups
    assert len(got.exact) >= made_bad > 0
    assert got.arrow_reads <= 1.25 * made_bad + 4 * parts, (got.arrow_reads, made_bad)
    assert got.arrow_bytes <= 4.5 * len(text), f"Arrow was handed {got.arrow_bytes / len(text):.2f}x the bytes"
    half = len(out) // 2  # files under LIMITS.max_file_bytes
    assert_same({"part-000.jsonl": b"\n".join(out[:half]), "part-001.jsonl": b"\n".join(out[half:]) + b"\n"})


def _line_of(kind: str, rng: np.random.Generator, i: int) -> str:
    ts_ms = NOW_MS - int(rng.integers(0, 86_400_000))
    if kind == "refused":
        return arrow_refused_line(rng, f"t{i % 3}", ts_ms)
    rec = base_record(rng, f"t{i % 3}", ts_ms)
    if kind == "typed":  # an unknown member whose type changes from line to line: refused in its context only
        rec["region"] = int(rng.integers(0, 9)) if rng.random() < 0.5 else "eu-1"
    line = json.dumps(rec)
    return {"two": line + line, "blank": "", "space": " " + line}.get(kind, line)


@given(kinds=st.lists(st.sampled_from(["valid", "valid", "refused", "typed", "two", "blank", "space"]),
                      min_size=1, max_size=200),
       seed=st.integers(0, 2**31 - 1), min_window=st.sampled_from([1, 2, 32]),
       dense=st.sampled_from([(1, 1000), (2, 4), (8, 64), (1 << 30, 0)]),
       part_bytes=st.sampled_from([256, 4096, 1 << 22]))
@settings(max_examples=30, derandomize=True)
def test_any_mix_of_refused_lines_under_any_windows_gives_the_exact_rules_rows(
        kinds: list[str], seed: int, min_window: int, dense: tuple[int, int], part_bytes: int) -> None:
    """Whatever the windows, the switch to the exact rules and the part size, every line comes out as the exact
    rules decide it: refused lines, lines refused only in context, two objects on a line, blank and indented lines
    mixed with valid ones of both ``ts`` forms."""
    rng = np.random.default_rng(seed)
    text = "\n".join(_line_of(kind, rng, i) for i, kind in enumerate(kinds)) + "\n"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(arrow_json, "_MIN_WINDOW", min_window)
        patch.setattr(arrow_json, "_DENSE", dense)
        patch.setattr(arrow_json, "_PART_BYTES", part_bytes)
        assert_same({"part-000.jsonl": text.encode()})
