"""``lakeshard refill --placements`` after ``lakeshard fsck --repair`` removed a damaged ``placements`` file: each
window's placement is found again from the shards its events went to, so a late copy of one of them still lands
on the shard that holds its key; a window that several placements fit is named, not guessed."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import unquote

import pytest
from deltalake import DeltaTable  # an independent reader of what the commands committed

from lakeshard.app.cli import main
from lakeshard.config import load_config
from lakeshard.lake import open_lazy_store
from lakeshard.routing.hashing import event_hash
from lakeshard.routing.tables import RoutingTables, TenantSetting
from lakeshard.tables import EVENTS, PLACEMENTS, TENANT_SETTINGS

WINDOW = 300  # routing.window_seconds' default


def _window() -> datetime:
    """Return the start of a placement window three hours ago (inside every timestamp bound, off the hour)."""
    now = datetime.now(UTC) - timedelta(hours=3)
    start = now.replace(minute=10, second=0, microsecond=0)
    return start - timedelta(seconds=int(start.timestamp()) % WINDOW)


def _lines(tenant: str, ids: list[str], start: datetime) -> bytes:
    return b"".join(json.dumps({"tenant_id": tenant, "event_id": i, "service": "api", "message": f"m {i}",
                                "ts": int((start + timedelta(seconds=n % WINDOW)).timestamp() * 1000)}).encode() + b"\n"
                    for n, i in enumerate(ids))


def _placements(lakehouse: Path) -> dict[tuple[str, datetime], tuple[tuple[int, ...], int, int, int, tuple[int, ...]]]:
    rows = DeltaTable(str(lakehouse / PLACEMENTS)).to_pyarrow_table().to_pylist()
    return {(r["tenant_id"], r["window_start"]): (tuple(r["shards"]), r["hash_version"], r["salt"], r["total_shards"],
                                                  tuple(r["excluded"])) for r in rows}


def _damage_placements(lakehouse: Path, *, newest_only: bool = False) -> None:
    store = open_lazy_store(load_config(overrides={"lakehouse": str(lakehouse)}, env={}))
    files = store.files(str(lakehouse / PLACEMENTS))
    for f in sorted(files, key=lambda f: f.modification_time)[-1:] if newest_only else files:
        on_disk = lakehouse / PLACEMENTS / unquote(f.path)
        on_disk.write_bytes(on_disk.read_bytes()[: on_disk.stat().st_size // 2])
    assert main(["fsck", "--lakehouse", str(lakehouse), "--repair"]) == 0
    assert newest_only or not _placements(lakehouse)


def test_a_refilled_placement_keeps_a_late_copy_a_duplicate_after_autosharding_changed_the_count(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A tenant placed on one shard, then given four by the autosharder; its placements file damaged and removed.
    Without the refill the allocator places the window again on four shards and a late copy of its events is
    written a second time; with it, the copy is a duplicate and nothing is written."""
    start = _window()
    landing, lakehouse = tmp_path / "landing zone ü", tmp_path / "lh"
    landing.mkdir()
    loud = [f"ACME évent #{n}" for n in range(60)]
    (landing / "first.jsonl").write_bytes(_lines("acme ü", loud, start) + _lines("q", [f"q{n}" for n in range(9)],
                                                                                  start + timedelta(seconds=7)))
    common = ["--lakehouse", str(lakehouse), "--landing", str(landing)]
    assert main(["ingest", *common]) == 0
    before = _placements(lakehouse)
    assert {len(p[0]) for p in before.values()} == {1}  # routing.default_shard_count: one shard each
    written = DeltaTable(str(lakehouse / EVENTS)).to_pyarrow_table().num_rows
    assert written == 69

    # The autosharder sizes both tenants up from their bytes per second (a tiny target per shard).
    monkeypatch.setenv("LAKESHARD_BALANCING_TARGET_BYTES_PER_SECOND", "1")
    monkeypatch.setenv("LAKESHARD_BALANCING_MAX_SHARDS", "4")
    assert main(["autoshard", "--lakehouse", str(lakehouse), "--apply", "--as-of",
                 (start + timedelta(seconds=WINDOW)).isoformat()]) == 0
    monkeypatch.delenv("LAKESHARD_BALANCING_TARGET_BYTES_PER_SECOND")
    monkeypatch.delenv("LAKESHARD_BALANCING_MAX_SHARDS")
    counts = {r["tenant_id"]: r["shard_count"] for r in DeltaTable(str(lakehouse / TENANT_SETTINGS))
              .to_pyarrow_table().to_pylist()}
    assert counts["acme ü"] == 4 and counts["q"] > 1

    _damage_placements(lakehouse)
    assert "lakeshard refill --placements restores the removed placements" in capsys.readouterr().out
    late = tmp_path / "late"
    late.mkdir()
    (late / "again.jsonl").write_bytes(_lines("acme ü", loud, start))  # a producer's late redelivery

    # Without the refill: the window is placed again on four shards and most copies are written again.
    unrefilled = tmp_path / "unrefilled"
    shutil.copytree(lakehouse, unrefilled)
    assert main(["ingest", "--lakehouse", str(unrefilled), "--landing", str(late)]) == 0
    assert DeltaTable(str(unrefilled / EVENTS)).to_pyarrow_table().num_rows > written
    capsys.readouterr()
    # A refill after that ingest: the window the allocator placed again is named, not changed; the other restored.
    assert main(["refill", "--lakehouse", str(unrefilled), "--placements"]) == 1
    captured = capsys.readouterr()
    assert f"cannot restore the placement of acme ü window {start.isoformat()}: the allocator placed it again after " \
           "the repair, on shards" in captured.err, captured.err
    assert "restored 1 placements" in captured.out and "1 windows left as they are" in captured.out, captured.out

    version = DeltaTable(str(lakehouse / PLACEMENTS)).version()
    assert main(["refill", "--lakehouse", str(lakehouse), "--placements", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would restore 2 placements; 0 windows left as they are" in out, out
    assert DeltaTable(str(lakehouse / PLACEMENTS)).version() == version  # a dry run commits nothing

    assert main(["refill", "--lakehouse", str(lakehouse), "--placements"]) == 0
    out = capsys.readouterr().out
    assert f"restored 2 placements in {PLACEMENTS} version {version + 1}" in out, out
    assert _placements(lakehouse) == before  # shards, hash, salt and ring of each, as the allocator made them

    assert main(["refill", "--lakehouse", str(lakehouse), "--placements"]) == 0  # nothing lacks a placement now
    assert "restored 0 placements" in capsys.readouterr().out
    assert DeltaTable(str(lakehouse / PLACEMENTS)).version() == version + 1

    assert main(["ingest", "--lakehouse", str(lakehouse), "--landing", str(late)]) == 0
    assert DeltaTable(str(lakehouse / EVENTS)).to_pyarrow_table().num_rows == written  # the copies: 0 written


def test_a_window_several_placements_fit_is_named_and_left_unplaced(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One event on one shard fits a one-shard placement and a two-shard one alike: the refill names that window
    and restores only the window whose events single out its placement."""
    start = _window()
    landing, lakehouse = tmp_path / "landing", tmp_path / "lh"
    landing.mkdir()
    # An event the second shard of a two-shard placement would not take: both placements send it to the first.
    lone = next(f"lone-{n}" for n in range(100) if event_hash(f"lone-{n}", 2) % 2 == 0)
    busy = [f"b{n}" for n in range(40)]
    (landing / "z.jsonl").write_bytes(_lines("lone", [lone], start) + _lines("busy", busy, start))
    assert main(["ingest", "--lakehouse", str(lakehouse), "--landing", str(landing)]) == 0
    before = _placements(lakehouse)
    cfg = load_config(overrides={"lakehouse": str(lakehouse)}, env={})
    RoutingTables(open_lazy_store(cfg), cfg).set_tenant_settings(
        [TenantSetting("lone", 2), TenantSetting("busy", 2)], reason="an operator")
    _damage_placements(lakehouse)
    version = DeltaTable(str(lakehouse / PLACEMENTS)).version()
    capsys.readouterr()

    assert main(["refill", "--lakehouse", str(lakehouse), "--placements"]) == 1
    captured = capsys.readouterr()
    assert f"cannot restore the placement of lone window {start.isoformat()}: 2 different placements send its 1 " \
           "events to the shards they went to" in captured.err, captured.err
    assert "busy window" not in captured.err
    assert "restored 1 placements" in captured.out and "1 windows left as they are" in captured.out
    after = _placements(lakehouse)
    assert after == {k: v for k, v in before.items() if k[0] == "busy"}  # the ambiguous window is not guessed
    assert DeltaTable(str(lakehouse / PLACEMENTS)).version() == version + 1  # one commit

    assert main(["refill", "--lakehouse", str(lakehouse), "--placements"]) == 1  # still named, nothing committed
    assert "cannot restore the placement of lone window" in capsys.readouterr().err
    assert DeltaTable(str(lakehouse / PLACEMENTS)).version() == version + 1


def test_one_shard_placements_are_restored_whichever_event_hash_the_table_uses(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A lakehouse that placed windows under both event hashes (it changed ``routing.event_hash_version``): a
    one-shard placement sends every event to its shard under either hash, so the two are one placement, not an
    ambiguity."""
    start = _window()
    landing, lakehouse = tmp_path / "landing", tmp_path / "lh"
    landing.mkdir()
    (landing / "old.jsonl").write_bytes(_lines("old", [f"o{n}" for n in range(5)], start))
    monkeypatch.setenv("LAKESHARD_ROUTING_EVENT_HASH_VERSION", "1")
    assert main(["ingest", "--lakehouse", str(lakehouse), "--landing", str(landing)]) == 0
    monkeypatch.delenv("LAKESHARD_ROUTING_EVENT_HASH_VERSION")
    (landing / "new.jsonl").write_bytes(_lines("new", [f"n{n}" for n in range(5)], start + timedelta(seconds=WINDOW)))
    assert main(["ingest", "--lakehouse", str(lakehouse), "--landing", str(landing)]) == 0
    before = _placements(lakehouse)
    assert sorted(v[1] for v in before.values()) == [1, 2]
    _damage_placements(lakehouse, newest_only=True)  # the hash-1 placement stays: the table uses both hashes
    assert set(_placements(lakehouse)) == {k for k in before if k[0] == "old"}
    capsys.readouterr()

    assert main(["refill", "--lakehouse", str(lakehouse), "--placements"]) == 0, capsys.readouterr().err
    assert "restored 1 placements" in capsys.readouterr().out
    assert {k: v[0] for k, v in _placements(lakehouse).items()} == {k: v[0] for k, v in before.items()}
