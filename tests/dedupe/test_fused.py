"""The fused hand-off (docs/decisions.md, record 19): a batch routed and written in one process, without ``routed``.

One generated zone goes through the two-job path (route to ``routed``, then the shard writers) and through the fused
path; both must end in the same ``events`` and ``quarantine``. The fused path is then crashed before each of its
commits and restarted (by a fused process, or by a route-only run with separate writers), with a landing file
rewritten while the process is down; every ending is checked against the generator's ground truth.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from lakeshard.config import LakeshardConfig, load_config
from lakeshard.dedupe.keyhash import key_hashes
from lakeshard.dedupe.writer import ShardWriter
from lakeshard.errors import LakeshardError
from lakeshard.lake import TableStore, open_lazy_store
from lakeshard.routing.router import Router
from lakeshard.routing.unrouted import unrouted_landing
from lakeshard.synth import SynthSpec, generate_landing
from lakeshard.synth.verify import check_against_truth
from lakeshard.tables import (
    EVENTS,
    FUSED_APP_ID,
    ID_INDEX,
    LANDING_BATCHES,
    QUARANTINE,
    ROUTED,
    ROUTER_APP_ID,
    ROUTING_METRICS,
)
from lakeshard.tables.schemas import EVENT_COLUMNS

SHARDS = 4
SPEC = SynthSpec(events=1200, tenants=6, hours=0.5, seed=33, file_seconds=60, retry_rate=0.05,
                 redelivered_files=0.1, bad_rate=0.02)


class Crash(LakeshardError):
    """Stands in for the process dying at a commit point."""


def _cfg(tmp_path: Path, name: str, landing: Path) -> LakeshardConfig:
    return load_config(overrides={"lakehouse": str(tmp_path / name), "landing": str(landing),
                                  "routing": {"total_shards": SHARDS, "default_shard_count": 2}}, env={})


def _two_jobs(cfg: LakeshardConfig) -> None:
    store = open_lazy_store(cfg)
    Router(None, store, cfg, max_batch_files=3).run()
    ShardWriter(None, store, cfg, list(range(SHARDS))).run()


def _fused(cfg: LakeshardConfig, *, die_at: str = "", batch: int = 2) -> ShardWriter:
    """Return the writer that ran the fused path over the zone; with ``die_at``, raise :class:`Crash` right before
    that table's commit of batch ``batch``."""
    store = open_lazy_store(cfg)
    current = {"batch": 0}

    def router_hook(table: str, n: int) -> None:
        current["batch"] = n
        if table == die_at and n == batch:
            raise Crash(f"killed before committing {table} of batch {n}")

    def writer_hook(table: str) -> None:
        if table == die_at and current["batch"] == batch:
            raise Crash(f"killed before committing {table} of batch {batch}")

    writer = ShardWriter(None, store, cfg, list(range(SHARDS)), before_commit=writer_hook)
    Router(None, store, cfg, max_batch_files=3, handoff=writer, fused=True, before_commit=router_hook).run()
    writer.run()
    return writer


def _keys(store: TableStore, cfg: LakeshardConfig) -> list[tuple[object, ...]]:
    rows = store.read_table_arrow(cfg.table_uri(EVENTS), ["tenant_id", "event_id", "ts"])
    return sorted(zip(*(rows.column(c).to_pylist() for c in rows.column_names), strict=True))


def _events(store: TableStore, cfg: LakeshardConfig) -> list[tuple[object, ...]]:
    """Return every event column of every row, sorted (attribute maps as sorted pairs)."""
    rows = store.read_table_arrow(cfg.table_uri(EVENTS), list(EVENT_COLUMNS)).to_pylist()
    return sorted(tuple(sorted(v) if isinstance(v, list) else v for v in r.values()) for r in rows)


def _quarantined(store: TableStore, cfg: LakeshardConfig) -> list[tuple[object, ...]]:
    rows = store.read_table_arrow(cfg.table_uri(QUARANTINE), ["source_file", "line_number", "category"])
    return sorted((r["source_file"], r["line_number"], r["category"]) for r in rows.to_pylist())


def _assert_exactly_once(spark: SparkSession, store: TableStore, cfg: LakeshardConfig, landing: Path,
                         unique_events: int) -> None:
    check = check_against_truth(spark, store.read(cfg.table_uri(EVENTS)), str(landing))
    assert (check.missing, check.duplicate_rows, check.unexpected) == (0, 0, 0), check
    assert check.rows == unique_events
    # Every event's ID is in the index once, and nothing went through routed.
    ids = store.read_table_arrow(cfg.table_uri(ID_INDEX), ["key_hi", "key_lo"])
    assert ids.num_rows == len({(h, lo) for h, lo in zip(ids.column("key_hi").to_pylist(),
                                                         ids.column("key_lo").to_pylist(), strict=True)})
    assert ids.num_rows == check.rows
    # The IDs are the events' key hashes, whether the writer hashed a batch or the router's look-ahead did.
    hi, lo = key_hashes(store.read_table_arrow(cfg.table_uri(EVENTS), ["tenant_id", "event_id", "ts"]))
    assert sorted(zip(ids.column("key_hi").to_pylist(), ids.column("key_lo").to_pylist(), strict=True)) == sorted(
        zip(hi.tolist(), lo.tolist(), strict=True))
    assert store.read_table_arrow(cfg.table_uri(ROUTED), ["event_id"]).num_rows == 0


def test_the_fused_path_and_the_two_job_path_end_in_the_same_events_and_quarantine(
    spark: SparkSession, store: TableStore, tmp_path: Path
) -> None:
    landing = tmp_path / "landing"
    m = generate_landing(landing, SPEC)
    two, fused = _cfg(tmp_path, "two-jobs", landing), _cfg(tmp_path, "fused", landing)
    _two_jobs(two)
    _fused(fused)

    assert _keys(store, fused) == _keys(store, two)
    assert len(_keys(store, fused)) == m.unique_events
    assert _events(store, fused) == _events(store, two)  # the same copy of each re-sent event, payload and all
    assert _quarantined(store, fused) == _quarantined(store, two)
    assert len(_quarantined(store, fused)) == m.bad_records
    _assert_exactly_once(spark, store, fused, landing, m.unique_events)
    # The batches are the fused kind: events and IDs carry the last plan, routed carries none.
    planned = store.transaction_version(fused.table_uri(LANDING_BATCHES), ROUTER_APP_ID)
    assert planned is not None and planned > 1
    assert store.transaction_version(fused.table_uri(EVENTS), FUSED_APP_ID) == planned
    assert store.transaction_version(fused.table_uri(ID_INDEX), FUSED_APP_ID) == planned
    assert store.transaction_version(fused.table_uri(ROUTED), ROUTER_APP_ID) is None
    metrics = store.read_table_arrow(fused.table_uri(ROUTING_METRICS), ["events"])
    assert sum(metrics.column("events").to_pylist()) == m.unique_events + m.duplicate_records
    # The completionist's backlog counts a fused batch as routed: nothing of the zone is left.
    assert unrouted_landing(store, fused) == []
    assert len(unrouted_landing(store, _cfg(tmp_path, "empty", landing))) > 0


@pytest.mark.parametrize("die_at", [EVENTS, ID_INDEX, QUARANTINE, ROUTING_METRICS, LANDING_BATCHES])
@pytest.mark.parametrize("restart", ["fused", "route-then-writers"])
def test_a_fused_process_killed_before_a_commit_then_restarted_writes_each_event_exactly_once(
    spark: SparkSession, store: TableStore, tmp_path: Path, die_at: str, restart: str
) -> None:
    landing = tmp_path / "landing"
    m = generate_landing(landing, SPEC)
    cfg = _cfg(tmp_path, "lh", landing)
    with pytest.raises(Crash):
        _fused(cfg, die_at=die_at)
    if restart == "fused":
        _fused(cfg)
    else:  # the route flow finishes the fused plan itself, then new batches go through routed to the writers
        from lakeshard.pipelines.commands import run_flows

        run_flows(cfg, ["route", "ingest"], lazy=True)
    check = check_against_truth(spark, store.read(cfg.table_uri(EVENTS)), str(landing))
    assert (check.missing, check.duplicate_rows, check.unexpected) == (0, 0, 0), check
    assert check.rows == m.unique_events
    assert len(_quarantined(store, cfg)) == m.bad_records
    if restart == "fused":
        _assert_exactly_once(spark, store, cfg, landing, m.unique_events)


def test_every_batch_reaches_the_writer_with_its_key_hashes_computed_beside_its_placements(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The router hashes each fused batch's keys once (``ShardWriter.derive``) on a worker thread while it places
    the rows; the writer step then hashes none itself, and the hashes are the ones it would compute."""
    import lakeshard.dedupe.keyhash

    landing = tmp_path / "landing"
    generate_landing(landing, SPEC)
    cfg = _cfg(tmp_path, "lh", landing)
    calls: list[str] = []
    real = lakeshard.dedupe.keyhash.key_hashes

    def counted(events: Any) -> Any:
        import threading

        calls.append(threading.current_thread().name)
        return real(events)

    monkeypatch.setattr(lakeshard.dedupe.keyhash, "key_hashes", counted)
    writer = _fused(cfg)
    fused = [r for r in writer.reports if r.routed_version < 0]
    assert len(fused) > 2
    assert len(calls) == len(fused)  # once a batch, the writer step none
    assert all(name.startswith("lakeshard-worker") for name in calls), calls
    events = writer.store.read_table_arrow(cfg.table_uri(EVENTS), ["tenant_id", "event_id", "ts"])
    assert writer.derive(events).to_pydict() == dict(
        zip(["key_hi", "key_lo"], [h.tolist() for h in real(events)], strict=True))


def test_a_route_only_router_refuses_to_finish_a_fused_batch_without_writers(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    generate_landing(landing, SPEC)
    cfg = _cfg(tmp_path, "lh", landing)
    with pytest.raises(Crash):
        _fused(cfg, die_at=EVENTS, batch=1)
    with pytest.raises(LakeshardError, match="planned for the fused hand-off"):
        Router(None, open_lazy_store(cfg), cfg).run()


_AN_HOUR_AGO = int(time.time() * 1000) - 3_600_000  # one ts for every record: a re-sent record is a duplicate


def _line(i: int, prefix: str) -> bytes:
    """A landing record of an hour ago: tenant ``t{i % 3}``, event ``{prefix}{i}``."""
    return json.dumps({"tenant_id": f"t{i % 3}", "event_id": f"{prefix}{i}", "ts": _AN_HOUR_AGO}).encode() + b"\n"


def test_a_landing_file_rewritten_between_a_fused_plan_and_its_replay_is_handled_as_a_replay_handles_it(
    spark: SparkSession, store: TableStore, tmp_path: Path
) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    part = landing / "a.jsonl"

    part.write_bytes(b"".join(_line(i, "e") for i in range(4)) + b"not json\n")
    cfg = _cfg(tmp_path, "lh", landing)
    with pytest.raises(Crash):
        _fused(cfg, die_at=EVENTS, batch=1)
    part.write_bytes(b"".join(_line(i, "n") for i in range(3)))  # rewritten while the process was down
    _fused(cfg)
    # As a routed replay: the changed file is named in quarantine, its new content routed by the next batch.
    events = store.read_table_arrow(cfg.table_uri(EVENTS), ["event_id"]).column("event_id").to_pylist()
    assert sorted(events) == [f"n{i}" for i in range(3)]
    assert [c for _, _, c in _quarantined(store, cfg)] == ["file_changed"]
    ids = store.read_table_arrow(cfg.table_uri(ID_INDEX), ["key_hi"])
    assert ids.num_rows == 3


def test_a_fused_batch_killed_between_its_events_and_ids_gets_its_ids_from_events_even_if_its_file_changed(
    spark: SparkSession, store: TableStore, tmp_path: Path
) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    part = landing / "a.jsonl"

    part.write_bytes(b"".join(_line(i, "e") for i in range(4)))
    cfg = _cfg(tmp_path, "lh", landing)
    with pytest.raises(Crash):
        _fused(cfg, die_at=ID_INDEX, batch=1)
    part.write_bytes(b"".join(_line(i, "n") for i in range(3)))
    _fused(cfg)
    with part.open("ab") as f:  # a producer re-sends the first events: duplicates, found in the rebuilt index
        f.write(b"".join(_line(i, "e") for i in range(4)))
    _fused(cfg)
    events = store.read_table_arrow(cfg.table_uri(EVENTS), ["event_id"]).column("event_id").to_pylist()
    assert sorted(events) == [f"e{i}" for i in range(4)] + [f"n{i}" for i in range(3)]
    ids = store.read_table_arrow(cfg.table_uri(ID_INDEX), ["key_hi"])
    assert ids.num_rows == 7


def test_rows_that_fail_to_write_on_the_fused_path_are_dead_lettered_once_across_a_crash(
    spark: SparkSession, store: TableStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lakeshard.lake

    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "a.jsonl").write_bytes(b"".join(_line(i, "e") for i in range(6)))
    cfg = _cfg(tmp_path, "lh", landing)
    poison = {"e2", "e4"}
    real_write = lakeshard.lake.write_partitioned

    def write_rejecting_poison(rows: Any, target: str, *args: Any, **kwargs: Any) -> Any:
        if "event_id" in rows.column_names and set(rows.column("event_id").to_pylist()) & poison:
            raise ValueError("cannot encode this row")  # a row the file format refuses, wherever it is written
        return real_write(rows, target, *args, **kwargs)

    monkeypatch.setattr(lakeshard.lake, "write_partitioned", write_rejecting_poison)
    seams: list[str] = []

    def die_after_the_dead_letters(table: str) -> None:
        seams.append(table)
        if table == EVENTS and "dead-letter-rows" in seams:
            raise Crash("killed after the dead letters' commit, before the events' one")

    lazy = open_lazy_store(cfg)
    writer = ShardWriter(None, lazy, cfg, list(range(SHARDS)), before_commit=die_after_the_dead_letters)
    with pytest.raises(Crash):
        Router(None, lazy, cfg, handoff=writer, fused=True).run()
    assert len(_quarantined(store, cfg)) == 2
    reports = _fused(cfg).reports  # the replay finds the same rows unwritable and commits them no second time

    dead = store.read_table_arrow(cfg.table_uri(QUARANTINE),
                                  ["raw", "reason", "category", "source_file", "line_number"]).to_pylist()
    assert sorted(json.loads(r["raw"])["event_id"] for r in dead) == sorted(poison)
    # Each letter names the landing line it came from (e2 and e4 are lines 3 and 5 of a.jsonl).
    assert sorted((r["source_file"].rsplit("/", 1)[-1], r["line_number"]) for r in dead) == [("a.jsonl", 3),
                                                                                                ("a.jsonl", 5)]
    assert {r["category"] for r in dead} == {"write_failed"}
    assert all("cannot encode this row" in r["reason"] for r in dead)
    assert [r.dead_lettered for r in reports if r.dead_lettered] == [2]
    assert all(r.rows_in == r.written + r.duplicates_in_batch + r.duplicates_in_index + r.dead_lettered
               for r in reports)
    events = store.read_table_arrow(cfg.table_uri(EVENTS), ["event_id"]).column("event_id").to_pylist()
    assert sorted(events) == [f"e{i}" for i in (0, 1, 3, 5)]
    assert store.read_table_arrow(cfg.table_uri(ID_INDEX), ["key_hi"]).num_rows == 4


def test_a_row_refused_only_once_another_is_dead_lettered_is_dead_lettered_once_across_a_crash(
    store: TableStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lakeshard.lake
    from refusals import refusing_a_second_row_once_the_first_is_out

    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "a.jsonl").write_bytes(b"".join(_line(i, "e") for i in range(6)))
    cfg = _cfg(tmp_path, "lh", landing)
    real_write = lakeshard.lake.write_partitioned
    seams: list[str] = []

    def die_after_both_rounds(table: str) -> None:
        seams.append(table)
        if table == EVENTS and seams.count("dead-letter-rows") == 2:
            raise Crash("killed after the second round's dead letters, before the events' commit")

    # The process dies after committing both rounds' letters; the run after it meets the same refusals afresh.
    monkeypatch.setattr(lakeshard.lake, "write_partitioned", refusing_a_second_row_once_the_first_is_out(
        real_write, first={"e1"}, second={"e4"}))
    lazy = open_lazy_store(cfg)
    writer = ShardWriter(None, lazy, cfg, list(range(SHARDS)), before_commit=die_after_both_rounds)
    with pytest.raises(Crash):
        Router(None, lazy, cfg, handoff=writer, fused=True).run()
    monkeypatch.setattr(lakeshard.lake, "write_partitioned", refusing_a_second_row_once_the_first_is_out(
        real_write, first={"e1"}, second={"e4"}))
    reports = _fused(cfg).reports

    dead = store.read_table_arrow(cfg.table_uri(QUARANTINE), ["raw", "category"]).to_pylist()
    assert sorted(json.loads(r["raw"])["event_id"] for r in dead) == ["e1", "e4"]  # each once, after the replay
    assert {r["category"] for r in dead} == {"write_failed"}
    assert sum(r.dead_lettered for r in reports) == 2
    events = store.read_table_arrow(cfg.table_uri(EVENTS), ["event_id"]).column("event_id").to_pylist()
    assert sorted(events) == [f"e{i}" for i in (0, 2, 3, 5)]


def test_a_fused_batch_a_route_only_run_finishes_goes_through_the_ingest_flows_gate(
    store: TableStore, tmp_path: Path
) -> None:
    """The ingest flow's expectations hold for every row committed to ``events``, whichever run delivers it: here a
    rule that drops rows without a service, and a fused batch finished by a run of the route flow alone."""
    import dataclasses

    from lakeshard.pipelines.expectations import expect_or_drop
    from lakeshard.pipelines.flows import lakeshard_pipeline
    from lakeshard.pipelines.runner import run_pipeline

    landing = tmp_path / "landing"
    landing.mkdir()
    lines = [json.dumps({"tenant_id": f"t{i % 3}", "event_id": f"e{i}", "ts": _AN_HOUR_AGO,
                         **({"service": "api"} if i % 4 else {})}).encode() + b"\n" for i in range(12)]
    (landing / "a.jsonl").write_bytes(b"".join(lines))
    cfg = _cfg(tmp_path, "lh", landing)
    with pytest.raises(Crash):
        _fused(cfg, die_at=EVENTS, batch=1)
    declared = lakeshard_pipeline()
    pipeline = dataclasses.replace(declared, flows=tuple(
        dataclasses.replace(f, expectations=(expect_or_drop("has_service", "service IS NOT NULL"),))
        if f.name == "ingest" else f for f in declared.flows))

    report = run_pipeline(None, open_lazy_store(cfg), cfg, pipeline, flows=["route"])

    report.raise_failure()
    rows = store.read_table_arrow(cfg.table_uri(EVENTS), ["event_id", "service"]).to_pylist()
    assert sorted(r["event_id"] for r in rows) == sorted(f"e{i}" for i in range(12) if i % 4)
    assert store.transaction_version(cfg.table_uri(ID_INDEX), FUSED_APP_ID) == 1
    # Dropped by the rule, not lost: their IDs are indexed (a re-sent copy is a duplicate, as on the writers' path).
    assert store.read_table_arrow(cfg.table_uri(ID_INDEX), ["key_hi"]).num_rows == 12


@pytest.mark.parametrize("kept_bytes", [None, 0], ids=["own-files-kept", "nothing-kept"])
def test_the_id_merge_reads_back_only_the_id_files_this_writer_did_not_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept_bytes: int | None
) -> None:
    import lakeshard.dedupe.index as index

    if kept_bytes is not None:  # an index that keeps nothing reads every file, as an index built after a restart
        monkeypatch.setattr(index, "_OWN_BYTES", kept_bytes)
    landing, stash = tmp_path / "landing", tmp_path / "stash"
    generate_landing(landing, SynthSpec(events=2500, tenants=4, hours=4, seed=41, file_seconds=600, late_rate=0.2,
                                        retry_rate=0.02, redelivered_files=0.0, bad_rate=0.0, gzip_rate=0.0))
    cfg = _cfg(tmp_path, "lh", landing)
    files = sorted(p for p in landing.rglob("*.jsonl") if "_truth" not in p.parts)
    later = files[len(files) // 2:]
    for p in later:  # an earlier run sees the first half of the zone
        (stash / p.relative_to(landing)).parent.mkdir(parents=True, exist_ok=True)
        p.rename(stash / p.relative_to(landing))

    def run() -> ShardWriter:
        store = open_lazy_store(cfg)
        writer = ShardWriter(None, store, cfg, list(range(SHARDS)))
        Router(None, store, cfg, max_batch_files=4, handoff=writer, fused=True).run()
        writer.run()
        return writer

    run()
    store = open_lazy_store(cfg)
    ids_uri = cfg.table_uri(ID_INDEX)
    earlier = {f.path for f in store.files(ids_uri)}
    for p in later:
        p.parent.mkdir(parents=True, exist_ok=True)
        (stash / p.relative_to(landing)).rename(p)
    writer = run()  # this run's late events add ID files to the intervals the earlier run wrote
    before = {f.path for f in writer.store.files(ids_uri)}
    columns = ["shard", "interval", "key_hi", "key_lo"]

    def ids() -> list[tuple[object, ...]]:
        rows = store.read_table_arrow(ids_uri, columns)
        return sorted(zip(*(rows.column(c).to_pylist() for c in columns), strict=True))

    committed = ids()
    read: list[str] = []
    reader = writer.store.read_arrow_groups

    def spy(table: str, groups: Any, *args: Any, **kwargs: Any) -> Any:
        read.extend(f.path for files in groups.values() for f in files)
        return reader(table, groups, *args, **kwargs)

    monkeypatch.setattr(writer.store, "read_arrow_groups", spy)
    merged = writer.compact_ids()

    after = {f.path: f for f in store.files(ids_uri)}
    doomed = before - set(after)
    ours, theirs = doomed - earlier, doomed & earlier
    assert merged == len(doomed) and ours and theirs  # the merge took files of both runs
    assert sorted(read) == sorted(theirs if kept_bytes is None else doomed)
    assert ids() == committed  # no ID lost, none doubled, none changed
    for path in set(after) - before:  # each merged file holds its interval sorted by the key hash
        rows = pq.read_table(f"{ids_uri}/{unquote(path)}", columns=["key_hi", "key_lo"])
        pairs = list(zip(rows.column("key_hi").to_pylist(), rows.column("key_lo").to_pylist(), strict=True))
        assert pairs == sorted(pairs)


def _copy_line(key: int, label: str, exact: bool) -> bytes:
    """A copy of event ``k{key}`` (tenant ``t{key % 3}``, one ts for all) whose message names the copy; ``exact``:
    written with a duplicate member, which Arrow's reader refuses and the exact rules keep (the last value wins)."""
    record = json.dumps({"tenant_id": f"t{key % 3}", "event_id": f"k{key}", "ts": _AN_HOUR_AGO, "message": label})
    return (record[:-1] + f', "message": {json.dumps(label)}}}' if exact else record).encode() + b"\n"


@pytest.mark.parametrize("path", ["fused", "two-jobs-arrow", "two-jobs-spark", "spark-route"])
def test_of_the_copies_of_a_re_sent_event_the_one_of_the_earliest_landing_file_and_line_is_kept(
    spark: SparkSession, store: TableStore, tmp_path: Path, path: str
) -> None:
    """Copies of one event that differ in payload (a producer re-sending an edited record): whichever path routes and
    writes the batch, and whichever parse rule accepted each copy, the copy kept is the first in landing order, the
    smallest (file, line) of the batch. Copies are spread at random over three files among other events; one in
    ten is a line only the exact rules accept, which the parse hands on after the lines of its block Arrow's reader
    accepted."""
    rng = random.Random(20261129)
    landing = tmp_path / "landing"
    landing.mkdir()
    names = ("a.jsonl", "b.jsonl", "c.jsonl")
    # (event key, exact) of each line; 300 events sent once per file, then 120 keys sent 1-4 times anywhere.
    lines = {name: [(1000 * (f + 1) + i, False) for i in range(300)] for f, name in enumerate(names)}
    for key in range(120):
        for _ in range(rng.randint(1, 4)):
            name = rng.choice(names)
            lines[name].insert(rng.randint(0, len(lines[name])), (key, rng.random() < 0.1))
    first: dict[str, str] = {}  # event id -> message of its copy at the smallest (file, line)
    for name in names:
        content = [_copy_line(key, f"k{key}@{name}:{number}", exact)
                   for number, (key, exact) in enumerate(lines[name], start=1)]
        (landing / name).write_bytes(b"".join(content))
        for line in content:
            record = json.loads(line)
            first.setdefault(record["event_id"], record["message"])
    overrides: dict[str, Any] = {"lakehouse": str(tmp_path / "lh"), "landing": str(landing),
                                 "routing": {"total_shards": SHARDS, "default_shard_count": 2}}
    if path == "two-jobs-spark":
        overrides["dedupe"] = {"arrow_max_bytes": 0}
    if path == "spark-route":
        overrides["routing"]["arrow_max_bytes"] = 0
    cfg = load_config(overrides=overrides, env={})
    if path == "fused":
        _fused(cfg)
    else:
        lakehouse = open_lazy_store(cfg)
        Router(spark if path == "spark-route" else None, lakehouse, cfg).run()
        ShardWriter(spark if path == "two-jobs-spark" else None, lakehouse, cfg, list(range(SHARDS))).run()

    kept = store.read_table_arrow(cfg.table_uri(EVENTS), ["event_id", "message"]).to_pylist()
    assert len(kept) == len(first)
    assert {r["event_id"]: r["message"] for r in kept} == first


@pytest.mark.parametrize("path", ["fused", "two-jobs-arrow", "two-jobs-spark"])
def test_a_copy_routed_in_an_earlier_batch_is_kept_though_a_later_batchs_file_sorts_first(
    spark: SparkSession, store: TableStore, tmp_path: Path, path: str
) -> None:
    """Copies of one event in two router batches, the later one in a file whose path sorts first (landing files
    named by producer, not by time): the copy of the earlier batch is kept, also when one writer step takes both
    batches (the two-job path, whose routed rows carry their batch)."""
    landing = tmp_path / "landing"
    landing.mkdir()
    overrides: dict[str, Any] = {"lakehouse": str(tmp_path / "lh"), "landing": str(landing),
                                 "routing": {"total_shards": SHARDS, "default_shard_count": 2}}
    if path == "two-jobs-spark":
        overrides["dedupe"] = {"arrow_max_bytes": 0}
    cfg = load_config(overrides=overrides, env={})
    lakehouse = open_lazy_store(cfg)
    for name in ("producer-b.jsonl", "producer-a.jsonl"):  # b's file lands first, a's (sorting first) later
        (landing / name).write_bytes(b"".join(_copy_line(k, f"k{k}@{name}", exact=k % 2 == 0) for k in range(12)))
        if path == "fused":
            _fused(cfg)
        else:
            Router(None, lakehouse, cfg).run()
    if path != "fused":
        ShardWriter(spark if path == "two-jobs-spark" else None, lakehouse, cfg, list(range(SHARDS))).run()

    assert store.transaction_version(cfg.table_uri(LANDING_BATCHES), ROUTER_APP_ID) == 2
    kept = store.read_table_arrow(cfg.table_uri(EVENTS), ["event_id", "message"]).to_pylist()
    assert sorted((r["event_id"], r["message"]) for r in kept) == sorted(
        (f"k{k}", f"k{k}@producer-b.jsonl") for k in range(12))
