"""Tests of lakeshard.synth: the landing zone it writes agrees with its ground truth, counted here
independently (every file read back, every line classified by a checker written for these tests)."""

from __future__ import annotations

import gzip
import json
import re
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeshard.errors import ConfigError
from lakeshard.landing import reasons
from lakeshard.synth import (
    Manifest,
    ManifestError,
    SynthSpec,
    format_rfc3339,
    generate_landing,
    new_run_folder,
    read_manifest,
)
from lakeshard.synth.timestamps import OFFSETS, format_rfc3339_many

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
EARLIEST_MS = (datetime(2000, 1, 1, tzinfo=UTC) - EPOCH) // timedelta(milliseconds=1)
MAX_RECORD = 256 * 1024
RFC3339 = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:(Z)|([+-])(\d{2}):(\d{2}))$")
OPTIONAL_STRINGS = ("service", "status", "env", "host", "message")
PART = re.compile(r"part-(\d+)(?:\.redelivery-(\d+))?\.(jsonl|json\.gz)$")

SMALL = SynthSpec(events=5_000, tenants=50, seed=11)


# --------------------------------------------------------------------------- independent checker


def parse_rfc3339_ms(text: str) -> int | None:
    """Return epoch ms of a strict RFC 3339 timestamp, or None (sub-millisecond digits must be zero)."""
    m = RFC3339.match(text)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    frac = m.group(7) or ""
    if frac[3:].strip("0"):
        return None  # finer than a millisecond: the generator promises not to do this
    if m.group(8) is None:
        sign = 1 if m.group(9) == "+" else -1
        tz = timezone(sign * timedelta(hours=int(m.group(10)), minutes=int(m.group(11))))
    else:
        tz = UTC
    try:
        when = datetime(year, month, day, hour, minute, second, tzinfo=tz)
    except ValueError:
        return None
    return (when - EPOCH) // timedelta(milliseconds=1) + int((frac + "000")[:3])


def classify(line: bytes, now_ms: int) -> tuple[str | None, tuple[str, str, int] | None]:
    """Return (quarantine category, None) for a bad line or (None, key) for a valid one."""
    try:
        obj = json.loads(line.decode("utf-8"))
    except ValueError:
        return reasons.INVALID_JSON, None
    if not isinstance(obj, dict):
        return reasons.NOT_AN_OBJECT, None
    if len(line) > MAX_RECORD:
        return reasons.OVERSIZE, None
    if any(obj.get(f) is None for f in ("tenant_id", "event_id", "ts")):
        return reasons.MISSING_FIELD, None
    tid, eid, ts = obj["tenant_id"], obj["event_id"], obj["ts"]
    attrs = obj.get("attributes", {})
    if (
        not isinstance(tid, str)
        or not isinstance(eid, str)
        or isinstance(ts, bool)
        or not isinstance(ts, (str, int))
        or not isinstance(attrs, dict)
        or not all(isinstance(v, str) for v in attrs.values())
        or any(f in obj and not isinstance(obj[f], str) for f in OPTIONAL_STRINGS)
    ):
        return reasons.BAD_TYPE, None
    if tid == "" or eid == "":
        return reasons.EMPTY_FIELD, None
    if len(tid) > 128 or len(eid) > 256:
        return reasons.TOO_LONG, None
    ms = ts if isinstance(ts, int) else parse_rfc3339_ms(ts)
    if ms is None:
        return reasons.BAD_TIMESTAMP, None
    if ms < EARLIEST_MS or ms > now_ms + 24 * 3600 * 1000:
        return reasons.ABSURD_TIMESTAMP, None
    return None, (tid, eid, ms)


@dataclass
class Observed:
    """What the landing zone holds, counted by reading it back."""

    file_lines: dict[str, int] = field(default_factory=dict)
    contents: dict[str, bytes] = field(default_factory=dict)  # decompressed
    records: int = 0
    bad: Counter[str] = field(default_factory=Counter)
    bad_lines_regular: Counter[bytes] = field(default_factory=Counter)
    first: dict[tuple[str, str, int], bytes] = field(default_factory=dict)  # key -> first line
    first_window: dict[tuple[str, str, int], int] = field(default_factory=dict)
    duplicates: int = 0
    retry_window_gaps: list[int] = field(default_factory=list)
    per_window_tenant: Counter[tuple[int, str]] = field(default_factory=Counter)
    objects: list[dict[str, Any]] = field(default_factory=list)  # a sample of valid records


def observe(root: Path) -> Observed:
    """Return the independent reading of a landing zone (paths in sorted order = arrival order)."""
    now_ms = (datetime.now(UTC) - EPOCH) // timedelta(milliseconds=1)
    seen = Observed()
    files = sorted(p for p in root.rglob("*") if p.is_file() and "_truth" not in p.relative_to(root).parts)
    for path in files:
        rel = path.relative_to(root).as_posix()
        match = PART.search(rel)
        assert match is not None, rel
        window = int(match.group(1))
        redelivery = match.group(2) is not None
        data = path.read_bytes()
        if rel.endswith(".gz"):
            data = gzip.decompress(data)
        assert data.endswith(b"\n"), rel
        lines = data.split(b"\n")[:-1]
        seen.contents[rel] = data
        seen.file_lines[rel] = len(lines)
        seen.records += len(lines)
        for line in lines:
            category, key = classify(line, now_ms)
            if category is not None:
                seen.bad[category] += 1
                if not redelivery:
                    seen.bad_lines_regular[line] += 1
                continue
            assert key is not None
            if key in seen.first:
                seen.duplicates += 1
                assert line == seen.first[key], f"duplicate of {key} is not an exact copy"
                if not redelivery:
                    seen.retry_window_gaps.append(window - seen.first_window[key])
            else:
                seen.first[key] = line
                seen.first_window[key] = window
                if not redelivery:
                    seen.per_window_tenant[(window, key[0])] += 1
                if len(seen.objects) < 20_000:
                    seen.objects.append(json.loads(line))
    return seen


def hour_of(ms: int) -> str:
    return (EPOCH + timedelta(milliseconds=ms)).strftime("%Y-%m-%dT%H:00:00Z")


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Manifest, Observed]:
    root = tmp_path_factory.mktemp("landing")
    manifest = generate_landing(root, SMALL)
    return root, manifest, observe(root)


# --------------------------------------------------------------------------- ground truth


def test_manifest_counts_match_the_files(small: tuple[Path, Manifest, Observed]) -> None:
    root, m, seen = small
    assert m.file_lines == seen.file_lines
    assert m.files == len(seen.file_lines)
    assert m.records == seen.records
    assert m.line_bytes == sum(len(c) for c in seen.contents.values())
    assert dict(seen.bad) == {c: n for c, n in m.bad_by_category.items() if n}
    assert set(m.bad_by_category) == set(reasons.CATEGORIES)
    assert m.bad_records == sum(seen.bad.values())
    assert m.unique_events == len(seen.first) == SMALL.events
    assert m.duplicate_records == seen.duplicates
    assert read_manifest(root) == m


def test_manifest_per_tenant_and_hour(small: tuple[Path, Manifest, Observed]) -> None:
    _, m, seen = small
    by_hour: dict[str, Counter[str]] = defaultdict(Counter)
    for tid, _, ms in seen.first:
        by_hour[tid][hour_of(ms)] += 1
    assert m.events_by_tenant_hour == {t: dict(c) for t, c in by_hour.items()}
    assert {t: n for t, n in m.events_by_tenant.items() if n} == {t: sum(c.values()) for t, c in by_hour.items()}
    sizes: Counter[str] = Counter()
    for (tid, _, _), line in seen.first.items():
        sizes[tid] += len(line)
    assert {t: b for t, b in m.bytes_by_tenant.items() if b} == dict(sizes)


def test_events_parquet_matches_the_files(small: tuple[Path, Manifest, Observed]) -> None:
    root, m, seen = small
    table = pq.read_table(root / "_truth" / "events.parquet")
    assert table.column_names[:5] == ["tenant_id", "event_id", "ts_ms", "size_bytes", "late"]
    assert str(table.schema.field("ts_ms").type) == "int64"
    rows = table.to_pylist()
    keys = {(r["tenant_id"], r["event_id"], r["ts_ms"]) for r in rows}
    assert len(rows) == len(keys) == m.unique_events
    assert keys == set(seen.first)
    start_ms = (SMALL.start - EPOCH) // timedelta(milliseconds=1)
    late = 0
    for r in rows:
        key = (r["tenant_id"], r["event_id"], r["ts_ms"])
        assert r["size_bytes"] == len(seen.first[key])
        # Arrival lies inside the first delivery's file window; on-time ts trail it by < 31 s, late
        # ones by >= 2 min, so a 45 s cut before the window start tells them apart.
        window_start = start_ms + seen.first_window[key] * SMALL.file_seconds * 1000
        assert r["late"] == (r["ts_ms"] < window_start - 45_000), key
        late += r["late"]
    assert m.late_events == late


def test_redelivered_files_repeat_whole_files(small: tuple[Path, Manifest, Observed]) -> None:
    _, m, seen = small
    assert m.redelivered_files
    for copy, original in m.redelivered_files.items():
        assert seen.contents[copy] == seen.contents[original]
        copy_window = int(PART.search(copy).group(1))  # type: ignore[union-attr]
        assert copy_window >= int(PART.search(original).group(1))  # type: ignore[union-attr]
        assert copy > original  # names sort by arrival


def test_bad_lines_are_never_resent_except_with_their_file(small: tuple[Path, Manifest, Observed]) -> None:
    _, _, seen = small
    assert max(seen.bad_lines_regular.values()) == 1
    assert sum(seen.bad_lines_regular.values()) == round(SMALL.bad_rate * SMALL.events)
    for content in seen.contents.values():
        for line in content.split(b"\n")[:-1]:
            assert b"\r" not in line


# --------------------------------------------------------------------------- realism


def test_tenant_volumes_are_skewed(small: tuple[Path, Manifest, Observed]) -> None:
    _, _, seen = small
    per_tenant = Counter(tid for tid, _, _ in seen.first)
    volumes = sorted(per_tenant.values(), reverse=True)
    assert volumes[0] >= 10 * float(np.median(volumes))
    assert all(re.fullmatch(r"tenant-\d{5}", t) for t in per_tenant)


def test_burst_tenants_jump_at_least_tenfold(tmp_path: Path) -> None:
    spec = SynthSpec(events=30_000, tenants=8, burst_tenants=2, hours=1.0, seed=5,
                     retry_rate=0.0, bad_rate=0.0, redelivered_files=0.0)  # fmt: skip
    m = generate_landing(tmp_path, spec)
    seen = observe(tmp_path)
    start = spec.start
    assert len(m.bursts) == 2
    for burst in m.bursts:
        assert 10.0 <= burst.factor <= 100.0
        b0 = datetime.fromisoformat(burst.start) - start
        b1 = datetime.fromisoformat(burst.end) - start
        inside = range(-(-int(b0.total_seconds()) // 60), int(b1.total_seconds()) // 60)
        assert len(inside) >= 1
        minutes = int(spec.hours * 60)
        touched = set(range(int(b0.total_seconds()) // 60, -(-int(b1.total_seconds()) // 60)))
        outside = [w for w in range(minutes) if w not in touched]
        rate_in = np.mean([seen.per_window_tenant[(w, burst.tenant_id)] for w in inside])
        rate_out = np.mean([seen.per_window_tenant[(w, burst.tenant_id)] for w in outside])
        assert rate_in >= 10 * rate_out, (burst, rate_in, rate_out)
        assert 0.7 * burst.factor <= rate_in / rate_out <= 1.4 * burst.factor, (burst, rate_in, rate_out)


def test_anomalies_present_at_their_rough_shares(small: tuple[Path, Manifest, Observed]) -> None:
    _, m, seen = small
    n = SMALL.events
    assert m.retry_records == round(SMALL.retry_rate * n)
    assert 0.5 * SMALL.retry_rate < m.retry_records / n < 2 * SMALL.retry_rate
    regular_files = m.files - len(m.redelivered_files)
    assert 1 <= len(m.redelivered_files) <= max(2, 3 * SMALL.redelivered_files * regular_files)
    assert 0.5 * SMALL.late_rate < m.late_events / n < 1.5 * SMALL.late_rate
    assert 0.5 * SMALL.bad_rate < sum(seen.bad_lines_regular.values()) / n < 2 * SMALL.bad_rate
    assert all(seen.bad[c] >= 1 for c in reasons.CATEGORIES)
    # retries come seconds to hours later: some in the same or the next file, some much later
    gaps = seen.retry_window_gaps
    assert len(gaps) == m.retry_records
    assert min(gaps) <= 1
    assert max(gaps) >= 30
    gzip_share = sum(p.endswith(".json.gz") for p in m.file_lines) / m.files
    assert 0.05 < gzip_share < 0.4


def test_record_fields_look_like_real_traffic(small: tuple[Path, Manifest, Observed]) -> None:
    _, _, seen = small
    objs = seen.objects
    ts_kinds = Counter("int" if isinstance(o["ts"], int) else "str" for o in objs)
    assert ts_kinds["int"] > 0.2 * len(objs) and ts_kinds["str"] > 0.4 * len(objs)
    offsets = Counter(re.sub(r"^.*?(Z|[+-]\d\d:\d\d)$", r"\1", o["ts"]) for o in objs if isinstance(o["ts"], str))
    assert offsets["Z"] > 0 and any(k.startswith("+") for k in offsets) and any(k.startswith("-") for k in offsets)
    fractions = Counter(len(re.search(r"T\d\d:\d\d:\d\d(?:\.(\d+))?", o["ts"]).group(1) or "")  # type: ignore[union-attr]
                        for o in objs if isinstance(o["ts"], str))  # fmt: skip
    assert {0, 3, 6} <= set(fractions)
    envs = Counter(o["env"] for o in objs if "env" in o)
    assert envs.most_common(1)[0][0] == "prod" and envs["prod"] > 0.7 * sum(envs.values())
    assert set(envs) == {"prod", "staging", "dev"}
    statuses = Counter(o["status"] for o in objs if "status" in o)
    assert statuses.most_common(1)[0][0] == "info" and statuses["error"] > 0 and statuses["warn"] > 0
    known = {"tenant_id", "event_id", "ts", "attributes", *OPTIONAL_STRINGS}
    extras = [k for o in objs for k in o if k not in known]
    assert 0 < len(extras) < 0.2 * len(objs)
    assert all(isinstance(o.get("attributes", {}), dict) for o in objs)
    id_shapes = Counter(
        "uuid" if re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", o["event_id"])
        else "ulid" if re.fullmatch(r"[0-9A-HJKMNP-TV-Z]{26}", o["event_id"])
        else "other"
        for o in objs
    )  # fmt: skip
    assert id_shapes["uuid"] > 0 and id_shapes["ulid"] > 0
    services_per_tenant: dict[str, set[str]] = defaultdict(set)
    for o in objs:
        if "service" in o:
            services_per_tenant[o["tenant_id"]].add(o["service"])
    assert max(len(s) for s in services_per_tenant.values()) >= 4
    assert any(not line.isascii() for line in seen.first.values())  # raw UTF-8 from some producers
    assert any(b"\\u" in line for line in seen.first.values())  # \u escapes from others


def test_event_sizes_span_tens_of_bytes_to_tens_of_kb(small: tuple[Path, Manifest, Observed]) -> None:
    _, m, seen = small
    sizes = [len(line) for line in seen.first.values()]
    assert min(sizes) < 100
    assert max(sizes) >= 10_000
    assert max(sizes) < SMALL.max_record_bytes
    assert 100 < float(np.median(sizes)) < 2_000
    assert m.bad_by_category[reasons.OVERSIZE] >= 1


# --------------------------------------------------------------------------- determinism and API


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.suffix != ".parquet"
    }


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    spec = SynthSpec(events=2_000, tenants=20, hours=0.5, seed=3)
    generate_landing(tmp_path / "a", spec)
    generate_landing(tmp_path / "b", spec)
    generate_landing(tmp_path / "c", SynthSpec(events=2_000, tenants=20, hours=0.5, seed=4))
    a, b, c = (_snapshot(tmp_path / d) for d in "abc")
    assert a == b
    assert a != c
    truth_a, truth_b = (pq.read_table(tmp_path / d / "_truth" / "events.parquet") for d in "ab")
    assert truth_a.equals(truth_b)


def test_refuses_a_non_empty_landing_unless_overwrite(tmp_path: Path) -> None:
    spec = SynthSpec(events=100, tenants=3, hours=0.1)
    generate_landing(tmp_path, spec)
    (tmp_path / "stale.jsonl").write_text("{}\n")
    with pytest.raises(ConfigError, match=r"not empty.*overwrite=True"):
        generate_landing(tmp_path, spec)
    m = generate_landing(f"file://{tmp_path}", spec, overwrite=True)
    assert not (tmp_path / "stale.jsonl").exists()
    assert read_manifest(tmp_path) == m


def _files(root: Path) -> dict[str, bytes]:
    return {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()}


def test_overwrite_never_deletes_a_landing_zone_the_generator_did_not_write(tmp_path: Path) -> None:
    (tmp_path / "2026" / "11").mkdir(parents=True)
    (tmp_path / "2026" / "11" / "producer-1.jsonl").write_text('{"tenant_id": "t", "event_id": "e", "ts": 1}\n')
    (tmp_path / "unrouted.json.gz").write_bytes(gzip.compress(b"{}\n"))
    before = _files(tmp_path)
    with pytest.raises(ConfigError, match=r"no _truth/: this generator did not write it"):
        generate_landing(tmp_path, SynthSpec(events=100, tenants=3, hours=0.1), overwrite=True)
    assert _files(tmp_path) == before


def test_a_new_run_folder_leaves_an_existing_landing_zone_untouched(tmp_path: Path) -> None:
    (tmp_path / "producer-1.jsonl").write_text('{"tenant_id": "t", "event_id": "e", "ts": 1}\n')
    generate_landing(tmp_path / "synthetic" / "20261126T100000Z", SynthSpec(events=100, tenants=3, hours=0.1))
    before = _files(tmp_path)
    now = datetime(2026, 11, 26, 10, 0, tzinfo=UTC)
    folder = new_run_folder(tmp_path, now=now)
    assert folder == tmp_path / "synthetic" / "20261126T100000Z-2" and not any(folder.iterdir())
    truth = generate_landing(folder, SynthSpec(events=200, tenants=3, hours=0.1))
    after = _files(tmp_path)
    assert {k: v for k, v in after.items() if k in before} == before
    assert read_manifest(folder) == truth and new_run_folder(tmp_path, now=now).name == "20261126T100000Z-3"


def test_read_manifest_without_truth_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="no ground truth"):
        read_manifest(tmp_path)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"events": -1},
        {"tenants": 0},
        {"retry_rate": 1.5},
        {"burst_tenants": 5, "tenants": 3},
        {"start": datetime(2026, 1, 1)},  # naive
        {"start": datetime(1999, 1, 1, tzinfo=UTC)},
        {"max_message_bytes": 200_000},
        {"hours": 0},
        {"events": True},
    ],
)
def test_bad_spec_is_a_config_error(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="SynthSpec"):
        SynthSpec(**kwargs)


def test_spec_and_manifest_roundtrip_through_json(small: tuple[Path, Manifest, Observed]) -> None:
    _, m, _ = small
    assert SynthSpec.from_dict(json.loads(json.dumps(SMALL.to_dict()))) == SMALL
    assert Manifest.from_dict(json.loads(m.to_json())) == m
    assert SynthSpec(start=datetime(2026, 1, 1, 2, tzinfo=timezone(timedelta(hours=2)))).start == SMALL.start


# --------------------------------------------------------------------------- properties


@given(
    ts_ms=st.integers(min_value=EARLIEST_MS, max_value=4_102_444_800_000),
    offset=st.sampled_from([None, *(m for _, m in OFFSETS)]),
    digits=st.sampled_from([0, 3, 6]),
)
def test_rfc3339_rendering_roundtrips_to_epoch_ms(ts_ms: int, offset: int | None, digits: int) -> None:
    if digits == 0:
        ts_ms -= ts_ms % 1000
    text = format_rfc3339(ts_ms, offset, digits)
    assert parse_rfc3339_ms(text) == ts_ms
    assert datetime.fromisoformat(text) == EPOCH + timedelta(milliseconds=ts_ms)


@given(
    values=st.lists(
        st.tuples(
            st.integers(EARLIEST_MS, 4_102_444_800_000), st.integers(0, len(OFFSETS) - 1), st.sampled_from([3, 6])
        ),
        max_size=30,
    )
)
def test_vectorised_rendering_equals_scalar(values: list[tuple[int, int, int]]) -> None:
    ts = np.array([v[0] for v in values], dtype=np.int64)
    codes = np.array([v[1] for v in values], dtype=np.int64)
    digits = np.array([v[2] for v in values], dtype=np.int64)
    many = format_rfc3339_many(ts, codes, digits)
    for (t, code, d), text in zip(values, many, strict=True):
        suffix, minutes = OFFSETS[code]
        assert text.endswith(suffix)
        assert parse_rfc3339_ms(text) == t
        assert text == format_rfc3339(t, None if suffix == "Z" else minutes, d)


@settings(max_examples=10)
@given(
    events=st.integers(0, 400),
    tenants=st.integers(1, 12),
    seed=st.integers(0, 2**32),
    bad_rate=st.sampled_from([0.0, 0.05, 0.2]),
    retry_rate=st.sampled_from([0.0, 0.1, 0.5]),
    redelivered=st.sampled_from([0.0, 0.3]),
    hours=st.sampled_from([0.05, 0.5, 3.0]),
)
def test_any_spec_accounts_for_every_line(
    events: int, tenants: int, seed: int, bad_rate: float, retry_rate: float, redelivered: float, hours: float
) -> None:
    spec = SynthSpec(events=events, tenants=tenants, seed=seed, bad_rate=bad_rate, retry_rate=retry_rate,
                     redelivered_files=redelivered, hours=hours, burst_tenants=min(2, tenants))  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        m = generate_landing(tmp, spec)
        seen = observe(Path(tmp))
    # Each count of the manifest against the files read back; together they account for every line.
    assert m.records == seen.records
    assert m.unique_events == len(seen.first) == events
    assert m.duplicate_records == seen.duplicates
    assert {c: n for c, n in m.bad_by_category.items() if n} == dict(seen.bad)
    assert m.file_lines == seen.file_lines
