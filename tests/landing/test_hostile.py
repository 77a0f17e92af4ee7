"""Hostile landing input never stops a read: every line ends in events, in quarantine or counted blank, and
a file that cannot be read becomes one file-level quarantine row while the other files go on."""

from __future__ import annotations

import dataclasses
import gzip
import json
import random
import sys
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

from lakeshard.config import LandingConfig, load_config
from lakeshard.errors import ConfigError
from lakeshard.landing import list_landing_files, parse_landing_arrow, read_landing, reasons
from lakeshard.landing.batches import _Sink
from lakeshard.landing.gzip import Gunzipped, gunzip
from lakeshard.landing.listing import content_checksum

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

NOW_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
TS = NOW_MS - 3_600_000
BOUND = 64 * 1024  # a small landing_format.max_file_bytes, so small files can cross it
LIMITS = LandingConfig(max_file_bytes=BOUND)
OK = b'{"tenant_id":"t","event_id":"%d","ts":%d}'


def ok_lines(first: int, count: int) -> bytes:
    return b"".join(OK % (i, TS) + b"\n" for i in range(first, first + count))


def gzip_of_zeros(path: Path, decompressed: int, chunk: int = 1 << 20) -> None:
    """Write a gzip file of ``decompressed`` newline bytes, chunk by chunk (never all of it in memory)."""
    block = b"\n" * chunk
    with gzip.open(path, "wb", compresslevel=9) as out:
        for _ in range(decompressed // chunk):
            out.write(block)
        out.write(block[: decompressed % chunk])


# Lines the parser must accept or reject, never crash on: each one a bug the column builder once hit.
HOSTILE_LINES = [
    b'{"tenant_id":"t","event_id":"n1","ts":%d,"attributes":{"x":null,"y":1}}' % TS,
    b'{"tenant_id":"t","event_id":"n2","ts":%d,"attributes":{"x":null,"y":"ok"}}' % TS,
    b'{"tenant_id":"t\\ud800","event_id":"s1","ts":%d}' % TS,
    b'{"tenant_id":"t","event_id":"s2","ts":%d,"message":"\\uDC00"}' % TS,
    b'{"tenant_id":"t","event_id":"s3","ts":%d,"attributes":{"k\\udbff":"v"}}' % TS,
    b'{"tenant_id":"t","event_id":"s4","ts":%d,"unknown":["\\ud83d"]}' % TS,
    b'{"tenant_id":"t","event_id":"s5","ts":%d,"message":"\\ud83d\\ude80"}' % TS,
    b'{"tenant_id":"t","event_id":"d1","ts":%d,"deep":' % TS + b"[" * 5000 + b"]" * 5000 + b"}",
    b'{"tenant_id":"t","event_id":"h1","ts":%d,"big":%s}' % (TS, b"9" * 4000),
    b'{"tenant_id":"t","event_id":"f1","ts":%d,"f":1e400}' % TS,
    b'{"tenant_id":"t","event_id":"z1","ts":%d,"message":"nul\\u0000"}' % TS,
    b'{"tenant_id":"t","event_id":"\x00","ts":%d}' % TS,
    b"\xef\xbb\xbf{}",
    b"\x00\x00\x00",
]


def test_hostile_lines_are_each_one_event_or_one_quarantine_row(tmp_path: Path) -> None:
    (tmp_path / "hostile.jsonl").write_bytes(b"\n".join(HOSTILE_LINES) + b"\n")
    events, quarantine = parse_landing_arrow(list_landing_files(tmp_path), limits=LIMITS, now_ms=NOW_MS)
    assert events.num_rows + quarantine.num_rows == len(HOSTILE_LINES)
    lines = sorted(events.column("line_number").to_pylist() + quarantine.column("line_number").to_pylist())
    assert lines == list(range(1, len(HOSTILE_LINES) + 1))
    by_line = dict(zip(quarantine.column("line_number").to_pylist(), quarantine.column("reason").to_pylist(),
                       strict=True))
    assert by_line[1].startswith("bad_type: attributes.y is a number")
    assert all("surrogate" in by_line[n] for n in (3, 4, 5, 6))
    assert set(events.column("event_id").to_pylist()) >= {"n2", "s5", "h1", "f1", "z1"}
    assert events.filter(pa.compute.equal(events.column("event_id"), "n2")).column("attributes").to_pylist() == [
        [("y", "ok")]]


def test_the_column_builder_quarantines_rows_it_cannot_convert() -> None:
    sink = _Sink("file:///landing/a.jsonl", NOW_MS * 1000)
    good = ("t", "e1", TS * 1000, None, None, None, None, None, {"k": "v"})
    # Values the parser never gives (an int attribute, a lone surrogate, a ts beyond int64): a parser gap.
    bad: list[Any] = [("t", "e2", TS * 1000, None, None, None, None, None, {"k": 1}),
                      ("t\ud800", "e3", TS * 1000, None, None, None, None, None, None),
                      ("t", "e4", 1 << 70, None, None, None, None, None, None)]
    for number, fields in enumerate([good, *bad, good], 1):
        sink.event(fields, b'{"line": %d}' % number, number)
    table = pa.Table.from_batches(list(sink.batches()))
    is_event = table.column("is_event").to_pylist()
    assert [n for n, e in zip(table.column("line_number").to_pylist(), is_event, strict=True) if e] == [1, 5]
    rejected = table.filter(pa.compute.invert(table.column("is_event")))
    assert rejected.column("line_number").to_pylist() == [2, 3, 4]
    assert set(rejected.column("category").to_pylist()) == {reasons.UNCONVERTIBLE}
    assert rejected.column("raw").to_pylist() == ['{"line": 2}', '{"line": 3}', '{"line": 4}']


def test_gunzip_stops_at_the_bound_and_names_what_broke() -> None:
    body = ok_lines(0, 500)
    whole = gzip.compress(body)
    assert gunzip(whole, len(body)) == Gunzipped(body)
    assert gunzip(whole + whole + b"\0\0", 2 * len(body)) == Gunzipped(body + body)
    got = gunzip(whole + whole, 2 * len(body) - 1)
    assert got.text == b"" and got.problem is not None and "landing_format.max_file_bytes" in got.problem
    bomb = zlib.compress(b"\n" * (64 << 20), 9)  # a zlib stream is no gzip: the header is checked
    got = gunzip(b"\x1f\x8b" + bomb, 1 << 30)
    assert got.text == b"" and got.damage is not None and not got.damage.truncated and got.damage.start == 0
    corrupt = whole[:20] + bytes(b ^ 0x5A for b in whole[20:40]) + whole[40:]
    got = gunzip(corrupt, 1 << 30)  # a member zlib refuses keeps nothing, and the stream stops there
    assert got.text == b"" and got.damage is not None and (got.damage.start, got.damage.end) == (0, len(corrupt))
    assert not got.damage.truncated and got.damage.detail
    got = gunzip(whole + corrupt, 1 << 30)
    assert got.text == body and got.damage is not None and got.damage.start == len(whole)
    half = whole[: len(whole) // 2]
    got = gunzip(half, 1 << 30)  # a member cut short keeps what it decodes to: a prefix of what was written
    assert got.text and body.startswith(got.text) and got.problem is None
    assert got.damage is not None and got.damage.truncated and (got.damage.start, got.damage.end) == (0, len(half))


def hostile_zone(root: Path) -> dict[str, str]:
    """Write a landing zone with good, hostile and unreadable files; return unreadable name -> reason start."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "a-good.jsonl").write_bytes(ok_lines(0, 50))
    (root / "b-hostile.jsonl").write_bytes(b"\xef\xbb\xbf" + b"\r\n".join(HOSTILE_LINES))
    (root / "c-good.json.gz").write_bytes(gzip.compress(ok_lines(100, 50)))
    whole = gzip.compress(ok_lines(200, 2000))
    (root / "d-truncated.json.gz").write_bytes(whole[: len(whole) // 2])
    (root / "e-corrupt.json.gz").write_bytes(whole[:20] + bytes(b ^ 0x5A for b in whole[20:60]) + whole[60:])
    gzip_of_zeros(root / "f-bomb.json.gz", 8 * BOUND)
    (root / "g-too-big.jsonl").write_bytes(ok_lines(5000, BOUND // 40 + 10))
    (root / "h-exactly-the-bound.jsonl").write_bytes(b"\n" * BOUND)
    (root / "i-good-after.jsonl").write_bytes(ok_lines(300, 5))
    return {"f-bomb.json.gz": "unreadable_file: decompresses to more than",
            "g-too-big.jsonl": "unreadable_file: file holds more than"}


def intact_lines(data: bytes) -> int:
    """Return how many complete lines a gzip stream of one member cut short decodes to (one plain zlib call)."""
    return zlib.decompressobj(wbits=31).decompress(data).count(b"\n")


def test_unreadable_files_are_quarantined_whole_and_the_other_files_go_on(tmp_path: Path) -> None:
    expected = hostile_zone(tmp_path / "landing")
    files = list_landing_files(tmp_path / "landing")
    vanished = files[0].__class__(f"file://{tmp_path}/landing/vanished.jsonl", 10, files[0].mtime)
    directory = files[0].__class__(f"file://{tmp_path}/landing", 10, files[0].mtime)
    events, quarantine = parse_landing_arrow([*files, vanished, directory], limits=LIMITS, now_ms=NOW_MS)

    whole_file = quarantine.filter(pa.compute.equal(quarantine.column("line_number"), 0)).to_pylist()
    by_name = {Path(r["source_file"]).name: r for r in whole_file}
    assert set(by_name) == {*expected, "vanished.jsonl", "landing"}
    for name, start in expected.items():
        assert by_name[name]["reason"].startswith(start), by_name[name]["reason"]
    assert by_name["vanished.jsonl"]["reason"].startswith("unreadable_file: cannot read the file")
    assert (by_name["vanished.jsonl"]["start_byte"], by_name["vanished.jsonl"]["end_byte"]) == (0, 10)
    for row in whole_file:
        assert row["category"] == reasons.UNREADABLE_FILE and row["raw"] == ""
    # None of an unreadable file's lines are kept; every other file is read whole, a damaged gzip up to the damage.
    event_files = {Path(p).name for p in events.column("source_file").to_pylist()}
    assert event_files == {"a-good.jsonl", "b-hostile.jsonl", "c-good.json.gz", "d-truncated.json.gz",
                           "i-good-after.jsonl"}
    kept = intact_lines((tmp_path / "landing" / "d-truncated.json.gz").read_bytes())
    assert [Path(p).name for p in events.column("source_file").to_pylist()].count("d-truncated.json.gz") == kept
    damaged = {Path(r["source_file"]).name: r for r in quarantine.to_pylist() if r["line_number"] > 0
               and r["category"] == reasons.UNREADABLE_FILE}
    assert set(damaged) == {"d-truncated.json.gz", "e-corrupt.json.gz"}
    assert damaged["d-truncated.json.gz"]["line_number"] == kept + 1
    assert damaged["d-truncated.json.gz"]["reason"].startswith("unreadable_file: gzip stream is truncated")
    assert damaged["e-corrupt.json.gz"]["line_number"] == 1  # its one member is refused: nothing before it
    assert damaged["e-corrupt.json.gz"]["reason"].startswith("unreadable_file: gzip stream is corrupt")
    assert len([p for p in events.column("source_file").to_pylist() if p.endswith("good-after.jsonl")]) == 5


def test_max_file_bytes_is_configured_and_validated() -> None:
    assert LandingConfig().max_file_bytes == 256 * 1024 * 1024
    env = {"LAKESHARD_LANDING_FORMAT_MAX_FILE_BYTES": "1048576"}
    assert load_config(env=env).landing_format.max_file_bytes == 1 << 20
    with pytest.raises(ConfigError, match=r"landing_format\.max_file_bytes"):
        load_config(env=env, overrides={"landing_format": {"max_file_bytes": 0}})


def canonical(rows: list[dict[str, Any]]) -> list[str]:
    """Return rows as sorted JSON texts: maps as sorted pairs, timestamps as naive UTC (Spark gives naive)."""
    out = []
    for row in rows:
        for key, value in row.items():
            if isinstance(value, datetime) and value.tzinfo is not None:
                row[key] = value.astimezone(UTC).replace(tzinfo=None)
        attributes = row.get("attributes")
        if attributes is not None:
            row["attributes"] = sorted(attributes.items() if isinstance(attributes, dict) else attributes)
        out.append(json.dumps(row, default=str, sort_keys=True))
    return sorted(out)


@pytest.mark.slow
def test_the_driver_and_spark_paths_agree_on_a_hostile_zone(spark: SparkSession, tmp_path: Path) -> None:
    hostile_zone(tmp_path / "landing")
    files = list_landing_files(tmp_path / "landing")
    events, quarantine = parse_landing_arrow(files, limits=LIMITS, now_ms=NOW_MS)
    with read_landing(spark, files, limits=LIMITS, now_ms=NOW_MS) as batch:
        spark_events = [r.asDict() for r in batch.events.collect()]
        spark_quarantine = [r.asDict() for r in batch.quarantine.collect()]
    assert canonical(spark_events) == canonical(events.to_pylist())
    assert canonical(spark_quarantine) == canonical(quarantine.to_pylist())
    kept = intact_lines((tmp_path / "landing" / "d-truncated.json.gz").read_bytes())
    assert (events.num_rows, quarantine.num_rows) == (50 + 50 + kept + 5 + 5, 9 + 4)


def test_nesting_around_the_recursion_limit_is_an_event_or_invalid_json(tmp_path: Path) -> None:
    # Decoding and re-encoding an unknown field start at different stack depths: somewhere near the limit a
    # value decodes but does not encode. Every depth around it must give a row, never an exception.
    limit = sys.getrecursionlimit()
    depths = range(limit - 200, limit + 20)
    (tmp_path / "deep.jsonl").write_bytes(b"\n".join(
        b'{"tenant_id":"t","event_id":"%d","ts":%d,"deep":%s%s}' % (d, TS, b"[" * d, b"]" * d) for d in depths))
    events, quarantine = parse_landing_arrow(list_landing_files(tmp_path), limits=LandingConfig(), now_ms=NOW_MS)
    assert events.num_rows + quarantine.num_rows == len(depths) and events.num_rows > 0
    # From Python 3.12 the json codec's nesting counts against a C recursion limit of its own, far above these
    # depths: every one of them is an event there.
    expected = {reasons.INVALID_JSON} if sys.version_info < (3, 12) else set()
    assert set(quarantine.column("category").to_pylist()) == expected


@pytest.mark.parametrize("value", [b"[null, null]", b"[[null], []]", b"[null]"])
def test_a_list_of_nulls_arrow_builds_an_invalid_column_for_is_decided_by_the_exact_rules(
        tmp_path: Path, value: bytes) -> None:
    """For an object member holding a list of nulls, Arrow's JSON reader builds a struct whose list child overruns
    its values: reading that column raised ArrowIndexError and stopped the whole batch. The line is cut out of its
    block like a line Arrow refuses, the exact rules name what is wrong with it, and the other lines are events."""
    bad = b'{"tenant_id":"t","event_id":"x","ts":%d,"attributes":{"":%s},"region":"dup"}' % (TS, value)
    (tmp_path / "a.jsonl").write_bytes(ok_lines(0, 5) + bad + b"\n" + ok_lines(5, 5))
    events, quarantine = parse_landing_arrow(list_landing_files(tmp_path), limits=LIMITS, now_ms=NOW_MS)
    assert sorted(events.column("event_id").to_pylist()) == sorted(str(i) for i in range(10))
    assert quarantine.column("line_number").to_pylist() == [6]
    assert quarantine.column("reason").to_pylist()[0].startswith(f"{reasons.BAD_TYPE}: attributes.")


@pytest.mark.parametrize("seed", [5, 11, 29])
def test_a_planned_range_whose_bytes_changed_is_one_row_carrying_that_range(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    lines = [json.dumps({"tenant_id": "t", "event_id": f"e{i}", "ts": NOW_MS}).encode() + b"\n"
             for i in range(rng.randint(5, 40))]
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"".join(lines))
    first = rng.randrange(len(lines))
    last = rng.randint(first + 1, len(lines))
    start, end = sum(map(len, lines[:first])), sum(map(len, lines[:last]))
    listed = list_landing_files(tmp_path)[0]
    planned = dataclasses.replace(listed, start=start, end=end, first_line=first + 1,
                                  checksum=content_checksum(b"changed" + b"".join(lines[first:last])[7:]))
    events, quarantine = parse_landing_arrow([planned], limits=LIMITS, now_ms=NOW_MS)
    assert events.num_rows == 0
    [row] = quarantine.to_pylist()
    assert row["category"] == reasons.FILE_CHANGED and row["line_number"] == first + 1
    assert (row["start_byte"], row["end_byte"]) == (start, end)


@pytest.mark.parametrize("seed", [7])
def test_spark_quarantines_a_file_gone_after_it_planned_the_read_in_the_same_run(
        spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """A planned file that vanishes after Spark analysed the read, before the task reads it, is one
    ``unreadable_file`` row naming it and its planned range (not a failed job the batch's replay quarantines it in);
    the other files are read, and a file that holds only blank lines is not taken for a vanished one."""
    from lakeshard.landing import spark_read

    rng = random.Random(seed)
    root = tmp_path / "landing"
    root.mkdir()
    for i in range(4):
        (root / f"part-{i}.jsonl").write_bytes(b"".join(
            json.dumps({"tenant_id": f"t{j % 2}", "event_id": f"{i}-{j}", "ts": NOW_MS}).encode() + b"\n"
            for j in range(rng.randint(1, 20))))
    (root / "blank.jsonl").write_bytes(b"\n  \n")
    files = list_landing_files(root)
    victim = next(f for f in files if Path(f.path).name == "part-2.jsonl")
    expected_events, _ = parse_landing_arrow([f for f in files if f is not victim], limits=LIMITS, now_ms=NOW_MS)
    analysed = spark_read._binary_contents

    def then_vanish(*args: Any, **kwargs: Any) -> Any:
        found = analysed(*args, **kwargs)
        (root / "part-2.jsonl").unlink()  # gone after the analysis, before any task reads it
        return found

    monkeypatch.setattr(spark_read, "_binary_contents", then_vanish)
    with read_landing(spark, files, limits=LIMITS, now_ms=NOW_MS) as batch:
        spark_events = sorted((r.source_file, r.line_number) for r in batch.events.collect())
        spark_quarantine = [r.asDict() for r in batch.quarantine.collect()]
    assert spark_events == sorted((r["source_file"], r["line_number"]) for r in expected_events.to_pylist())
    columns = ("source_file", "line_number", "category", "start_byte", "end_byte")
    end = victim.size_bytes if victim.end is None else victim.end
    assert [tuple(r[c] for c in columns) for r in spark_quarantine] == [
        (victim.path, 0, reasons.UNREADABLE_FILE, victim.start, end)]
    [row] = spark_quarantine
    assert row["reason"].startswith("unreadable_file: cannot read the file (") and "\n" not in row["reason"]


@pytest.mark.parametrize("seed", [2, 41])
def test_spark_quarantines_a_file_gone_before_its_read_as_the_driver_does(
        spark: SparkSession, tmp_path: Path, seed: int) -> None:
    """A planned file that is gone when Spark reads (deleted, moved) is one ``unreadable_file`` row naming it and
    its planned range, on the Spark path as on the driver's; the other files are read. No Java trace."""
    rng = random.Random(seed)
    root = tmp_path / "landing zone é"
    root.mkdir()
    for i in range(rng.randint(3, 6)):
        (root / f"part {i}.jsonl").write_bytes(b"".join(
            json.dumps({"tenant_id": f"t{j % 2}", "event_id": f"{i}-{j}", "ts": NOW_MS}).encode() + b"\n"
            for j in range(rng.randint(1, 20))))
    listed = list_landing_files(root)
    victims = rng.sample(range(len(listed)), rng.randint(1, len(listed) - 1))
    files = list(listed)
    for i in victims:  # a planned range of a victim: what it names is what the row carries
        f = listed[i]
        files[i] = dataclasses.replace(f, start=rng.randint(0, f.size_bytes // 2), end=f.size_bytes)
        Path(root / Path(f.path).name).unlink()
    events, quarantine = parse_landing_arrow(files, limits=LIMITS, now_ms=NOW_MS)
    with read_landing(spark, files, limits=LIMITS, now_ms=NOW_MS) as batch:
        spark_events = sorted((r.source_file, r.line_number) for r in batch.events.collect())
        spark_quarantine = [r.asDict() for r in batch.quarantine.collect()]
    assert spark_events == sorted((r["source_file"], r["line_number"]) for r in events.to_pylist())
    expected = sorted((files[i].path, 0, reasons.UNREADABLE_FILE, files[i].start, files[i].end) for i in victims)
    columns = ("source_file", "line_number", "category", "start_byte", "end_byte")
    assert sorted(tuple(r[c] for c in columns) for r in quarantine.to_pylist()) == expected
    assert sorted(tuple(r[c] for c in columns) for r in spark_quarantine) == expected
    for row in spark_quarantine:
        assert row["reason"].startswith("unreadable_file: cannot read the file (") and "\n" not in row["reason"]
        assert Path(row["source_file"].removeprefix("file://")).name in row["reason"]
