"""A damaged ``routed`` file stops only its shard: the writers of the other shards commit their events, the run names
the file (table, path, shard) on one line and exits 1; ``fsck --repair`` removes the file, and the shard then goes
on from the files left (the removed file's events come back only by routing its landing bytes again)."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable  # an independent reader of what the commands committed

from lakeshard.app.cli import main
from lakeshard.tables import EVENTS, FSCK_REPAIRS, ROUTED

KEY = ("tenant_id", "event_id", "ts")


def _keys(rows: list[dict[str, object]]) -> list[tuple[object, ...]]:
    return [tuple(r[k] for k in KEY) for r in rows]


@pytest.mark.parametrize(("engine", "damage", "seed"), [("arrow", "truncated", 4), ("arrow", "missing", 9),
                                                        ("spark", "truncated", 13)])
def test_a_damaged_routed_file_stops_only_its_shard_and_fsck_repair_lets_it_go_on(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        engine: str, damage: str, seed: int) -> None:
    rng = random.Random(seed)
    monkeypatch.setenv("LAKESHARD_DEDUPE_ARROW_MAX_BYTES", "0" if engine == "spark" else str(64 << 20))
    landing, lakehouse = tmp_path / "landing", tmp_path / "lh"
    assert main(["generate", "--landing", str(landing), "--events", str(rng.randint(200, 500)), "--tenants",
                 str(rng.randint(3, 7)), "--seed", str(seed), "--quiet"]) == 0
    assert main(["route", "--lakehouse", str(lakehouse), "--landing", str(landing)]) == 0
    routed_uri = str(lakehouse / ROUTED)
    routed = DeltaTable(routed_uri)
    by_file = {unquote(u): pq.read_table(unquote(u).removeprefix("file://")).to_pylist() for u in routed.file_uris()}
    # routed is partitioned by shard: each file's shard as its add action says
    adds = pa.table(routed.get_add_actions(flatten=True)).select(["path", "partition.shard"]).to_pylist()
    shard_by_path = {unquote(a["path"]): str(a["partition.shard"]) for a in adds}
    shard_of = {f: shard_by_path[Path(f).relative_to(lakehouse / ROUTED).as_posix()] for f in by_file}
    assert len(set(shard_of.values())) >= 2  # a shard to stop and one to go on
    victim = rng.choice(sorted(by_file))
    on_disk = Path(victim.removeprefix("file://"))
    stopped = shard_of[victim]
    if damage == "missing":
        on_disk.unlink()
    else:
        on_disk.write_bytes(on_disk.read_bytes()[: on_disk.stat().st_size // 2])
    capsys.readouterr()

    assert main(["ingest", "--lakehouse", str(lakehouse), "--landing", str(landing)]) == 1
    out, err = capsys.readouterr()
    relative = on_disk.relative_to(lakehouse / ROUTED).as_posix()
    [named] = [line for line in err.splitlines() if line.startswith("error: ")]
    assert f"{routed_uri}: data file " in named and relative in unquote(named) and f"(shard={stopped})" in named
    assert f"shards {stopped} stopped on a damaged file" in err and "Traceback" not in out + err
    written = Counter(_keys(DeltaTable(str(lakehouse / EVENTS)).to_pyarrow_table(columns=list(KEY)).to_pylist()))
    assert max(written.values()) == 1  # exactly once
    other_shards = {k for f, rows in by_file.items() if shard_of[f] != stopped for k in _keys(rows)}
    assert set(written) == other_shards  # every other shard written, nothing of the stopped one

    assert main(["fsck", "--lakehouse", str(lakehouse), "--repair"]) == 0
    repairs = DeltaTable(str(lakehouse / FSCK_REPAIRS)).to_pyarrow_table().to_pylist()
    assert [(r["table_name"], unquote(r["path"]), r["rows"]) for r in repairs] == [
        (ROUTED, relative, len(by_file[victim]))]
    assert main(["ingest", "--lakehouse", str(lakehouse), "--landing", str(landing)]) == 0
    written = Counter(_keys(DeltaTable(str(lakehouse / EVENTS)).to_pyarrow_table(columns=list(KEY)).to_pylist()))
    assert max(written.values()) == 1
    left = {k for f, rows in by_file.items() if f != victim for k in _keys(rows)}
    assert set(written) == left  # the shard went on from the files left; the removed file's rows are not there
