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
from lakeshard.config import load_config
from lakeshard.lake import open_lazy_store
from lakeshard.synth.manifest import read_truth_events
from lakeshard.tables import EVENTS, FSCK_REPAIRS, FUSED_APP_ID, ID_INDEX, ROUTED, ROUTER_APP_ID

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
