"""Landing files over their lifetime: growing files, rewritten files, replays on another clock, symlinks.

Each test routes a small hand-written landing zone with the real router into real Delta tables and checks that
every input line ends up exactly once in ``routed`` or ``quarantine``.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from lakeshard.config import LakeshardConfig, load_config
from lakeshard.lake import TableStore
from lakeshard.landing import arrow_read, listing, spark_read
from lakeshard.routing.router import Router
from lakeshard.routing.unrouted import unrouted_landing
from lakeshard.tables import LANDING_BATCHES, QUARANTINE, ROUTED
from lakeshard.tables.schemas import LANDING_BATCHES_SCHEMA

PATHS = {"driver": 1 << 30, "spark": 0}
HOUR_MS = 3_600_000


class Crash(Exception):
    """Stands in for the process dying at a commit point."""


def _cfg(tmp_path: Path, landing: Path, where: str = "driver", **landing_format: int) -> LakeshardConfig:
    return load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": str(landing),
                                  "landing_format": landing_format,
                                  "routing": {"total_shards": 4, "default_shard_count": 2,
                                              "arrow_max_bytes": PATHS[where]}}, env={})


def _line(i: int, ts_ms: int | None = None, prefix: str = "e") -> bytes:
    ts = ts_ms if ts_ms is not None else int(time.time() * 1000) - HOUR_MS
    return json.dumps({"tenant_id": f"t{i % 3}", "event_id": f"{prefix}{i}", "ts": ts}).encode() + b"\n"


def _routed_ids(store: TableStore, cfg: LakeshardConfig) -> list[str]:
    return [str(x) for x in store.read_table_arrow(cfg.table_uri(ROUTED), ["event_id"]).column("event_id").to_pylist()]


def _quarantined(store: TableStore, cfg: LakeshardConfig) -> list[tuple[str, int, str]]:
    rows = store.read_table_arrow(cfg.table_uri(QUARANTINE), ["source_file", "line_number", "category"])
    return sorted((r["source_file"], r["line_number"], r["category"]) for r in rows.to_pylist())


@pytest.mark.parametrize("where", list(PATHS))
def test_a_file_still_being_written_loses_nothing(
    spark: SparkSession, store: TableStore, tmp_path: Path, where: str
) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    part = landing / "part-0.jsonl"
    lines = [_line(i) for i in range(120)]
    half = len(lines[50]) // 2
    part.write_bytes(b"".join(lines[:50]) + lines[50][:half])  # the producer is in the middle of line 51
    cfg = _cfg(tmp_path, landing, where)

    first = Router(spark, store, cfg).run()
    assert [(r.routed, r.quarantined) for r in first] == [(50, 0)]
    assert first[0].held_back_files == 1 and first[0].held_back_bytes == half
    # What the completionist's backlog sees: the held-back tail, from where routing stopped.
    assert [(f.start, f.first_line) for f in unrouted_landing(store, cfg)] == [(part.stat().st_size - half, 51)]

    with part.open("ab") as f:  # the producer finishes the line and appends 69 more
        f.write(lines[50][half:] + b"".join(lines[51:]))
    second = Router(spark, store, cfg).run()
    assert [(r.routed, r.quarantined, r.held_back_files) for r in second] == [(70, 0, 0)]

    ids = _routed_ids(store, cfg)
    assert sorted(ids) == sorted(f"e{i}" for i in range(120))  # every event, each exactly once
    assert unrouted_landing(store, cfg) == []
    assert _quarantined(store, cfg) == []
    # Line numbers stay physical across the two ranges of the file.
    numbers = store.read_table_arrow(cfg.table_uri(ROUTED), ["event_id", "line_number"]).to_pylist()
    assert all(int(r["event_id"][1:]) + 1 == r["line_number"] for r in numbers)
    assert Router(spark, store, cfg).run() == []


def test_an_unterminated_last_line_is_taken_when_it_is_a_whole_record_or_the_file_is_quiet(
    spark: SparkSession, store: TableStore, tmp_path: Path
) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    whole = landing / "a.jsonl"
    whole.write_bytes(_line(0) + _line(1).rstrip(b"\n"))  # a finished file without a final newline
    cut = landing / "b.jsonl"
    cut.write_bytes(_line(2) + b'{"tenant_id": "t0", "ev')  # abandoned mid-record
    cfg = _cfg(tmp_path, landing, settle_seconds=60)
    reports = Router(spark, store, cfg).run()
    assert sum(r.routed for r in reports) == 3 and reports[-1].held_back_files == 1
    assert _quarantined(store, cfg) == []

    later = datetime.now(UTC) + timedelta(seconds=120)  # quiet for longer than settle_seconds: the cut is final
    reports = Router(spark, store, cfg, clock=lambda: later).run()
    assert [(r.routed, r.quarantined, r.held_back_files) for r in reports] == [(0, 1, 0)]
    assert _quarantined(store, cfg) == [("file://" + str(cut), 2, "invalid_json")]


def test_a_rewritten_file_is_routed_again_from_the_start(
    spark: SparkSession, store: TableStore, tmp_path: Path
) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    part = landing / "part-0.jsonl"
    part.write_bytes(b"".join(_line(i) for i in range(20)))
    cfg = _cfg(tmp_path, landing)
    Router(spark, store, cfg).run()

    part.write_bytes(b"".join(_line(i, prefix="r") for i in range(12)))  # shrunk: a new file under the old name
    assert [r.routed for r in Router(spark, store, cfg).run()] == [12]
    # Same length, other bytes (a rewrite in place): routed again whole.
    part.write_bytes(b"".join(_line(i, prefix="s") for i in range(12)))
    assert [r.routed for r in Router(spark, store, cfg).run()] == [12]
    # Grown, but the bytes before the consumed end changed: not an append, routed again whole.
    part.write_bytes(b"".join(_line(i, prefix="x") for i in range(15)))
    assert [r.routed for r in Router(spark, store, cfg).run()] == [15]
    expected = [f"e{i}" for i in range(20)] + [f"{p}{i}" for p in "rs" for i in range(12)]
    expected += [f"x{i}" for i in range(15)]
    assert sorted(_routed_ids(store, cfg)) == sorted(expected)


@pytest.mark.parametrize("where", list(PATHS))
def test_a_replay_on_a_later_clock_reaches_the_first_attempts_verdicts(
    spark: SparkSession, store: TableStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A record a little beyond the future-skew bound is quarantined when planned; the crash falls between the
    routed and the quarantine commits; the replay runs two hours later, when the record would pass the bound."""
    landing = tmp_path / "landing"
    landing.mkdir()
    now_ms = int(time.time() * 1000)
    near = now_ms + HOUR_MS + 600_000  # 10 minutes beyond now + max_future_seconds
    (landing / "a.jsonl").write_bytes(_line(0) + _line(1, ts_ms=near) + _line(2))
    cfg = _cfg(tmp_path, landing, where, max_future_seconds=3600)

    def die_before_quarantine(table: str, batch: int) -> None:
        if table == QUARANTINE:
            raise Crash(f"killed before committing {table} of batch {batch}")

    with pytest.raises(Crash):
        Router(spark, store, cfg, before_commit=die_before_quarantine).run()
    assert sorted(_routed_ids(store, cfg)) == ["e0", "e2"]

    later = time.time() + 7200  # the wall clock two hours on: the record would now be within the bound
    for reader in (arrow_read, spark_read):  # the clock of both parse paths
        monkeypatch.setattr(reader, "time", SimpleNamespace(time=lambda: later))
    reports = Router(spark, store, cfg, clock=lambda: datetime.fromtimestamp(later, UTC)).run()
    assert [r.replayed for r in reports] == [True]
    assert sorted(_routed_ids(store, cfg)) == ["e0", "e2"]
    assert [(line, category) for _, line, category in _quarantined(store, cfg)] == [(2, "absurd_timestamp")]


def test_a_batch_plan_table_made_before_byte_ranges_keeps_working(
    spark: SparkSession, store: TableStore, tmp_path: Path
) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    done, grown = landing / "a.jsonl", landing / "b.jsonl"
    done.write_bytes(b"".join(_line(i) for i in range(5)))
    grown.write_bytes(b"".join(_line(i, prefix="g") for i in range(5)))
    cfg = _cfg(tmp_path, landing)
    # A lakehouse an older lakeshard routed both files into: its plan table lacks the byte-range columns.
    router = Router(spark, store, cfg)
    old_names = ["batch", "path", "size_bytes", "mtime", "planned_at"]
    uri = cfg.table_uri(LANDING_BATCHES)
    store.create(uri, StructType([f for f in LANDING_BATCHES_SCHEMA.fields if f.name in old_names]))
    listed = {f.path: f for f in listing.list_landing_files(landing)}
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    store.append_arrow(uri, pa.table({
        "batch": pa.array([0, 0], pa.int64()), "path": pa.array(sorted(listed)),
        "size_bytes": pa.array([listed[p].size_bytes for p in sorted(listed)], pa.int64()),
        "mtime": pa.array([listed[p].mtime for p in sorted(listed)], ts),
        "planned_at": pa.array([min(f.mtime for f in listed.values())] * 2, ts)}))
    with grown.open("ab") as f:
        f.write(b"".join(_line(i, prefix="g") for i in range(5, 8)))

    reports = router.run()
    assert set(LANDING_BATCHES_SCHEMA.fieldNames()) <= set(store.schema(uri).fieldNames())
    # The unchanged file stays consumed; the grown one has no anchor to prove its prefix: routed again whole.
    assert [(r.files, r.routed) for r in reports] == [(1, 8)]
    assert sorted(_routed_ids(store, cfg)) == sorted(f"g{i}" for i in range(8))


@pytest.mark.parametrize("where", list(PATHS))
def test_symlinks_are_read_once_and_a_dangling_one_is_reported_until_its_target_appears(
    spark: SparkSession, store: TableStore, tmp_path: Path, where: str
) -> None:
    landing, outside = tmp_path / "landing", tmp_path / "elsewhere"
    (landing / "sub").mkdir(parents=True)
    outside.mkdir()
    (landing / "a.jsonl").write_bytes(b"".join(_line(i, prefix="a") for i in range(3)))
    (landing / "0-alias.jsonl").symlink_to(landing / "a.jsonl")  # a second name for a.jsonl, listed first
    (landing / "sub" / "c.jsonl").write_bytes(b"".join(_line(i, prefix="c") for i in range(2)))
    (landing / "linked").symlink_to(landing / "sub")  # a second name for sub/
    (landing / "sub" / "loop").symlink_to(landing)  # a cycle
    (outside / "d.jsonl").write_bytes(b"".join(_line(i, prefix="d") for i in range(4)))
    (landing / "d.jsonl").symlink_to(outside / "d.jsonl")  # a file kept elsewhere
    (landing / "e.jsonl").symlink_to(outside / "e.jsonl")  # dangling: its target is not there yet
    cfg = _cfg(tmp_path, landing, where)

    reports = Router(spark, store, cfg).run()
    assert sorted(_routed_ids(store, cfg)) == sorted([f"a{i}" for i in range(3)] + ["c0", "c1"]
                                                     + [f"d{i}" for i in range(4)])
    assert reports[-1].dangling_links == ("file://" + str(landing / "e.jsonl"),)

    (outside / "e.jsonl").write_bytes(_line(0, prefix="e"))
    reports = Router(spark, store, cfg).run()
    assert [(r.routed, r.dangling_links) for r in reports] == [(1, ())]
    # Routed under the link's name, a file is the same file when only its own name is left.
    assert {r["source_file"].rsplit("/", 1)[1] for r in store.read_table_arrow(
        cfg.table_uri(ROUTED), ["source_file", "event_id"]).to_pylist() if r["event_id"] == "a0"} == {"0-alias.jsonl"}
    (landing / "0-alias.jsonl").unlink()
    assert Router(spark, store, cfg).run() == []


def test_a_file_rewritten_before_its_batch_is_replayed_is_named_and_its_new_content_routed(
    spark: SparkSession, store: TableStore, tmp_path: Path
) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    part = landing / "a.jsonl"
    part.write_bytes(b"".join(_line(i) for i in range(4)) + b"not json\n")
    cfg = _cfg(tmp_path, landing)

    def die_before_quarantine(table: str, batch: int) -> None:
        if table == QUARANTINE:
            raise Crash(f"killed before committing {table} of batch {batch}")

    with pytest.raises(Crash):
        Router(spark, store, cfg, before_commit=die_before_quarantine).run()
    part.write_bytes(b"".join(_line(i, prefix="n") for i in range(3)))  # rewritten while the router was down

    reports = Router(spark, store, cfg).run()
    assert [(r.replayed, r.routed, r.quarantine_by_category, r.rewritten_files) for r in reports] == [
        (True, 0, {"file_changed": 1}, 0), (False, 3, {}, 1)]
    assert sorted(_routed_ids(store, cfg)) == sorted([f"e{i}" for i in range(4)] + [f"n{i}" for i in range(3)])


def test_ingest_writes_every_event_of_a_growing_file_once_and_says_what_it_held_back(tmp_path: Path) -> None:
    """``lakeshard route`` / ``ingest`` as a user runs them (small: no JVM), through the writers into ``events``."""
    import subprocess
    import sys

    from deltalake import DeltaTable  # an independent reader of what the commands committed

    landing, lakehouse = tmp_path / "landing", tmp_path / "lh"
    landing.mkdir()
    part = landing / "part-0.jsonl"
    lines = [_line(i) for i in range(120)]
    half = len(lines[50]) // 2
    part.write_bytes(b"".join(lines[:50]) + lines[50][:half])
    (landing / "later.jsonl").symlink_to(tmp_path / "not-yet.jsonl")
    command = [sys.executable, "-m", "lakeshard.app.cli"]
    common = ["--lakehouse", str(lakehouse), "--landing", str(landing)]
    run = subprocess.run([*command, "route", *common], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert f"held back 1 files ({half:,} bytes) still being written" in run.stdout
    assert f"warning: file://{landing / 'later.jsonl'} is a symbolic link to a file that does not exist" in run.stderr

    with part.open("ab") as f:
        f.write(lines[50][half:] + b"".join(lines[51:]))
    run = subprocess.run([*command, "ingest", *common], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert "held back" not in run.stdout and "later.jsonl is a symbolic link" in run.stderr
    ids = DeltaTable(str(lakehouse / "events")).to_pyarrow_table(columns=["event_id"]).column("event_id").to_pylist()
    assert sorted(ids) == sorted(f"e{i}" for i in range(120))
