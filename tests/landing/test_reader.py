"""Tests of lakeshard.landing's readers on a generated landing zone: every record ends in exactly one place,
and what lands as events is exactly the generator's ground truth."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from lakeshard.config import LandingConfig
from lakeshard.landing import list_landing_files, parse_landing_arrow, read_landing, reasons
from lakeshard.landing.batches import _raw_text
from lakeshard.landing.errors import LandingReadError
from lakeshard.synth import Manifest, SynthSpec, generate_landing, read_truth_events
from lakeshard.tables.schemas import EVENT_SCHEMA, QUARANTINE_RAW_LIMIT_BYTES, QUARANTINE_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
LIMITS = LandingConfig()
SPEC = SynthSpec(events=3000, tenants=20, hours=0.5, bad_rate=0.02, seed=5)
NOW_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def ms_of(dt: datetime) -> int:
    return (dt - EPOCH) // timedelta(milliseconds=1)


@dataclass(frozen=True)
class Landed:
    """A generated landing zone and what one read_landing call made of it, collected to Python."""

    root: Path
    manifest: Manifest
    now_ms: int
    file_paths: list[str]
    events: list[Any]  # Rows of EVENT_SCHEMA
    quarantine: list[Any]  # Rows of QUARANTINE_SCHEMA
    events_schema: Any
    quarantine_schema: Any


@pytest.fixture(scope="module")
def landed(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Landed:
    root = tmp_path_factory.mktemp("landing")
    manifest = generate_landing(root, SPEC, overwrite=True)
    # The clock is pinned past the generated arrivals so the test does not depend on today's date.
    now_ms = ms_of(datetime.fromisoformat(manifest.arrival_end)) + 3_600_000
    with read_landing(spark, str(root), limits=LIMITS, now_ms=now_ms) as batch:
        assert batch.parsed is not None and batch.parsed.is_cached
        events, quarantine = batch.events.collect(), batch.quarantine.collect()
        landed = Landed(root, manifest, now_ms, [f.path for f in batch.files], events, quarantine,
                        batch.events.schema, batch.quarantine.schema)  # fmt: skip
    assert not batch.parsed.is_cached  # leaving the block released the cache
    return landed


def line_at(root: Path, uri: str, line_number: int) -> bytes:
    data = Path(uri.removeprefix("file://")).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.split(b"\n")[line_number - 1]


# --------------------------------------------------------------------------- listing


def test_lists_exactly_the_generated_files_sorted_and_skips_truth(landed: Landed) -> None:
    files = list_landing_files(landed.root)
    relative = [f.path.removeprefix(f"file://{landed.root}/") for f in files]
    assert set(relative) == set(landed.manifest.file_lines)
    assert relative == sorted(relative)
    assert not any("_truth" in r for r in relative)
    assert any(r.endswith(".json.gz") for r in relative) and any(r.endswith(".jsonl") for r in relative)
    assert all(f.size_bytes == (landed.root / r).stat().st_size for f, r in zip(files, relative, strict=True))
    assert all(f.mtime.tzinfo is not None for f in files)
    assert [f.path for f in files] == landed.file_paths


def test_listing_accepts_file_uris_and_skips_hidden_and_underscore_paths(tmp_path: Path) -> None:
    for name in ("a.jsonl", "b.json", "c.json.gz", "d.jsonl.gz", "sub/e.jsonl", "notes.txt", "f.JSON",
                 ".hidden.jsonl", "_tmp/x.jsonl", "sub/.cache/y.jsonl", "sub/_SUCCESS", ".git/z.json"):  # fmt: skip
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    expected = ["a.jsonl", "b.json", "c.json.gz", "d.jsonl.gz", "sub/e.jsonl"]
    for spelling in (str(tmp_path), f"file://{tmp_path}", f"file:{tmp_path}", f"file://localhost{tmp_path}"):
        assert [f.path for f in list_landing_files(spelling)] == [f"file://{tmp_path}/{n}" for n in expected]
    assert [f.path for f in list_landing_files(tmp_path / "a.jsonl")] == [f"file://{tmp_path}/a.jsonl"]


def test_a_missing_landing_zone_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LandingReadError, match="does not exist"):
        list_landing_files(tmp_path / "nope")


# --------------------------------------------------------------------------- nothing lost, truth matched


def test_schemas(landed: Landed) -> None:
    assert landed.events_schema == EVENT_SCHEMA
    assert landed.quarantine_schema == QUARANTINE_SCHEMA


def test_records_in_equal_events_plus_quarantined(landed: Landed) -> None:
    lines = 0
    for path in landed.root.rglob("part-*"):
        data = path.read_bytes()
        if path.name.endswith(".gz"):
            data = gzip.decompress(data)
        lines += sum(1 for line in data.split(b"\n") if line.strip())
    assert lines == landed.manifest.records
    assert len(landed.events) + len(landed.quarantine) == lines


def test_quarantine_categories_equal_the_generators(landed: Landed) -> None:
    counts = Counter(r["category"] for r in landed.quarantine)
    assert counts == Counter({c: n for c, n in landed.manifest.bad_by_category.items() if n})
    assert all(r["category"] in reasons.CATEGORIES for r in landed.quarantine)
    assert all(reasons.category_of(r["reason"]) == r["category"] for r in landed.quarantine)
    assert all(r["quarantined_at"] == EPOCH.replace(tzinfo=None) + timedelta(milliseconds=landed.now_ms)
               for r in landed.quarantine)  # fmt: skip


def test_events_are_exactly_the_ground_truth(landed: Landed) -> None:
    m = landed.manifest
    assert len(landed.events) == m.unique_events + m.duplicate_records
    truth = read_truth_events(landed.root).to_pylist()
    expected = {(t["tenant_id"], t["event_id"], t["ts_ms"]) for t in truth}
    # Spark returns naive datetimes in the session time zone, which lakeshard sets to UTC.
    got = {(r["tenant_id"], r["event_id"], ms_of(r["ts"].replace(tzinfo=UTC))) for r in landed.events}
    assert got == expected
    sizes = {(t["tenant_id"], t["event_id"]): t["size_bytes"] for t in truth}
    assert all(r["size_bytes"] == sizes[(r["tenant_id"], r["event_id"])] for r in landed.events)


def test_rows_point_at_their_source_line(landed: Landed) -> None:
    for r in landed.events[:: max(1, len(landed.events) // 50)]:
        line = json.loads(line_at(landed.root, r["source_file"], r["line_number"]))
        assert (line["tenant_id"], line["event_id"]) == (r["tenant_id"], r["event_id"])
        for field in ("service", "status", "env", "host", "message"):
            assert r[field] == line.get(field)
    for q in landed.quarantine:
        raw = line_at(landed.root, q["source_file"], q["line_number"])
        assert q["size_bytes"] == len(raw)
        if q["raw_truncated"]:
            assert q["category"] == reasons.OVERSIZE
            assert len(q["raw"].encode()) <= QUARANTINE_RAW_LIMIT_BYTES
            assert raw.decode().startswith(q["raw"])
        else:
            assert q["raw"] == raw.decode("utf-8", "replace")


def test_unknown_fields_and_attributes_reach_the_events(landed: Landed) -> None:
    with_attributes = [r for r in landed.events if r["attributes"]]
    assert with_attributes
    for r in with_attributes[:: max(1, len(with_attributes) // 50)]:
        line = json.loads(line_at(landed.root, r["source_file"], r["line_number"]))
        known = {"tenant_id", "event_id", "ts", "service", "status", "env", "host", "message", "attributes"}
        expected = {**{k: v for k, v in line.items() if k not in known}, **line.get("attributes", {})}
        assert r["attributes"] == expected


# --------------------------------------------------------------------------- file-level details


def test_explicit_files_and_file_uris(spark: SparkSession, landed: Landed) -> None:
    files = list_landing_files(f"file://{landed.root}")[:3]
    with read_landing(spark, files, limits=LIMITS, now_ms=landed.now_ms) as batch:
        got = batch.events.count() + batch.quarantine.count()
    relative = [f.path.removeprefix(f"file://{landed.root}/") for f in files]
    assert got == sum(landed.manifest.file_lines[r] for r in relative)


def test_a_plain_file_whose_first_line_starts_with_the_gzip_magic_bytes_is_read_line_by_line(tmp_path: Path) -> None:
    ok = b'{"tenant_id":"t","event_id":"%d","ts":1767225600000}'
    # Two magic bytes open many a binary line; a gzip stream also names deflate and sets no reserved flag.
    (tmp_path / "binary-first.jsonl").write_bytes(b"\x1f\x8b\n" + ok % 1 + b"\n" + ok % 2 + b"\n")
    (tmp_path / "magic-and-method.jsonl").write_bytes(b"\x1f\x8b\x08\x00 junk\n" + ok % 3 + b"\n")
    events, quarantine = parse_landing_arrow(list_landing_files(tmp_path), limits=LIMITS, now_ms=NOW_MS)
    assert sorted(events.column("event_id").to_pylist()) == ["1", "2"]
    rows = {(Path(f).name, n, r.split(":")[0]) for f, n, r in zip(quarantine.column("source_file").to_pylist(),
                                                             quarantine.column("line_number").to_pylist(),
                                                             quarantine.column("reason").to_pylist(), strict=True)}
    assert rows == {("binary-first.jsonl", 1, reasons.INVALID_JSON),
                    ("magic-and-method.jsonl", 1, reasons.UNREADABLE_FILE)}


def test_line_endings_blank_lines_bom_gzip_and_odd_names(spark: SparkSession, tmp_path: Path) -> None:
    ok = b'{"tenant_id":"t","event_id":"%d","ts":1767225600000}'
    (tmp_path / "crlf [1] {x}.jsonl").write_bytes(
        b"\xef\xbb\xbf" + (ok % 1) + b"\r\n\r\n   \t\n" + (ok % 2) + b"\r\nnot json\r\n" + (ok % 3)  # no final newline
    )
    # Two gzip members (concatenated files) with zero padding after them, and a gzip file named .json.
    (tmp_path / "multi.json.gz").write_bytes(gzip.compress(ok % 4 + b"\n") + gzip.compress(ok % 5 + b"\n") + b"\0" * 8)
    (tmp_path / "mislabelled.json").write_bytes(gzip.compress(ok % 6 + b"\n"))
    # A gzip file cut short (a producer stopped mid-write): its complete lines are read, the rest is one row.
    whole = gzip.compress(b"".join(ok % i + b"\n" for i in range(100, 400)))
    (tmp_path / "truncated.json.gz").write_bytes(whole[: len(whole) * 2 // 3])
    (tmp_path / "empty.jsonl").write_bytes(b"")

    with read_landing(spark, tmp_path, limits=LIMITS, now_ms=NOW_MS) as batch:
        events = {(Path(r["source_file"]).name, r["line_number"]): r for r in batch.events.collect()}
        quarantine = {(Path(r["source_file"]).name, r["line_number"]): r for r in batch.quarantine.collect()}
    assert len(batch.files) == 5

    crlf = {k[1]: r["event_id"] for k, r in events.items() if k[0] == "crlf [1] {x}.jsonl"}
    assert crlf == {1: "1", 4: "2", 6: "3"}  # line numbers count blank lines; the BOM is dropped
    assert events[("crlf [1] {x}.jsonl", 1)]["size_bytes"] == len(ok % 1)  # neither BOM nor CR counted
    assert quarantine[("crlf [1] {x}.jsonl", 5)]["raw"] == "not json"
    assert quarantine[("crlf [1] {x}.jsonl", 5)]["category"] == reasons.INVALID_JSON

    assert {r["event_id"] for k, r in events.items() if k[0] == "multi.json.gz"} == {"4", "5"}
    assert {r["event_id"] for k, r in events.items() if k[0] == "mislabelled.json"} == {"6"}

    cut_events = sorted(k[1] for k in events if k[0] == "truncated.json.gz")
    cut_rows = [(k[1], r["reason"]) for k, r in quarantine.items() if k[0] == "truncated.json.gz"]
    assert len(cut_rows) == 1 and cut_events == list(range(1, cut_rows[0][0])) and len(cut_events) >= 100
    size = (tmp_path / "truncated.json.gz").stat().st_size
    assert cut_rows[0][1].startswith(f"unreadable_file: gzip stream is truncated: compressed bytes [0, {size})")


def test_quarantined_raw_is_cut_on_a_character_boundary() -> None:
    limit = QUARANTINE_RAW_LIMIT_BYTES
    assert _raw_text(b"x" * limit) == ("x" * limit, False)
    assert _raw_text(b"\xff{") == ("\ufffd{", False)
    for char in ("é", "東", "🚀"):
        encoded = char.encode()
        for shift in range(len(encoded)):
            line = b"a" * (limit - shift) + encoded + b"tail"
            text, truncated = _raw_text(line)
            assert truncated and "\ufffd" not in text and len(text.encode()) <= limit
            assert line.decode().startswith(text) and len(text.encode()) > limit - len(encoded)


def test_an_empty_landing_zone_gives_empty_frames(spark: SparkSession, tmp_path: Path) -> None:
    batch = read_landing(spark, tmp_path, limits=LIMITS)
    assert batch.files == [] and batch.parsed is None
    assert batch.events.schema == EVENT_SCHEMA and batch.quarantine.schema == QUARANTINE_SCHEMA
    assert batch.events.count() == 0 and batch.quarantine.count() == 0
    batch.release()
    with pytest.raises(LandingReadError):
        read_landing(spark, tmp_path / "missing", limits=LIMITS)


# --------------------------------------------------------------------------- threads


@pytest.mark.parametrize("threads", [2, 3, 5])
def test_the_driver_parse_on_threads_gives_the_rows_of_one_thread_in_the_same_order(
        landed: Landed, threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch's files are parsed on a thread per core; a file that cannot be read mid-batch is quarantined in
    its place. Whatever the split, the events and rejections are the one-thread parse's, row for row."""
    from lakeshard.landing import arrow_read
    from lakeshard.landing.listing import LandingFile

    files = list_landing_files(landed.root)
    files.insert(len(files) // 2, LandingFile(f"file://{landed.root}/vanished.jsonl", 10, EPOCH))
    monkeypatch.setattr(arrow_read, "parse_threads", lambda _files: 1)
    alone = parse_landing_arrow(files, limits=LIMITS, now_ms=landed.now_ms)
    split: list[list[str]] = []
    real_split = arrow_read.split_by_bytes
    monkeypatch.setattr(arrow_read, "parse_threads", lambda _files: threads)
    monkeypatch.setattr(arrow_read, "split_by_bytes",
                        lambda fs, n: split.append([f.path for f in fs]) or real_split(fs, n))
    together = parse_landing_arrow(files, limits=LIMITS, now_ms=landed.now_ms)
    assert split, "the parse did not split the batch"
    assert together[0].equals(alone[0]) and together[1].equals(alone[1])
    assert any("vanished.jsonl" in p for p in together[1].column("source_file").to_pylist())


def test_a_parse_given_one_thread_parses_on_the_calling_thread_whatever_the_cores(
        landed: Landed, monkeypatch: pytest.MonkeyPatch) -> None:
    """The router's look ahead parses on its own thread only (``threads=1``), beside the batch in hand's writes;
    the rows are those of the parse on every core."""
    import threading

    from lakeshard.landing import arrow_read

    files = list_landing_files(landed.root)
    monkeypatch.setattr(arrow_read, "parse_threads", lambda _files: 4)
    everywhere = parse_landing_arrow(files, limits=LIMITS, now_ms=landed.now_ms)
    parsed_on: set[str] = set()
    real_parse = arrow_read.ParseFiles.parse

    def parse(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        parsed_on.add(threading.current_thread().name)
        return real_parse(self, *args, **kwargs)

    monkeypatch.setattr(arrow_read.ParseFiles, "parse", parse)
    alone = parse_landing_arrow(files, limits=LIMITS, now_ms=landed.now_ms, threads=1)
    assert parsed_on == {threading.current_thread().name}
    assert alone[0].equals(everywhere[0]) and alone[1].equals(everywhere[1])


def test_a_batch_is_split_into_runs_of_consecutive_files_of_about_equal_bytes() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from lakeshard.landing.listing import LandingFile
    from lakeshard.landing.threads import split_by_bytes

    @settings(max_examples=300)
    @given(st.lists(st.integers(0, 10_000), max_size=40), st.integers(1, 6))
    def check(sizes: list[int], parts: int) -> None:
        files = [LandingFile(f"file:///z/{i:03d}.jsonl", size, EPOCH) for i, size in enumerate(sizes)]
        runs = split_by_bytes(files, parts)
        assert [f for run in runs for f in run] == files  # every file once, in order
        assert 1 <= len(runs) <= max(1, parts) and all(runs[:-1])
        if len(files) >= parts:
            biggest = max(max(sizes, default=0), 1)
            share = sum(max(1, s) for s in sizes) / parts
            assert all(sum(max(1, f.size_bytes) for f in run) <= share + biggest for run in runs)

    check()
