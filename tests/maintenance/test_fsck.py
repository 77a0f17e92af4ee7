"""``lakeshard fsck`` on a lakehouse an ingest wrote: every damaged file of every table found and named; with
--repair removed from its table's log in one commit per table and recorded with the rows the log says it held."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
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
    out, err = capsys.readouterr()
    for name, victim in victims.items():  # the tables' results on stdout, each damaged file on stderr
        assert f"{name}: " in out and f"  damaged: {lakehouse / name}: data file {victim.path}" in err
        assert victim.path not in out
        assert victim.path in {f.path for f in store.files(str(lakehouse / name))}  # a check changes nothing
    assert "4 damaged files left in the log" in err

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
    err = capsys.readouterr().err
    for name, (victim, column) in victims.items():
        line = next(x for x in err.splitlines() if x.startswith(f"  damaged: {lakehouse / name}: "))
        assert f"data file {victim.path}" in line and f" of {column} is " in line, line
        assert "where the log's minValues says" in line or "where the log's maxValues says" in line, line
    assert f"{len(victims)} damaged files left in the log" in err

    assert main(["fsck", "--lakehouse", str(lakehouse), "--repair"]) == 0
    for name, (victim, _) in victims.items():
        assert victim.path not in {f.path for f in store.files(str(lakehouse / name))}
    assert main(["fsck", "--lakehouse", str(lakehouse)]) == 0


_T0 = datetime(2026, 1, 1, 3, tzinfo=UTC)
# Event ids and messages past Delta's 32-character statistics prefix, with characters on both sides of the
# tie-breakers Delta appends to a truncated max (U+007F, U+FFFD, U+10FFFF).
_EVENT_IDS = ("evt-" + "a" * 40 + "~z", "evt-" + "a" * 28 + "é" * 8, "evt-" + "a" * 28 + "\U0001f600" * 3,
              "evt-" + "b" * 29 + "\x05", "evt-" + "b" * 28 + "\ufffd\U0001f600")
_MESSAGES = ("ü" * 33, "\U0001f600" * 40, "z" * 31 + "\x7f" + "\x00")


def _outside_events_file(lakehouse: Path) -> tuple[Path, dict[str, object], dict[str, object]]:
    """Return the commit file, the exact minValues and maxValues of one ``events`` file appended to a new lakehouse
    (every string column's exact bounds included, as no lakeshard writer keeps them past 32 characters)."""
    from lakeshard.tables import EVENTS_PARTITIONING
    from lakeshard.tables.schemas import EVENTS_SCHEMA

    store = open_lazy_store(load_config(overrides={"lakehouse": str(lakehouse)}, env={}))
    uri = str(lakehouse / EVENTS)
    store.create(uri, EVENTS_SCHEMA, partition_by=EVENTS_PARTITIONING)
    rows = [{"tenant_id": "acme", "event_id": event_id, "ts": _T0 + timedelta(minutes=i, microseconds=1234 + i),
             "service": "svc", "status": "ok", "env": "prod", "host": f"h{i}", "message": _MESSAGES[i % 3],
             "attributes": [("k", "v")], "size_bytes": 100 + i, "shard": 0, "routed_version": 1,
             "hour": "2026-01-01T03", "late": False} for i, event_id in enumerate(_EVENT_IDS)]
    table = pa.Table.from_pylist(rows, schema=store.arrow_schema(uri))
    assert store.append_arrow(uri, table).version == 1
    exact_min: dict[str, object] = {}
    exact_max: dict[str, object] = {}
    for name in ("event_id", "ts", "host", "message", "size_bytes"):
        values = table.column(name).to_pylist()
        exact_min[name], exact_max[name] = min(values), max(values)
    return lakehouse / EVENTS / "_delta_log" / f"{1:020d}.json", exact_min, exact_max


def _delta_ts(value: datetime, *, round_up: bool = False) -> str:
    """Return a timestamp statistic as Delta writes it: milliseconds, truncated (or rounded up, as delta-rs does)."""
    ms = value.replace(microsecond=value.microsecond // 1000 * 1000)
    if round_up and ms != value:
        ms += timedelta(milliseconds=1)
    return ms.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms.microsecond // 1000:03d}Z"


def _delta_max(value: str, tie_breaker: str) -> str:
    """Return a string max as Delta truncates it to 32 characters: the prefix, extended past characters the
    tie-breaker would not exceed, then the tie-breaker."""
    prefix = value[:32]
    rest = value[32:]
    while rest and rest[0] >= tie_breaker:
        prefix, rest = prefix + rest[0], rest[1:]
    return prefix + tie_breaker if rest else value


def _stats(exact_min: dict[str, object], exact_max: dict[str, object], case: str) -> tuple[dict[str, object],
                                                                                       dict[str, object]]:
    """Return the minValues and maxValues an outside writer commits for the file, per case."""
    lo_ts, hi_ts = exact_min["ts"], exact_max["ts"]
    assert isinstance(lo_ts, datetime) and isinstance(hi_ts, datetime)
    lo = {"ts": _delta_ts(lo_ts), "size_bytes": exact_min["size_bytes"], "host": exact_min["host"]}
    hi = {"ts": _delta_ts(hi_ts, round_up=True), "size_bytes": exact_max["size_bytes"], "host": exact_max["host"]}
    strings = ("event_id", "message")
    if case.startswith("truncated"):
        tie_breaker = {"truncated-ascii": "\x7f", "truncated-legacy": "\ufffd", "truncated": "\U0010ffff"}[case]
        lo |= {c: str(exact_min[c])[:32] for c in strings}
        hi |= {c: _delta_max(str(exact_max[c]), tie_breaker) for c in strings}
        hi["ts"] = _delta_ts(hi_ts)  # delta-spark truncates a timestamp max
    elif case == "wider":
        lo |= {"ts": _delta_ts(lo_ts - timedelta(hours=1)), "size_bytes": 0, "host": "",
               "event_id": "", "message": str(exact_min["message"])[:5]}
        hi |= {"ts": _delta_ts(hi_ts + timedelta(days=3)), "size_bytes": 1 << 30, "host": "zzz",
               "event_id": "\U0010ffff", "message": str(exact_max["message"]) + "!"}
    elif case == "min above a value":
        lo["size_bytes"] = int(str(exact_min["size_bytes"])) + 1
    elif case == "max below a value":
        hi["ts"] = _delta_ts(hi_ts - timedelta(seconds=1))
    elif case == "a prefix min above a value":
        lo["event_id"] = str(exact_min["event_id"])[:32] + "~"
    elif case == "a prefix max without a tie-breaker":
        hi["event_id"] = str(exact_max["event_id"])[:32]
    return lo, hi


@pytest.mark.parametrize(("case", "damaged"), [
    ("wider", None), ("truncated", None), ("truncated-ascii", None), ("truncated-legacy", None),
    ("min above a value", "min of size_bytes"), ("max below a value", "max of ts"),
    ("a prefix min above a value", "min of event_id"), ("a prefix max without a tie-breaker", "max of event_id")])
def test_fsck_flags_only_statistics_that_exclude_a_value_of_the_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, damaged: str | None) -> None:
    """Delta lets a writer commit statistics wider than a file's values, and truncates strings past 32 characters
    (a max with a tie-breaker appended): a reader that prunes by them still finds every row, so that is not damage.
    Only a min above a value of the file, or a max below one, is."""
    lakehouse = tmp_path / "lh"
    commit, exact_min, exact_max = _outside_events_file(lakehouse)
    lo, hi = _stats(exact_min, exact_max, case)
    lines = commit.read_text().splitlines()
    [at] = [i for i, line in enumerate(lines) if line.startswith('{"add"')]
    add = json.loads(lines[at])
    stats = json.loads(add["add"]["stats"])
    add["add"]["stats"] = json.dumps(stats | {"minValues": lo, "maxValues": hi})
    lines[at] = json.dumps(add)
    commit.write_text("\n".join(lines) + "\n")  # the file as an outside writer committed it

    assert main(["fsck", "--lakehouse", str(lakehouse)]) == (0 if damaged is None else 1)
    out, err = capsys.readouterr()
    if damaged is None:
        assert "events: 1 live files at version 1, 0 damaged" in out, out
    else:
        line = next(x for x in err.splitlines() if x.startswith("  damaged: "))
        assert f"its footer's {damaged} is " in line, line


def test_a_torn_commit_is_named_with_its_table_and_the_other_tables_are_still_checked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A commit file cut short makes its table unreadable: fsck names the table and the commit, checks every other
    table, and exits 1 (damage left), instead of stopping at the first table it cannot load."""
    landing, lakehouse = tmp_path / "landing", tmp_path / "lh"
    landing.mkdir()
    (landing / "a.jsonl").write_text("".join(json.dumps({"tenant_id": t, "event_id": f"{t}{i}", "service": "s",
                                                         "ts": int(datetime.now(UTC).timestamp() * 1000) - 7_200_000})
                                             + "\n" for i in range(20) for t in ("Ωmega", "a b")))
    assert main(["ingest", "--lakehouse", str(lakehouse), "--landing", str(landing)]) == 0
    newest = sorted((lakehouse / EVENTS / "_delta_log").glob("*.json"))[-1]
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 3])
    capsys.readouterr()

    assert main(["fsck", "--lakehouse", str(lakehouse)]) == 1
    captured = capsys.readouterr()
    assert f"{EVENTS}: cannot be checked: {lakehouse / EVENTS}: commit " in captured.err, captured
    assert "Traceback" not in captured.out + captured.err
    for name in (ID_INDEX, LANDING_BATCHES, PLACEMENTS):  # checked all the same
        assert f"\n{name}: " in captured.out and f"{name}: cannot" not in captured.out
    assert "1 table's log cannot be read" in captured.err
    assert main(["fsck", "--lakehouse", str(lakehouse), "--repair"]) == 1  # a log fsck does not mend
