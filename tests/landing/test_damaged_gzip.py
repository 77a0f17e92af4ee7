"""A damaged gzip landing file gives up every intact record: whole members and the complete lines decoded before
the damage are parsed as usual, the damaged remainder is one ``unreadable_file`` quarantine row that names its
compressed byte range and holds its decompressed bytes.

The expectation is computed from how each file was built (its lines, its members, where it was cut); the only
decoding the tests do is one plain ``zlib`` call on the member that was cut, to learn how much of it a reader can
decode at all.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import tempfile
import time
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import accumulate
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeshard.config import LakeshardConfig, LandingConfig, load_config
from lakeshard.landing import list_landing_files, parse_landing_arrow, read_landing, reasons
from lakeshard.landing.gzip import GZIP_HEADER_BYTES
from lakeshard.landing.listing import scan_landing
from lakeshard.routing.lifecycle import plan_intake
from lakeshard.routing.router import Router
from lakeshard.tables import EVENTS, QUARANTINE, ROUTED

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from lakeshard.lake import TableStore

NOW_MS = int(time.time() * 1000)
LIMITS = LandingConfig(max_file_bytes=1 << 20)
KINDS = ("event", "event", "event", "bad", "blank")
RANGE = re.compile(r"compressed bytes \[(\d+), (\d+)\)")


def line_of(kind: str, number: int) -> bytes:
    """Return line ``number`` of a file: a valid event whose id names its line, a broken record, or blank."""
    if kind == "event":
        return json.dumps({"tenant_id": f"t{number % 3}", "event_id": f"e{number}",
                           "ts": NOW_MS - 3_600_000, "message": "x" * (number % 17)}).encode()
    if kind == "bad":
        return b'{"tenant_id": "t1", "event_id": "cut' + str(number).encode()
    return b" " * (number % 3)


@dataclass(frozen=True)
class Damaged:
    """A gzip file of ``content`` in members, cut at byte ``cut``: what it holds and what a reader can decode."""

    content: bytes  # every line, as the producer meant to write them
    data: bytes  # the file's bytes
    boundaries: list[int]  # compressed offsets where members start, and the stream's end

    @property
    def cut(self) -> int:
        return len(self.data)

    @property
    def member(self) -> int:
        """Return the index of the member the cut falls inside, or -1 when it falls on a member boundary."""
        if self.cut in self.boundaries:
            return -1
        return max(i for i, b in enumerate(self.boundaries) if b < self.cut)

    def intact(self) -> bytes:
        """Return the decompressed bytes a reader can trust: whole members, then what the cut member decodes to."""
        whole = self.boundaries[self.member] if self.member >= 0 else self.cut
        text = b"".join(gzip.decompress(self.data[a:b]) for a, b in zip(self.boundaries, self.boundaries[1:],
                                                                       strict=False) if b <= whole)
        if self.member >= 0:
            text += zlib.decompressobj(wbits=31).decompress(self.data[whole:])
        return text


def damaged(kinds: list[str], terminated: bool, member_cuts: list[int], cut: int) -> Damaged:
    """Return the file of these lines, written as gzip members split at ``member_cuts`` (byte offsets of the
    text, anywhere, even inside a line) and cut at compressed byte ``cut`` (clamped to the stream, and to at least
    the bytes gzip is recognised by: a file of fewer bytes cannot be told from text)."""
    content = b"\n".join(line_of(kind, n) for n, kind in enumerate(kinds, 1)) + (b"\n" if terminated else b"")
    edges = sorted({c for c in member_cuts if 0 < c < len(content)})
    chunks = [content[a:b] for a, b in zip([0, *edges], [*edges, len(content)], strict=True)]
    members = [gzip.compress(chunk, mtime=0) for chunk in chunks]
    boundaries = [0, *accumulate(len(m) for m in members)]
    stream = b"".join(members)
    return Damaged(content, stream[: max(GZIP_HEADER_BYTES, min(cut, len(stream)))], boundaries)


@st.composite
def damaged_files(draw: st.DrawFn) -> Damaged:
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=40))
    terminated = draw(st.booleans())
    member_cuts = draw(st.lists(st.integers(1, 4000), max_size=4))
    whole = damaged(kinds, terminated, member_cuts, 1 << 30)
    return damaged(kinds, terminated, member_cuts, draw(st.integers(GZIP_HEADER_BYTES, whole.cut)))


def rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r["line_number"])


def check_verdict(f: Damaged, events: pa.Table, quarantine: pa.Table) -> None:
    """Assert the parse of ``f`` routed every complete line of its intact prefix once and quarantined the rest as
    one row naming the compressed bytes of the damaged member."""
    intact = f.intact()
    if f.member < 0:  # cut on a member boundary: a whole, shorter gzip stream, read to its end
        routed_text, damage = intact, None
    else:
        end = intact.rfind(b"\n") + 1
        routed_text, damage = intact[:end], intact[end:]
    lines = routed_text.split(b"\n")
    if routed_text.endswith(b"\n") or not routed_text:
        lines = lines[:-1]
    expected = {n for n, line in enumerate(lines, 1) if line.strip(b" \t\r")}
    got_events = rows(events)
    rejected = rows(quarantine)
    damage_rows = [r for r in rejected if r["category"] == reasons.UNREADABLE_FILE]
    per_line = [r for r in rejected if r["category"] != reasons.UNREADABLE_FILE]
    numbers = [r["line_number"] for r in got_events] + [r["line_number"] for r in per_line]
    assert sorted(numbers) == sorted(expected)  # each complete line of the intact prefix exactly once
    assert all(r["event_id"] == f"e{r['line_number']}" for r in got_events)
    assert all(r["category"] == reasons.INVALID_JSON for r in per_line)
    if damage is None:
        assert damage_rows == []
        return
    assert len(damage_rows) == 1, damage_rows
    row = damage_rows[0]
    assert row["line_number"] == routed_text.count(b"\n") + 1
    assert RANGE.search(row["reason"]).groups() == (str(f.boundaries[f.member]), str(f.cut)), row["reason"]  # type: ignore[union-attr]
    assert (row["start_byte"], row["end_byte"]) == (f.boundaries[f.member], f.cut)  # the range as data
    assert all(r["start_byte"] is None and r["end_byte"] is None for r in per_line)  # a line says where by number
    assert row["raw"].encode() == damage and row["size_bytes"] == len(damage) and not row["raw_truncated"]


@given(damaged_files())
@settings(max_examples=400, derandomize=True)
def _parse_damaged(f: Damaged) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "part.json.gz"
        path.write_bytes(f.data)
        events, quarantine = parse_landing_arrow(list_landing_files(tmp), limits=LIMITS, now_ms=NOW_MS)
    check_verdict(f, events, quarantine)


def test_a_gzip_cut_anywhere_gives_up_every_complete_line_before_the_cut() -> None:
    _parse_damaged()


def test_a_cut_inside_a_later_member_keeps_the_whole_members_before_it() -> None:
    kinds = ["event"] * 30
    f = damaged(kinds, True, [700, 1400], 0)
    f = damaged(kinds, True, [700, 1400], f.boundaries[2] + 25)  # 25 bytes into the third member
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "part.json.gz").write_bytes(f.data)
        events, quarantine = parse_landing_arrow(list_landing_files(tmp), limits=LIMITS, now_ms=NOW_MS)
    assert f.member == 2 and events.num_rows >= f.content[:1400].count(b"\n")
    check_verdict(f, events, quarantine)


def test_a_corrupt_member_and_trailing_garbage_cost_only_what_follows_the_whole_members() -> None:
    body = b"".join(line_of("event", n) + b"\n" for n in range(1, 41))
    first, second, third = body[:1000], body[1000:2000], body[2000:]
    a, b, c = (gzip.compress(part, mtime=0) for part in (first, second, third))
    broken = b[:30] + bytes(x ^ 0x5A for x in b[30:60]) + b[60:]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "a-corrupt.json.gz").write_bytes(a + broken + c)
        (Path(tmp) / "b-garbage.json.gz").write_bytes(a + b + b"not gzip at all\n")
        events, quarantine = parse_landing_arrow(list_landing_files(tmp), limits=LIMITS, now_ms=NOW_MS)
    by_file: dict[str, list[int]] = {}
    for r in events.to_pylist():
        by_file.setdefault(Path(r["source_file"]).name, []).append(r["line_number"])
    complete_in_a = first.count(b"\n")
    complete_in_ab = (first + second).count(b"\n")
    assert sorted(by_file["a-corrupt.json.gz"]) == list(range(1, complete_in_a + 1))
    assert sorted(by_file["b-garbage.json.gz"]) == list(range(1, complete_in_ab + 1))
    damage = {Path(r["source_file"]).name: r for r in quarantine.to_pylist()}
    assert len(damage) == quarantine.num_rows == 2
    corrupt, garbage = damage["a-corrupt.json.gz"], damage["b-garbage.json.gz"]
    assert corrupt["reason"].startswith("unreadable_file: gzip stream is corrupt")
    assert RANGE.search(corrupt["reason"]).groups() == (str(len(a)), str(len(a + broken + c)))  # type: ignore[union-attr]
    assert (corrupt["start_byte"], corrupt["end_byte"]) == (len(a), len(a + broken + c))
    assert corrupt["line_number"] == complete_in_a + 1
    # The line member a leaves unfinished is kept in raw; what the corrupt member decoded to is not trusted.
    assert corrupt["raw"].encode().startswith(first[first.rfind(b"\n") + 1 :])
    assert garbage["reason"].startswith("unreadable_file: gzip stream is corrupt")
    assert RANGE.search(garbage["reason"]).groups() == (str(len(a + b)), str(len(a + b) + 16))  # type: ignore[union-attr]
    assert (garbage["start_byte"], garbage["end_byte"]) == (len(a + b), len(a + b) + 16)
    assert garbage["line_number"] == complete_in_ab + 1
    assert garbage["raw"].encode() == (first + second)[(first + second).rfind(b"\n") + 1 :]


def test_the_rest_s_raw_keeps_its_first_64_kib_and_size_bytes_counts_all_of_it() -> None:
    body = line_of("event", 1) + b"\n" + b'{"message": "' + "é".encode() * 60_000
    data = gzip.compress(body, mtime=0)
    cut = data[: len(data) - 40]
    rest = zlib.decompressobj(wbits=31).decompress(cut)[len(line_of("event", 1)) + 1 :]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "long.json.gz").write_bytes(cut)
        events, quarantine = parse_landing_arrow(list_landing_files(tmp), limits=LIMITS, now_ms=NOW_MS)
    assert events.column("event_id").to_pylist() == ["e1"]
    [row] = quarantine.to_pylist()
    assert row["line_number"] == 2 and row["size_bytes"] == len(rest) > 64 * 1024 and row["raw_truncated"]
    raw = row["raw"].encode()
    assert rest.startswith(raw) and 64 * 1024 - 4 < len(raw) <= 64 * 1024  # cut on a character boundary
    assert f"the {len(rest)} decompressed bytes from line 2 on" in row["reason"]


def seeded_files(count: int) -> list[Damaged]:
    rng = random.Random(34)
    out = []
    for _ in range(count):
        kinds = [rng.choice(KINDS) for _ in range(rng.randint(1, 60))]
        terminated, member_cuts = rng.random() < 0.5, [rng.randint(1, 5000) for _ in range(rng.randint(0, 4))]
        whole = damaged(kinds, terminated, member_cuts, 1 << 30)
        out.append(damaged(kinds, terminated, member_cuts, rng.randint(GZIP_HEADER_BYTES, whole.cut)))
    return out


def test_spark_reaches_the_driver_parse_s_verdicts_on_damaged_gzip(spark: SparkSession, tmp_path: Path) -> None:
    files = seeded_files(16)
    landing = tmp_path / "landing"
    landing.mkdir()
    for i, f in enumerate(files):
        (landing / f"part-{i:02d}.json.gz").write_bytes(f.data)
    listed = list_landing_files(landing)
    events, quarantine = parse_landing_arrow(listed, limits=LIMITS, now_ms=NOW_MS)
    assert sum(f.member >= 0 for f in files) >= 10  # most files are cut inside a member
    for i, f in enumerate(files):
        name = f"part-{i:02d}.json.gz"
        check_verdict(f, events.filter(_named(events, name)), quarantine.filter(_named(quarantine, name)))
    with read_landing(spark, listed, limits=LIMITS, now_ms=NOW_MS) as batch:
        spark_events = sorted(tuple(r) for r in batch.events.select("source_file", "line_number", "event_id")
                              .collect())
        spark_quarantine = sorted(tuple(r) for r in batch.quarantine.select(
            "source_file", "line_number", "reason", "raw", "size_bytes", "start_byte", "end_byte").collect())
    columns = ["source_file", "line_number", "event_id"]
    assert spark_events == sorted(tuple(r.values()) for r in events.select(columns).to_pylist())
    columns = ["source_file", "line_number", "reason", "raw", "size_bytes", "start_byte", "end_byte"]
    assert spark_quarantine == sorted(tuple(r.values()) for r in quarantine.select(columns).to_pylist())


def _named(table: pa.Table, name: str) -> Any:
    import pyarrow.compute as pc

    return pc.ends_with(table.column("source_file"), "/" + name)


def _cfg(tmp_path: Path, landing: Path, where: str) -> LakeshardConfig:
    return load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": str(landing),
                                  "routing": {"total_shards": 4, "default_shard_count": 2,
                                              "arrow_max_bytes": {"driver": 1 << 30, "spark": 0}[where]}}, env={})


class Crash(Exception):
    """Stands in for the process dying at a commit point."""


def _settle(path: Path) -> None:
    old = time.time() - 7200  # the producer stopped writing it two hours ago
    os.utime(path, (old, old))


@pytest.mark.parametrize("where", ["driver", "spark"])
def test_the_router_holds_an_unsettled_cut_gzip_back_then_routes_its_intact_lines_once_across_a_replay(
    spark: SparkSession, store: TableStore, tmp_path: Path, where: str
) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    f = damaged(["event"] * 50, True, [1500], 0)
    f = damaged(["event"] * 50, True, [1500], f.boundaries[1] + (f.boundaries[2] - f.boundaries[1]) // 2)
    part = landing / "part.json.gz"
    part.write_bytes(f.data)
    cfg = _cfg(tmp_path, landing, where)

    # Fresh, the cut stream may be a producer still writing it: held back, nothing routed or quarantined.
    intake = plan_intake(scan_landing(landing), {}, now=datetime.now(UTC), settle_seconds=60, max_files=10,
                         max_bytes=1 << 30)
    assert intake.ranges == [] and [h.reason for h in intake.held_back] == ["gzip stream still being written"]
    assert Router(spark, store, cfg).run() == []

    _settle(part)

    def die_before_quarantine(table: str, batch: int) -> None:
        if table == QUARANTINE:
            raise Crash(f"killed before committing {table} of batch {batch}")

    with pytest.raises(Crash):
        Router(spark, store, cfg, before_commit=die_before_quarantine).run()
    replay = Router(spark, store, cfg).run()
    assert [r.replayed for r in replay] == [True]
    Router(spark, store, cfg).run()  # nothing new: the file was consumed

    intact = f.intact()
    complete = intact[: intact.rfind(b"\n") + 1].count(b"\n")
    routed = store.read_table_arrow(cfg.table_uri(ROUTED), ["event_id"]).column("event_id").to_pylist()
    assert sorted(routed) == sorted(f"e{n}" for n in range(1, complete + 1))
    assert complete >= f.content[:1500].count(b"\n")
    quarantined = store.read_table_arrow(cfg.table_uri(QUARANTINE), ["line_number", "category", "reason", "start_byte",
                                                                       "end_byte"]).to_pylist()
    assert [(r["line_number"], r["category"]) for r in quarantined] == [(complete + 1, reasons.UNREADABLE_FILE)]
    assert (quarantined[0]["start_byte"], quarantined[0]["end_byte"]) == (f.boundaries[1], f.cut)
    assert RANGE.search(quarantined[0]["reason"]).groups() == (str(f.boundaries[1]), str(f.cut))  # type: ignore[union-attr]


def test_lakeshard_ingest_routes_the_intact_records_of_a_cut_gzip_exactly_once(spark: object, tmp_path: Path) -> None:
    from deltalake import DeltaTable  # an independent reader of what the command committed

    from lakeshard.app.cli import main

    landing, lakehouse = tmp_path / "landing", tmp_path / "lh"
    landing.mkdir()
    plain = b"".join(line_of("event", n) + b"\n" for n in range(1000, 1012))
    (landing / "a-plain.jsonl").write_bytes(plain)
    kinds = ["event"] * 40 + ["bad"] * 2 + ["event"] * 40
    f = damaged(kinds, True, [2000, 4000], 0)
    f = damaged(kinds, True, [2000, 4000], f.boundaries[2] + 40)
    (landing / "b-cut.json.gz").write_bytes(f.data)
    for path in landing.iterdir():
        _settle(path)
    intact = f.intact()
    complete = intact[: intact.rfind(b"\n") + 1].count(b"\n")
    assert complete >= 42  # both bad lines lie inside the intact prefix
    common = ["--lakehouse", str(lakehouse), "--landing", str(landing)]
    for _ in range(2):  # a second run finds nothing new
        assert main(["ingest", *common]) == 0
    cfg = load_config(overrides={"lakehouse": str(lakehouse)}, env={})
    # `lakeshard ingest` hands its batches to the writers in memory (the fused hand-off): they are in events.
    written = DeltaTable(cfg.table_uri(EVENTS)).to_pyarrow_table(columns=["event_id"]).column("event_id").to_pylist()
    assert sorted(written) == sorted([f"e{n}" for n in range(1000, 1012)]
                                    + [f"e{n}" for n in range(1, complete + 1) if kinds[n - 1] == "event"])
    quarantine = DeltaTable(cfg.table_uri(QUARANTINE)).to_pyarrow_table(
        columns=["source_file", "line_number", "category"]).to_pylist()
    assert sorted((Path(r["source_file"]).name, r["line_number"], r["category"]) for r in quarantine) == [
        ("b-cut.json.gz", 41, reasons.INVALID_JSON), ("b-cut.json.gz", 42, reasons.INVALID_JSON),
        ("b-cut.json.gz", complete + 1, reasons.UNREADABLE_FILE)]
