"""A damaged ``event_ids`` file met by the fused hand-off (``lakeshard ingest``, router and writers in one process)
stops only its shard, as on the two-job path: the batch is handed over through ``routed`` instead, the writers of
the other shards commit their events, the run names the file (table, path, shard) and exits 1, and the stopped
shard's events wait in ``routed``. After ``fsck --repair`` and the refill it names, the next ingest writes them:
``events`` then holds the generator's events exactly once."""

from __future__ import annotations

import random
import shutil
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pytest
from deltalake import DeltaTable  # an independent reader of what the commands committed

from lakeshard.app.cli import main
from lakeshard.config import LakeshardConfig, load_config
from lakeshard.dedupe.writer import ShardWriter
from lakeshard.errors import LakeshardError
from lakeshard.lake import FileInfo, open_lazy_store
from lakeshard.routing.router import Router
from lakeshard.synth.manifest import read_truth_events
from lakeshard.tables import EVENTS, FSCK_REPAIRS, FUSED_APP_ID, ID_INDEX, QUARANTINE, ROUTED, ROUTER_APP_ID
from phase_kills import kill_seed

KEY = ("tenant_id", "event_id", "ts")


def _truth(landing: Path) -> set[tuple[object, ...]]:
    truth = read_truth_events(landing)
    return set(zip(*(truth.column(c).to_pylist() for c in ("tenant_id", "event_id", "ts_ms")), strict=True))


def _keys(lakehouse: Path, table: str, where_shard: str | None = None) -> Counter[tuple[object, ...]]:
    rows = DeltaTable(str(lakehouse / table)).to_pyarrow_table(columns=[*KEY, "shard"]).to_pylist()
    return Counter((r["tenant_id"], r["event_id"], int(r["ts"].timestamp() * 1000)) for r in rows
                   if where_shard is None or str(r["shard"]) == where_shard)


def _ids(lakehouse: Path) -> Counter[tuple[object, ...]]:
    table = DeltaTable(str(lakehouse / ID_INDEX)).to_pyarrow_table(columns=["shard", "interval", "key_hi", "key_lo"])
    return Counter(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True))


@pytest.mark.parametrize(("seed", "damage"), [(3, "truncated"), (17, "missing")])
def test_a_damaged_id_file_met_by_the_fused_hand_off_stops_only_its_shard_and_the_repair_brings_it_back(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int, damage: str) -> None:
    rng = random.Random(seed)
    landing, more, lakehouse = tmp_path / "landing", tmp_path / "more", tmp_path / "lh"
    common = ["--lakehouse", str(lakehouse), "--landing", str(landing)]
    for zone, zone_seed in ((landing, seed), (more, seed + 1000)):
        assert main(["generate", "--landing", str(zone), "--events", str(rng.randint(200, 400)), "--tenants",
                     str(rng.randint(3, 6)), "--seed", str(zone_seed), "--quiet"]) == 0
    first, second = _truth(landing), _truth(more)
    assert main(["ingest", *common]) == 0  # fused: nothing went through routed
    assert DeltaTable(str(lakehouse / ROUTED)).to_pyarrow_table().num_rows == 0
    assert set(_keys(lakehouse, EVENTS)) == first

    store = open_lazy_store(load_config(overrides={"lakehouse": str(lakehouse)}, env={}))
    ids = store.files(str(lakehouse / ID_INDEX))
    assert len({f.partition_values["shard"] for f in ids}) >= 2  # a shard to stop and one to go on
    victim = rng.choice(ids)
    stopped = victim.partition_values["shard"]
    on_disk = lakehouse / ID_INDEX / unquote(victim.path)
    if damage == "missing":
        on_disk.unlink()
    else:
        on_disk.write_bytes(on_disk.read_bytes()[: on_disk.stat().st_size // 2])
    # More events for every shard: a new zone, and the first one again under new names (each of its events a
    # duplicate, so the damaged file's partition is read).
    shutil.copytree(more, landing / "more", ignore=shutil.ignore_patterns("_truth"))
    for f in [p for p in landing.rglob("*.json*") if p.is_file() and "more" not in p.parts and "_truth" not in p.parts]:
        shutil.copy2(f, f.with_name(f"again-{f.name}"))
    capsys.readouterr()

    assert main(["ingest", *common]) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    [named] = [line for line in err.splitlines() if line.startswith("error: ")]
    assert (f"{lakehouse / ID_INDEX}: data file " in named and unquote(victim.path) in unquote(named)
            and f"shard={stopped}" in named)
    assert f"shards {stopped} stopped on a damaged file" in err
    written = _keys(lakehouse, EVENTS)
    assert max(written.values()) == 1  # exactly once
    waiting = set(_keys(lakehouse, ROUTED, where_shard=stopped))
    assert set(written) | waiting == first | second  # nothing lost: written, or waiting in routed for its shard
    assert set(written) >= first | {k for k in second - waiting}  # every other shard's events are written
    assert waiting - first  # the stopped shard has new events waiting
    assert set(written) & (waiting - first) == set()  # nothing of the stopped shard's new events is written
    # The batch went through routed (the plan's mode is what routed's app transaction records).
    assert (DeltaTable(str(lakehouse / ROUTED)).transaction_version(ROUTER_APP_ID) is not None)

    assert main(["fsck", *common[:2], "--repair"]) == 0
    out = capsys.readouterr().out
    repairs = DeltaTable(str(lakehouse / FSCK_REPAIRS)).to_pyarrow_table().to_pylist()
    assert [(r["table_name"], unquote(r["path"])) for r in repairs] == [(ID_INDEX, unquote(victim.path))]
    assert "refill --ids" in out  # the repair names the refill that restores what it removed
    assert main(["refill", *common[:2], "--ids"]) == 0
    assert main(["ingest", *common]) == 0
    written = _keys(lakehouse, EVENTS)
    assert set(written) == first | second and max(written.values()) == 1  # the generators' events, exactly once
    ids_now = _ids(lakehouse)
    assert max(ids_now.values()) == 1 and sum(ids_now.values()) == len(written)  # each event indexed once
    # The fused hand-off goes on: a later zone's batch is fused again once the damage is repaired.
    fused_before = DeltaTable(str(lakehouse / EVENTS)).transaction_version(FUSED_APP_ID)
    for f in [p for p in (landing / "more").rglob("*.json*") if p.is_file()]:
        shutil.copy2(f, f.with_name(f"third-{f.name}"))
    assert main(["ingest", *common]) == 0
    assert DeltaTable(str(lakehouse / EVENTS)).transaction_version(FUSED_APP_ID) != fused_before
    assert _keys(lakehouse, EVENTS) == written


class Crash(LakeshardError):
    """Stands in for the process dying at a commit point."""


Keys = set[tuple[object, ...]]


def _damaged_zone(tmp_path: Path, rng: random.Random, seed: int) -> tuple[Path, Path, FileInfo, Keys]:
    """Return a lakehouse ingested once (fused), one of its ``event_ids`` files cut short, and the landing zone with
    more events for every shard (a new zone, the first one again under new names); and the generators' keys."""
    landing, more, lakehouse = tmp_path / "landing", tmp_path / "more", tmp_path / "lh"
    for zone, zone_seed in ((landing, seed), (more, seed + 1000)):
        assert main(["generate", "--landing", str(zone), "--events", str(rng.randint(150, 300)), "--tenants",
                     str(rng.randint(3, 5)), "--seed", str(zone_seed), "--quiet"]) == 0
    truth = _truth(landing) | _truth(more)
    assert main(["ingest", "--lakehouse", str(lakehouse), "--landing", str(landing)]) == 0
    victim = rng.choice(open_lazy_store(_config(lakehouse, landing)).files(str(lakehouse / ID_INDEX)))
    on_disk = lakehouse / ID_INDEX / unquote(victim.path)
    on_disk.write_bytes(on_disk.read_bytes()[: on_disk.stat().st_size // 2])
    shutil.copytree(more, landing / "more", ignore=shutil.ignore_patterns("_truth"))
    for f in [p for p in landing.rglob("*.json*") if p.is_file() and "more" not in p.parts and "_truth" not in p.parts]:
        shutil.copy2(f, f.with_name(f"again-{f.name}"))
    return lakehouse, landing, victim, truth


def _config(lakehouse: Path, landing: Path) -> LakeshardConfig:
    return load_config(overrides={"lakehouse": str(lakehouse), "landing": str(landing)}, env={})


def _fused_run(lakehouse: Path, landing: Path, *, die_at: int = 0, die_when: tuple[str, str] | None = None,
               seed: int = 0) -> tuple[int, dict[int, object]]:
    """Run the fused hand-off (router and writers of every shard in this process) over the zone; return how many
    commit points it passed and the shards it stopped. With ``die_at``, raise :class:`Crash` at that commit point;
    with ``die_when`` (``(first, then)``), at the first ``then`` commit point after a ``first`` one."""
    cfg = _config(lakehouse, landing)
    store = open_lazy_store(cfg)
    calls: list[str] = []

    def point(table: str, *batch: int) -> None:
        calls.append(table)
        if (die_at and len(calls) == die_at) or (die_when is not None and table == die_when[1]
                                                  and die_when[0] in calls[:-1]):
            raise Crash(f"killed at commit point {len(calls)} ({table}); LAKESHARD_KILL_SEED={seed}")

    writer = ShardWriter(None, store, cfg, list(range(cfg.routing.total_shards)), before_commit=point)
    Router(None, store, cfg, handoff=writer, fused=True, before_commit=point).run()
    writer.run()
    return len(calls), dict(writer.stopped)


def _repair_and_finish(lakehouse: Path, landing: Path, victim: FileInfo, truth: set[tuple[object, ...]]) -> None:
    """Restart after a crash, then repair: the restart stops the victim's shard, ``fsck --repair`` and
    ``refill --ids`` mend the index, the next ingest ends with ``truth`` exactly once, each event indexed once."""
    common = ["--lakehouse", str(lakehouse), "--landing", str(landing)]
    assert main(["ingest", *common]) == 1  # the stopped shard's rows still wait in routed
    assert set(_keys(lakehouse, EVENTS)) | set(_keys(lakehouse, ROUTED, victim.partition_values["shard"])) == truth
    assert main(["fsck", *common[:2], "--repair"]) == 0
    assert main(["refill", *common[:2], "--ids"]) == 0
    assert main(["ingest", *common]) == 0
    written = _keys(lakehouse, EVENTS)
    assert set(written) == truth and max(written.values()) == 1
    ids = _ids(lakehouse)
    assert max(ids.values()) == 1 and sum(ids.values()) == len(written)


@pytest.mark.parametrize("between", [(ROUTED, EVENTS), (ROUTED, QUARANTINE), (ROUTED, ID_INDEX)])
def test_a_crash_after_a_fused_batch_went_through_routed_is_replayed_the_same_way(
        tmp_path: Path, between: tuple[str, str]) -> None:
    """Killed after the batch's routed commit, before the shard writers' commits (or the router's quarantine
    commit): the restart finds routed at the batch and finishes it through routed, never fused as well."""
    lakehouse, landing, victim, truth = _damaged_zone(tmp_path, random.Random(29), 29)
    with pytest.raises(Crash):
        _fused_run(lakehouse, landing, die_when=between)
    assert DeltaTable(str(lakehouse / ROUTED)).transaction_version(ROUTER_APP_ID) is not None
    _repair_and_finish(lakehouse, landing, victim, truth)


def test_a_crash_at_a_random_commit_point_of_a_run_that_hands_a_batch_back_ends_exactly_once(tmp_path: Path) -> None:
    seed = kill_seed()
    print(f"LAKESHARD_KILL_SEED={seed}")
    rng = random.Random(seed)
    lakehouse, landing, victim, truth = _damaged_zone(tmp_path, rng, rng.randint(1, 10_000))
    # The commit points an undisturbed run passes (on a copy): the crash lands at one of them.
    rehearsal = tmp_path / "rehearsal"
    shutil.copytree(lakehouse, rehearsal)
    points, stopped = _fused_run(rehearsal, landing)
    assert stopped.keys() == {int(victim.partition_values["shard"] or -1)}, seed
    die_at = rng.randint(1, points)
    with pytest.raises(Crash):
        _fused_run(lakehouse, landing, die_at=die_at, seed=seed)
    _repair_and_finish(lakehouse, landing, victim, truth)
