"""``lakeshard refill`` after ``lakeshard fsck --repair`` removed a damaged ``events`` file: the bucket's lost events
come back from the landing bytes that fed it, column for column, exactly once; a second refill finds nothing lost;
a closed bucket is refused in one line."""

from __future__ import annotations

import gzip
import json
import random
import shutil
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable  # an independent reader of what the commands committed

from lakeshard.app.cli import main
from lakeshard.config import load_config
from lakeshard.lake import open_lazy_store
from lakeshard.maintenance import compact_bookkeeping
from lakeshard.synth.manifest import read_truth_events
from lakeshard.tables import EVENTS, ID_INDEX, ROUTED

KEY = ("tenant_id", "event_id", "ts")


def _canonical(rows: list[dict[str, object]]) -> Counter[tuple[object, ...]]:
    """Return the rows as a multiset of hashable tuples (a map's entries sorted)."""
    return Counter(tuple(tuple(sorted(map(tuple, v))) if isinstance(v, list) else v for v in r.values())
                   for r in rows)


def _events(lakehouse: Path) -> list[dict[str, object]]:
    table = DeltaTable(str(lakehouse / EVENTS)).to_pyarrow_table()
    return table.select(sorted(table.column_names)).to_pylist()


def _edited_copies(path: Path, truth: list[dict[str, object]], rng: random.Random) -> None:
    """Write a landing file (its path sorting before the generator's) with an edited copy of every event, and for
    about one in a hundred a second, earlier copy written with a duplicate member: Arrow's reader refuses that line
    and the exact rules accept it, so the parse hands it on after the later copy (few enough that the lines between
    stay Arrow's). The writers keep the earlier copy (the first in landing order); a refill must restore that one."""
    lines: list[str] = []
    for r in rng.sample(truth, len(truth)):
        record = {"tenant_id": r["tenant_id"], "event_id": r["event_id"], "ts": r["ts_ms"], "message": "edited"}
        if rng.random() < 0.01:
            lines.insert(rng.randint(0, len(lines)), json.dumps({**record, "message": "first"})[:-1]
                         + ', "message": "first"}')
        lines.append(json.dumps(record))
    path.write_text("".join(line + "\n" for line in lines))


@pytest.mark.parametrize(("seed", "damage"), [(6, "truncated"), (19, "missing")])
def test_refill_after_a_repair_restores_exactly_the_lost_events(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int, damage: str) -> None:
    rng = random.Random(seed)
    landing, lakehouse = tmp_path / "landing", tmp_path / "lh"
    assert main(["generate", "--landing", str(landing), "--events", str(rng.randint(200, 600)), "--tenants",
                 str(rng.randint(3, 6)), "--seed", str(seed), "--quiet"]) == 0
    truth = read_truth_events(landing)
    _edited_copies(landing / "0-edits.jsonl", truth.to_pylist(), rng)
    assert main(["ingest", "--lakehouse", str(lakehouse), "--landing", str(landing)]) == 0
    before = _events(lakehouse)
    assert len(before) == truth.num_rows  # the ingest wrote the ground truth once

    store = open_lazy_store(load_config(overrides={"lakehouse": str(lakehouse)}, env={}))
    # The bucket holding most of the copies a refill could pick wrongly (the refused first copies).
    firsts = Counter((r["tenant_id"], r["hour"]) for r in before if r["message"] == "first")
    assert firsts
    victim = next(f for f in store.files(str(lakehouse / EVENTS))
                  if (f.partition_values["tenant_id"], f.partition_values["hour"]) == firsts.most_common(1)[0][0])
    on_disk = lakehouse / EVENTS / unquote(victim.path)
    if damage == "missing":
        on_disk.unlink()
    else:
        on_disk.write_bytes(on_disk.read_bytes()[: on_disk.stat().st_size // 2])
    tenant, hour = victim.partition_values["tenant_id"], victim.partition_values["hour"]
    assert main(["fsck", "--lakehouse", str(lakehouse), "--repair"]) == 0
    assert len(_events(lakehouse)) == len(before) - (victim.num_records or 0) < len(before)
    capsys.readouterr()

    assert main(["refill", "--lakehouse", str(lakehouse), "--bucket", f"{tenant}/{hour}", "--dry-run"]) == 0
    assert f"{victim.num_records:,} of them lost (fsck removed {victim.num_records:,} rows)" in capsys.readouterr().out
    assert len(_events(lakehouse)) == len(before) - (victim.num_records or 0)  # a dry run commits nothing

    assert main(["refill", "--lakehouse", str(lakehouse), "--bucket", f"{tenant}/{hour}"]) == 0
    out = capsys.readouterr().out
    assert f"restored {victim.num_records:,} events to {tenant}/{hour}" in out
    after = _events(lakehouse)
    assert _canonical(after) == _canonical(before)  # every column of every row, as the writer committed it
    keys = Counter((r["tenant_id"], r["event_id"], int(r["ts"].timestamp() * 1000)) for r in after)  # type: ignore[attr-defined]
    assert keys == Counter(zip(*(truth.column(c).to_pylist() for c in ("tenant_id", "event_id", "ts_ms")),
                               strict=True))  # the ground truth, exactly once

    version = DeltaTable(str(lakehouse / EVENTS)).version()
    assert main(["refill", "--lakehouse", str(lakehouse), "--bucket", f"{tenant}/{hour}"]) == 0
    assert " 0 of them lost" in capsys.readouterr().out
    assert DeltaTable(str(lakehouse / EVENTS)).version() == version  # nothing lost, nothing committed
    # The writers still take a copy of a refilled event as a duplicate: the ID index was never changed.
    assert main(["ingest", "--lakehouse", str(lakehouse), "--landing", str(landing)]) == 0
    assert _canonical(_events(lakehouse)) == _canonical(before)


def test_refill_of_a_closed_bucket_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A closed bucket's rows are final and its checksum recorded: a refill would change it, so it is refused."""
    landing, lakehouse = tmp_path / "landing", tmp_path / "lh"
    assert main(["generate", "--landing", str(landing), "--events", "300", "--tenants", "3", "--seed", "8",
                 "--quiet"]) == 0
    common = ["--lakehouse", str(lakehouse), "--landing", str(landing)]
    assert main(["ingest", *common]) == 0
    assert main(["buckets", "close", *common, "--quiet-minutes", "0", "--grace-minutes", "0"]) == 0
    closed = {(r["tenant_id"], r["hour"]) for r in DeltaTable(str(lakehouse / "buckets")).to_pyarrow_table(
        columns=["tenant_id", "hour", "state"]).to_pylist() if r["state"] == "closed"}
    store = open_lazy_store(load_config(overrides={"lakehouse": str(lakehouse)}, env={}))
    victim = next(f for f in store.files(str(lakehouse / EVENTS))
                  if (f.partition_values["tenant_id"], f.partition_values["hour"]) in closed)
    (lakehouse / EVENTS / unquote(victim.path)).unlink()
    assert main(["fsck", "--lakehouse", str(lakehouse), "--repair"]) == 0
    version = DeltaTable(str(lakehouse / EVENTS)).version()
    capsys.readouterr()

    bucket = f"{victim.partition_values['tenant_id']}/{victim.partition_values['hour']}"
    assert main(["refill", "--lakehouse", str(lakehouse), "--bucket", bucket]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cannot refill bucket {bucket}: it is closed" in err, err
    assert DeltaTable(str(lakehouse / EVENTS)).version() == version


def _keys_of(lakehouse: Path) -> Counter[tuple[object, ...]]:
    rows = DeltaTable(str(lakehouse / EVENTS)).to_pyarrow_table(columns=list(KEY)).to_pylist()
    return Counter((r["tenant_id"], r["event_id"], int(r["ts"].timestamp() * 1000)) for r in rows)


def _zone(tmp_path: Path, rng: random.Random, seed: int, *, events: tuple[int, int], tenants: tuple[int, int],
          first: str) -> tuple[Path, list[str], Counter[tuple[object, ...]]]:
    """Generate a random zone, run ``first`` (route or ingest) over it; return the lakehouse, the common flags and
    the ground truth's keys."""
    landing, lakehouse = tmp_path / "landing", tmp_path / "lh"
    assert main(["generate", "--landing", str(landing), "--events", str(rng.randint(*events)), "--tenants",
                 str(rng.randint(*tenants)), "--seed", str(seed), "--quiet"]) == 0
    common = ["--lakehouse", str(lakehouse), "--landing", str(landing)]
    assert main([first, *common]) == 0
    truth = read_truth_events(landing)
    return lakehouse, common, Counter(zip(*(truth.column(c).to_pylist() for c in ("tenant_id", "event_id", "ts_ms")),
                                          strict=True))


@pytest.mark.parametrize(("seed", "damage", "ingest_first"), [(5, "truncated", False), (23, "missing", True)])
def test_refill_after_a_repaired_routed_file_routes_its_batch_again_and_every_event_arrives_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int, damage: str, ingest_first: bool) -> None:
    """A ``routed`` file fsck removed before the writers consumed it held events that never reached ``events`` nor
    the ID index: refill routes its batch's planned landing bytes again for the file's shard, and the writers write
    the lost events once, dropping those that arrived already as duplicates."""
    rng = random.Random(seed)
    lakehouse, common, expected = _zone(tmp_path, rng, seed, events=(200, 500), tenants=(3, 6), first="route")

    store = open_lazy_store(load_config(overrides={"lakehouse": str(lakehouse)}, env={}))
    victim = rng.choice(store.files(str(lakehouse / ROUTED)))
    on_disk = lakehouse / ROUTED / unquote(victim.path)
    held = pq.read_table(on_disk, columns=list(KEY)).to_pylist()
    victim_keys = {(r["tenant_id"], r["event_id"], int(r["ts"].timestamp() * 1000)) for r in held}
    if damage == "missing":
        on_disk.unlink()
    else:
        on_disk.write_bytes(on_disk.read_bytes()[: on_disk.stat().st_size // 2])
    if ingest_first:  # the writers stop the damaged file's shard; the other shards are written
        assert main(["ingest", *common]) == 1
    assert main(["fsck", "--lakehouse", str(lakehouse), "--repair"]) == 0
    assert main(["ingest", *common]) == 0
    lost = expected - _keys_of(lakehouse)
    assert set(lost) == victim_keys and max(lost.values()) == 1  # exactly the removed file's events are missing
    capsys.readouterr()

    assert main(["refill", "--lakehouse", str(lakehouse), "--routed", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"shard {victim.partition_values['shard']}" in out and "would route" in out, out
    assert _keys_of(lakehouse) == expected - lost  # a dry run commits nothing

    assert main(["refill", "--lakehouse", str(lakehouse), "--routed"]) == 0
    assert "routed again" in capsys.readouterr().out
    assert main(["ingest", *common]) == 0
    assert _keys_of(lakehouse) == expected  # the ground truth, exactly once

    version = DeltaTable(str(lakehouse / ROUTED)).version()
    assert main(["refill", "--lakehouse", str(lakehouse), "--routed"]) == 0
    assert "nothing to refill" in capsys.readouterr().out
    assert DeltaTable(str(lakehouse / ROUTED)).version() == version  # a second refill commits nothing
    assert main(["ingest", *common]) == 0
    assert _keys_of(lakehouse) == expected


def test_refill_restores_late_events_an_earlier_hours_batch_sent_into_the_bucket(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Events of hours already closed land late in their tenant's open bucket (flagged ``late``, their ID under their
    own hour): their batches' metrics and their ``ts`` name the closed hours, not the bucket's. A refill of that
    bucket finds them all the same, and commits them back as the writer did (``late``, the bucket's ``hour``)."""
    landing, lakehouse = tmp_path / "landing", tmp_path / "lh"
    assert main(["generate", "--landing", str(landing), "--events", "300", "--tenants", "3", "--seed", "31",
                 "--quiet"]) == 0
    common = ["--lakehouse", str(lakehouse), "--landing", str(landing)]
    assert main(["ingest", *common]) == 0
    assert main(["buckets", "close", *common, "--quiet-minutes", "0", "--grace-minutes", "0"]) == 0
    closed = sorted((r["tenant_id"], r["hour"]) for r in DeltaTable(str(lakehouse / "buckets")).to_pyarrow_table(
        columns=["tenant_id", "hour", "state"]).to_pylist() if r["state"] == "closed")
    tenant = closed[0][0]
    hours = [h for t, h in closed if t == tenant][:3]
    assert len(hours) >= 2
    late = [{"tenant_id": tenant, "event_id": f"late-{i:03d}",
             "ts": f"{hours[i % len(hours)]}:{i % 60:02d}:07.{i:03d}Z",
             "service": "ledger", "host": "ledger-01", "env": "prod", "status": "warn", "message": f"late {i}",
             "attributes": {"n": str(i)}} for i in range(40)]
    (landing / "late").mkdir()
    lines = [json.dumps(r) for r in [*late, late[3]]]  # and a re-sent copy
    (landing / "late" / "part-late.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["ingest", *common]) == 0
    before = _events(lakehouse)
    landed = [r for r in before if r["late"]]
    assert sorted(str(r["event_id"]) for r in landed) == sorted(str(r["event_id"]) for r in late)
    [bucket_hour] = {r["hour"] for r in landed}  # the tenant's open bucket
    assert all(r["hour"] not in hours for r in landed)

    store = open_lazy_store(load_config(overrides={"lakehouse": str(lakehouse)}, env={}))
    victims = [f for f in store.files(str(lakehouse / EVENTS))
               if (f.partition_values["tenant_id"], f.partition_values["hour"]) == (tenant, bucket_hour)]
    for victim in victims:
        (lakehouse / EVENTS / unquote(victim.path)).unlink()
    assert main(["fsck", "--lakehouse", str(lakehouse), "--repair"]) == 0
    assert not [r for r in _events(lakehouse) if r["late"]]
    capsys.readouterr()

    bucket = f"{tenant}/{bucket_hour}"
    assert main(["refill", "--lakehouse", str(lakehouse), "--bucket", bucket]) == 0
    assert f"restored {len(late)} events to {bucket}" in capsys.readouterr().out
    assert _canonical(_events(lakehouse)) == _canonical(before)  # every column: late, hour, shard, routed_version

    version = DeltaTable(str(lakehouse / EVENTS)).version()
    assert main(["refill", "--lakehouse", str(lakehouse), "--bucket", bucket]) == 0
    assert " 0 of them lost" in capsys.readouterr().out
    assert DeltaTable(str(lakehouse / EVENTS)).version() == version
    assert main(["ingest", *common]) == 0
    assert _canonical(_events(lakehouse)) == _canonical(before)


def _ids_of(lakehouse: Path) -> set[tuple[int, str, int, int]]:
    table = DeltaTable(str(lakehouse / ID_INDEX)).to_pyarrow_table(columns=["shard", "interval", "key_hi", "key_lo"])
    return set(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True))


@pytest.mark.parametrize(("seed", "damage"), [(41, "truncated"), (8, "missing")])
def test_refill_ids_rebuilds_a_repaired_index_partition_so_a_copy_arriving_again_stays_a_duplicate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int, damage: str) -> None:
    """An ``event_ids`` file fsck removed held the keys of events in ``events``: without them a copy arriving again
    would be written twice. refill --ids rebuilds exactly those keys from ``events``."""
    rng = random.Random(seed)
    lakehouse, common, expected = _zone(tmp_path, rng, seed, events=(200, 400), tenants=(2, 5), first="ingest")
    landing = tmp_path / "landing"
    indexed = _ids_of(lakehouse)

    store = open_lazy_store(load_config(overrides={"lakehouse": str(lakehouse)}, env={}))
    victim = rng.choice(store.files(str(lakehouse / ID_INDEX)))
    on_disk = lakehouse / ID_INDEX / unquote(victim.path)
    if damage == "missing":
        on_disk.unlink()
    else:
        on_disk.write_bytes(on_disk.read_bytes()[: on_disk.stat().st_size // 2])
    assert main(["fsck", "--lakehouse", str(lakehouse), "--repair"]) == 0
    lost = indexed - _ids_of(lakehouse)
    assert lost and {(s, i) for s, i, _, _ in lost} == {(int(victim.partition_values["shard"] or -1),
                                                        victim.partition_values["interval"])}
    capsys.readouterr()

    assert main(["refill", "--lakehouse", str(lakehouse), "--ids", "--dry-run"]) == 0
    assert f"{len(lost):,} IDs" in capsys.readouterr().out
    assert indexed - _ids_of(lakehouse) == lost  # a dry run commits nothing
    assert main(["refill", "--lakehouse", str(lakehouse), "--ids"]) == 0
    assert _ids_of(lakehouse) == indexed  # exactly the removed keys are back, nothing else added
    version = DeltaTable(str(lakehouse / ID_INDEX)).version()
    assert main(["refill", "--lakehouse", str(lakehouse), "--ids"]) == 0
    assert "nothing to refill" in capsys.readouterr().out
    assert DeltaTable(str(lakehouse / ID_INDEX)).version() == version  # a second refill commits nothing

    # The whole zone delivered again, under new names: every event is a duplicate, those of the repaired
    # partition included.
    for f in [p for p in landing.rglob("part-*") if p.is_file()]:
        shutil.copy2(f, f.with_name(f"again-{f.name}"))
    assert main(["ingest", *common]) == 0
    assert _keys_of(lakehouse) == expected


def _rewrite(path: Path, rng: random.Random) -> None:
    """Serialize every record of the landing file again (its keys in another order, other spacing): other bytes on
    every line, the same events on the same lines."""
    lines = path.read_text().split("\n")
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            out.append(line)
            continue
        keys = list(record) if not isinstance(record, dict) else rng.sample(list(record), len(record))
        out.append(json.dumps({k: record[k] for k in keys} if isinstance(record, dict) else record, indent=None,
                              separators=(" , ", " : ")))
    path.write_text("\n".join(out))


def _keys_by_file(landing: Path) -> dict[Path, set[tuple[str, str]]]:
    """Return the (tenant_id, event_id) of each valid record of each landing file."""
    out: dict[Path, set[tuple[str, str]]] = {}
    for path in landing.rglob("*"):
        if not path.is_file() or "_truth" in path.parts:
            continue
        raw = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
        keys = out.setdefault(path, set())
        for line in raw.split(b"\n"):
            try:
                record = json.loads(line)
                keys.add((record["tenant_id"], record["event_id"]))
            except (ValueError, TypeError, KeyError):
                continue
    return out


@pytest.mark.parametrize("seed", [12, 41])
def test_refill_reads_a_landing_file_rewritten_since_its_batch_or_names_what_is_gone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int) -> None:
    """The landing files that fed a damaged bucket changed after their batches were planned: some rewritten (the
    same records in other bytes), one removed. The refill restores every event a landing file still holds (a
    rewritten file's rows as it now reads: only ``size_bytes`` may differ), and for the events only the removed file
    held it exits 1 naming the file and exactly how many rows it could not restore: never 0 with rows missing."""
    rng = random.Random(seed)
    landing, lakehouse = tmp_path / "landing", tmp_path / "lh"
    assert main(["generate", "--landing", str(landing), "--events", str(rng.randint(400, 900)), "--tenants",
                 str(rng.randint(2, 4)), "--seed", str(seed), "--quiet"]) == 0
    assert main(["ingest", "--lakehouse", str(lakehouse), "--landing", str(landing)]) == 0
    before = _events(lakehouse)

    store = open_lazy_store(load_config(overrides={"lakehouse": str(lakehouse)}, env={}))
    victim = max(store.files(str(lakehouse / EVENTS)), key=lambda f: f.num_records or 0)
    tenant, hour = victim.partition_values["tenant_id"], victim.partition_values["hour"]
    in_victim = {(tenant, e) for e in pq.read_table(lakehouse / EVENTS / unquote(victim.path),
                                                    columns=["event_id"]).column("event_id").to_pylist()}
    by_file = _keys_by_file(landing)
    sources = sorted(p for p, keys in by_file.items() if keys & in_victim and not p.name.endswith(".gz"))
    assert len(sources) >= 2, sources

    def only_in(path: Path) -> set[tuple[str, str]]:
        return by_file[path] & in_victim - set().union(*(k for p, k in by_file.items() if p != path))
    gone = max(sources, key=lambda p: (len(only_in(p)), p.name))
    rewritten = [p for p in sources if p != gone]
    for path in rewritten:
        _rewrite(path, rng)
    gone.unlink()
    left = set().union(*_keys_by_file(landing).values())
    unrestored = [r for r in before if (r["tenant_id"], r["event_id"]) in in_victim - left]
    assert unrestored  # the removed file held the only copy of some of the bucket's events
    on_disk = lakehouse / EVENTS / unquote(victim.path)
    on_disk.write_bytes(on_disk.read_bytes()[: on_disk.stat().st_size // 2])
    assert main(["fsck", "--lakehouse", str(lakehouse), "--repair"]) == 0
    capsys.readouterr()

    assert main(["refill", "--lakehouse", str(lakehouse), "--bucket", f"{tenant}/{hour}"]) == 1
    captured = capsys.readouterr()
    assert f"{len(unrestored):,} removed rows were not restored" in captured.err, captured.err
    assert gone.name in captured.err and "gone" in captured.err, captured.err
    assert rewritten[0].name in captured.err and "changed" in captured.err, captured.err
    lost = {(r["tenant_id"], r["event_id"]) for r in unrestored}
    after = _events(lakehouse)
    assert Counter((r["tenant_id"], r["event_id"]) for r in after) == Counter(
        (r["tenant_id"], r["event_id"]) for r in before if (r["tenant_id"], r["event_id"]) not in lost)

    def same(rows: list[dict[str, object]]) -> Counter[tuple[object, ...]]:  # what a rewrite leaves unchanged
        return _canonical([{k: v for k, v in r.items() if k != "size_bytes"} for r in rows])
    # The events a landing file still holds back as they were, each once (a copy of another file may be the one
    # restored when the removed file held the first: the same event, so the same columns but its size).
    assert same(after) == same([r for r in before if (r["tenant_id"], r["event_id"]) not in lost])

    assert main(["refill", "--lakehouse", str(lakehouse), "--bucket", f"{tenant}/{hour}"]) == 1  # still short
    assert f"{len(unrestored):,} removed rows were not restored" in capsys.readouterr().err
    assert len(_events(lakehouse)) == len(after)  # and nothing committed twice


def test_refill_finds_the_batches_of_hours_whose_routing_metrics_expired(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``routing_metrics`` (which batches routed a tenant's events of which windows) expires after
    ``maintenance.routing_metrics_retention_hours`` from its newest window. A bucket of an hour older than that still
    gets its lost events back: the batches planned since then (less how far ahead of its arrival an event may be
    stamped) are read instead."""
    landing, lakehouse = tmp_path / "landing", tmp_path / "lh"
    assert main(["generate", "--landing", str(landing), "--events", "1500", "--tenants", "3", "--hours", "30",
                 "--seed", "17", "--quiet"]) == 0
    assert main(["ingest", "--lakehouse", str(lakehouse), "--landing", str(landing)]) == 0
    before = _keys_of(lakehouse)
    cfg = load_config(overrides={"lakehouse": str(lakehouse), "maintenance": {"routing_metrics_retention_hours": 1}},
                      env={})
    store = open_lazy_store(cfg)
    compact_bookkeeping(store, cfg, max_files=0)
    windows = DeltaTable(str(lakehouse / "routing_metrics")).to_pyarrow_table(columns=["window_start"])
    oldest_metric = min(windows.column("window_start").to_pylist())
    victim = min(store.files(str(lakehouse / EVENTS)), key=lambda f: f.partition_values["hour"])
    tenant, hour = victim.partition_values["tenant_id"], victim.partition_values["hour"]
    assert hour < f"{oldest_metric:%Y-%m-%dT%H}"  # no metrics row names the bucket's batches any more
    on_disk = lakehouse / EVENTS / unquote(victim.path)
    on_disk.write_bytes(on_disk.read_bytes()[: on_disk.stat().st_size // 2])
    assert main(["fsck", "--lakehouse", str(lakehouse), "--repair"]) == 0
    assert len(before - _keys_of(lakehouse)) == victim.num_records
    capsys.readouterr()

    assert main(["refill", "--lakehouse", str(lakehouse), "--bucket", f"{tenant}/{hour}"]) == 0, capsys.readouterr()
    assert f"restored {victim.num_records:,} events" in capsys.readouterr().out
    assert _keys_of(lakehouse) == before
