"""Two shard-writer processes race over the same shards of one routed stream, with random timing; a fused process
races another fused process, or a route-only router with a separate writer, over one landing zone.

The stream (retries and redelivered files included) is routed first, in small batches; then two processes each
run a :class:`~lakeshard.dedupe.writer.ShardWriter` over all four shards, each after a random start delay and
with a random pause after each step, until caught up. Whichever commits a routed version's progress first wins;
the other loses the commit race (a conflict), drops its batch and goes on from the committed progress. At the
end ``events`` must hold every key of the generator's ground truth exactly once, counted against the truth,
not against the writers' reports. Timings come from a fresh seed per run (``LAKESHARD_KILL_SEED`` replays it).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakeshard.config import load_config
from lakeshard.dedupe.writer import EVENTS, ID_INDEX, ShardWriter
from lakeshard.lake import TableStore, open_lazy_store
from lakeshard.routing.router import Router
from lakeshard.synth import SynthSpec, generate_landing
from lakeshard.synth.verify import check_against_truth
from lakeshard.tables import ROUTED
from phase_kills import child_env, kill_seed

WORKER = Path(__file__).with_name("_write_racing.py")
SHARDS = 4


# Delta's own engine commits each shard separately (k commits a step), each a Spark job in a JVM per racer: a
# shorter stream there.
STREAMS = {"embedded": {"events": 1500, "file_seconds": 60}, "native": {"events": 300, "file_seconds": 300}}


@pytest.mark.slow
@pytest.mark.parametrize("adapter", ["embedded", pytest.param("native", marks=pytest.mark.delta_jvm)])
def test_two_writers_racing_on_the_same_shards_write_each_event_exactly_once(
    spark: SparkSession, store: TableStore, tmp_path: Path, adapter: str, request: pytest.FixtureRequest
) -> None:
    if adapter == "native":
        store = request.getfixturevalue("native_store")  # reads with Delta's engine too; skips without it
    seed = kill_seed()
    print(f"LAKESHARD_KILL_SEED={seed}")
    landing, lakehouse = tmp_path / "landing", tmp_path / "lh"
    m = generate_landing(landing, SynthSpec(**STREAMS[adapter], tenants=8, hours=0.5, seed=seed % 100_000,
                                            retry_rate=0.05, redelivered_files=0.1, bad_rate=0.01))
    cfg = load_config(overrides={"lakehouse": str(lakehouse), "landing": str(landing),
                                 "routing": {"total_shards": SHARDS, "default_shard_count": 2}}, env={})
    # Routed driver-side in small batches: many routed commits, so the writers race for many steps.
    Router(None, open_lazy_store(cfg), cfg, max_batch_files=2).run()
    routed_version = store.version(cfg.table_uri(ROUTED))

    if adapter == "native":  # created once here: the racers race the writes, not the tables' creation
        ShardWriter(spark, store, cfg, list(range(SHARDS))).ensure_tables()
    rng = random.Random(seed)
    racers = [subprocess.Popen([sys.executable, str(WORKER), str(lakehouse), str(rng.randrange(2**31)),
                                "writer", "", adapter],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())
              for _ in range(2)]
    ended = [(racer, *racer.communicate(timeout=1800)) for racer in racers]
    # A string, printed whole (a tuple's repr would be cut short): the failing racer's own traceback.
    assert all(racer.returncode == 0 for racer, _, _ in ended), f"seed {seed}:\n" + "\n----\n".join(
        err[-3000:] for racer, _, err in ended if racer.returncode != 0)
    outcomes = [json.loads(out.strip().splitlines()[-1]) for _, out, _ in ended]
    conflicts = sum(o["conflicts"] for o in outcomes)
    summary = f"seed {seed}: {routed_version} routed versions; writers {outcomes}; {conflicts} conflicts"
    print(summary)
    assert conflicts >= 1, f"the writers never lost a commit race, so this run tested no race: {summary}"

    # Both stopped because every shard had consumed every routed version: nothing was left for a third writer.
    assert ShardWriter(spark, store, cfg, list(range(SHARDS))).progress() == dict.fromkeys(range(SHARDS),
                                                                                            routed_version), summary
    check = check_against_truth(spark, store.read(cfg.table_uri(EVENTS)), str(landing))
    assert (check.missing, check.duplicate_rows, check.unexpected) == (0, 0, 0), (summary, check)
    assert check.rows == check.truth_events == m.unique_events, (summary, check)


@pytest.mark.slow
@pytest.mark.parametrize("roles", [("fused", "fused"), ("fused", "router", "writer")],
                         ids=["two-fused", "fused-vs-router-and-writers"])
def test_a_fused_process_racing_other_ingest_processes_writes_each_event_exactly_once(
    spark: SparkSession, store: TableStore, tmp_path: Path, roles: tuple[str, ...]
) -> None:
    """Two fused processes on one lakehouse, or a fused process beside a route-only router and a separate writer
    (the two-job path): only one plan per batch commits, a batch is delivered the way its plan names, and every
    other process finishes it or finds it done (docs/decisions.md, record 19)."""
    seed = kill_seed()
    print(f"LAKESHARD_KILL_SEED={seed}")
    landing, lakehouse = tmp_path / "landing", tmp_path / "lh"
    m = generate_landing(landing, SynthSpec(events=1500, tenants=8, hours=0.5, seed=seed % 100_000,
                                            file_seconds=60, retry_rate=0.05, redelivered_files=0.1, bad_rate=0.01))
    cfg = load_config(overrides={"lakehouse": str(lakehouse), "landing": str(landing),
                                 "routing": {"total_shards": SHARDS, "default_shard_count": 2}}, env={})
    rng = random.Random(seed)
    racers = [subprocess.Popen([sys.executable, str(WORKER), str(lakehouse), str(rng.randrange(2**31)), role,
                                str(landing)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())
              for role in roles]
    outcomes = []
    for racer in racers:
        out, err = racer.communicate(timeout=600)
        assert racer.returncode == 0, f"seed {seed}:\n{err[-3000:]}"
        outcomes.append(json.loads(out.strip().splitlines()[-1]))
    summary = f"seed {seed}: {list(zip(roles, outcomes, strict=True))}"
    print(summary)
    raced = sum(o["conflicts"] + o.get("replayed", 0) + o.get("already_committed", 0) for o in outcomes)
    assert raced >= 1, f"no process lost a race or finished another's batch, so this run tested no race: {summary}"

    # A writer that started before the router's last batches leaves them to a later run: one fused catch-up.
    store_ = open_lazy_store(cfg)
    fused = ShardWriter(None, store_, cfg, list(range(SHARDS)))
    Router(None, store_, cfg, handoff=fused, fused=True).run()
    fused.run()
    check = check_against_truth(spark, store.read(cfg.table_uri(EVENTS)), str(landing))
    assert (check.missing, check.duplicate_rows, check.unexpected) == (0, 0, 0), (summary, check)
    assert check.rows == check.truth_events == m.unique_events, (summary, check)
    ids = store.read_table_arrow(cfg.table_uri(ID_INDEX), ["key_hi", "key_lo"])
    assert ids.num_rows == m.unique_events, summary  # each event's ID once
