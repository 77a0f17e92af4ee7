"""``lakeshard fsck`` on a lakehouse an ingest wrote: every damaged file of every table found and named; with
--repair removed from its table's log in one commit per table and recorded with the rows the log says it held."""

from __future__ import annotations

import json
import random
from datetime import timedelta
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from lakeshard.app.cli import main
from lakeshard.config import load_config
from lakeshard.lake import open_lazy_store
from lakeshard.tables import EVENTS, FSCK_REPAIRS, ID_INDEX, LANDING_BATCHES, PLACEMENTS

DAMAGED = {EVENTS: "truncated", ID_INDEX: "missing", LANDING_BATCHES: "rows twice", PLACEMENTS: "truncated"}


def test_fsck_finds_each_damaged_file_and_repair_removes_and_records_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    landing, lakehouse = tmp_path / "landing", tmp_path / "lh"
    assert main(["generate", "--landing", str(landing), "--events", "240", "--tenants", "4", "--quiet"]) == 0
    assert main(["ingest", "--lakehouse", str(lakehouse), "--landing", str(landing)]) == 0
    assert main(["fsck", "--lakehouse", str(lakehouse)]) == 0
    capsys.readouterr()

    store = open_lazy_store(load_config(overrides={"lakehouse": str(lakehouse)}, env={}))
    victims = {}
    for name, damage in DAMAGED.items():
        uri = str(lakehouse / name)
        files = store.files(uri)
        victim = files[-1]
        on_disk = Path(uri) / unquote(victim.path)
        if damage == "missing":
            on_disk.unlink()
        elif damage == "truncated":
            on_disk.write_bytes(on_disk.read_bytes()[: on_disk.stat().st_size // 2])
        else:  # rewritten with its rows twice: readable, but not what the log says it holds
            rows = pq.read_table(on_disk)
            pq.write_table(pa.concat_tables([rows, rows]), on_disk)
        victims[name] = victim

    assert main(["fsck", "--lakehouse", str(lakehouse)]) == 1
    out = capsys.readouterr().out
    for name, victim in victims.items():
        assert f"{name}: " in out and f"  damaged: {lakehouse / name}: data file {victim.path}" in out
        assert victim.path in {f.path for f in store.files(str(lakehouse / name))}  # a check changes nothing
    assert "4 damaged files left in the log" in out

    versions = {name: DeltaTable(str(lakehouse / name)).version() for name in victims}
    assert main(["fsck", "--lakehouse", str(lakehouse), "--repair"]) == 0
    out = capsys.readouterr().out
    for name, victim in victims.items():
        table = DeltaTable(str(lakehouse / name))  # an independent reader of the repair commit
        assert table.version() == versions[name] + 1
        assert not [u for u in table.file_uris() if unquote(u).endswith(unquote(victim.path))]
        assert f"removed 1 files ({victim.num_records or 0:,} rows by the log) from {name}" in out
    repairs = DeltaTable(str(lakehouse / FSCK_REPAIRS)).to_pyarrow_table().to_pylist()
    assert sorted((r["table_name"], r["path"], r["rows"]) for r in repairs) == sorted(
        (name, v.path, v.num_records) for name, v in victims.items())
    for r in repairs:
        assert json.loads(r["partition_values"]) == victims[r["table_name"]].partition_values and r["problem"]
    assert main(["fsck", "--lakehouse", str(lakehouse)]) == 0


KEY_RANGE_TABLES = (EVENTS, LANDING_BATCHES, PLACEMENTS)


def _shifted(column: pa.ChunkedArray, by: int) -> pa.Array | None:
    """Return ``column``'s values moved by ``by`` (numbers plus it, timestamps plus that many seconds, strings with
    that many characters appended), so its min and max both change; None for a type not moved here."""
    values = column.to_pylist()
    if pa.types.is_integer(column.type):
        return pa.array([None if v is None else v + by for v in values], column.type)
    if pa.types.is_timestamp(column.type):
        return pa.array([None if v is None else v + timedelta(seconds=by) for v in values], column.type)
    if pa.types.is_string(column.type):
        return pa.array([None if v is None else v + "~" * by for v in values], column.type)
    return None


@pytest.mark.parametrize("seed", [3, 17])
def test_fsck_finds_a_file_whose_key_range_is_not_the_logs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int) -> None:
    """A file rewritten with the log's row count but other values in a column the log keeps min/max of (another
    file's bytes, a botched rewrite) is damage: fsck names the column and both ranges, and --repair removes it."""
    rng = random.Random(seed)
    landing, lakehouse = tmp_path / "landing", tmp_path / "lh"
    assert main(["generate", "--landing", str(landing), "--events", str(rng.randint(150, 400)), "--tenants",
                 str(rng.randint(3, 6)), "--seed", str(seed), "--quiet"]) == 0
    assert main(["ingest", "--lakehouse", str(lakehouse), "--landing", str(landing)]) == 0
    assert main(["fsck", "--lakehouse", str(lakehouse)]) == 0  # the log's statistics agree with every footer
    capsys.readouterr()

    store = open_lazy_store(load_config(overrides={"lakehouse": str(lakehouse)}, env={}))
    victims = {}
    for name in KEY_RANGE_TABLES:
        uri = str(lakehouse / name)
        victim = rng.choice(store.files(uri))
        on_disk = Path(uri) / unquote(victim.path)
        original = pq.read_table(on_disk)
        logged = sorted(c for c in set(victim.min_values) & set(victim.max_values)
                        if c in original.column_names and not (isinstance(victim.min_values[c], str)
                                                               and len(str(victim.max_values[c])) >= 30))
        rng.shuffle(logged)
        for column in logged:
            moved = _shifted(original.column(column), rng.randint(1, 5))
            if moved is not None:
                break
        else:
            pytest.fail(f"{name}: no column the log keeps statistics of could be moved: {logged}")
        rewritten = original.set_column(original.column_names.index(column), original.field(column), moved)
        pq.write_table(rewritten.replace_schema_metadata(original.schema.metadata), on_disk)
        assert pq.read_metadata(on_disk).num_rows == victim.num_records  # the row count still agrees
        victims[name] = (victim, column)

    assert main(["fsck", "--lakehouse", str(lakehouse)]) == 1
    out = capsys.readouterr().out
    for name, (victim, column) in victims.items():
        line = next(x for x in out.splitlines() if x.startswith(f"  damaged: {lakehouse / name}: "))
        assert f"data file {victim.path}" in line and f" of {column} is " in line, line
        assert "where the log's minValues says" in line or "where the log's maxValues says" in line, line
    assert f"{len(victims)} damaged files left in the log" in out

    assert main(["fsck", "--lakehouse", str(lakehouse), "--repair"]) == 0
    for name, (victim, _) in victims.items():
        assert victim.path not in {f.path for f in store.files(str(lakehouse / name))}
    assert main(["fsck", "--lakehouse", str(lakehouse)]) == 0
