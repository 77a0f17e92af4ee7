"""Crash safety under SIGKILL: an ingest process killed again and again over one stream ends exactly once.

The stream arrives a file or two at a time (some delivered twice); between arrivals the ingest process (router
+ two shard writers reading ``routed``, or the fused hand-off's router and writers of every shard; all
driver-side: no JVM) is started and killed with SIGKILL, in one of three ways:

* **inside a commit or a Parquet write**: the parent kills it a random 0-2 ms after the child's trace says it
  entered its n-th delta-rs commit or Parquet write (:mod:`phase_kills`, the store's ``LAKESHARD_TRACE_PHASES``
  seam);
* **at a commit point**: the child kills itself right before a router or writer commit (after the Parquet
  flush), right after the events commit (before the ID commit) or before an ID page-in;
* **at a random moment**: the child kills itself a random time after it started (mid-parse, mid-flush, ...).

Where each kill landed (inside a Parquet write, inside a Delta commit, between commits, idle) is read from the
child's last trace line, and at least a quarter of the kills must land inside Delta commits. Nothing is cleaned
up between runs. At the end the events table must hold every key of the generator's ground truth exactly once
and the quarantine exactly the bad records the generator wrote (counts from the generator, not from reports).

Timings come from a fresh seed per run, printed and named in every failure; ``LAKESHARD_KILL_SEED=<seed>``
replays one.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakeshard.config import load_config
from lakeshard.dedupe.writer import EVENTS, ID_INDEX, ShardWriter
from lakeshard.lake import TableStore
from lakeshard.lake.trace import COMMIT, WRITE
from lakeshard.synth import SynthSpec, generate_landing
from lakeshard.synth.verify import check_against_truth
from lakeshard.tables import QUARANTINE, ROUTED
from phase_kills import DELTA_COMMIT, KillAt, Run, kill_seed, run_traced

# The issue asks for at least 20. Each restart is a process without a JVM (small steps run driver-side), about a
# second here; the stream arrives over ~33 runs, nearly all killed, in under two minutes. LAKESHARD_SIGKILLS=100
# for a longer soak.
KILLS = int(os.environ.get("LAKESHARD_SIGKILLS", "20"))
# At least this many kills must land inside a delta-rs commit (the moment a torn log entry would show).
IN_COMMIT = max(1, KILLS // 4)
WORKER = Path(__file__).with_name("_ingest_until_killed.py")


def _ingest(lakehouse: Path, landing: Path, kill: str, kill_at: KillAt | None = None, handoff: str = "routed",
            adapter: str = "embedded", batch_files: int = 3) -> Run:
    return run_traced([sys.executable, str(WORKER), str(lakehouse), str(landing), kill, handoff, adapter,
                       str(batch_files)], kill_at=kill_at)


def _kill_plan(rng: random.Random, in_commit_owed: int, kills_left: int, *, scarce: bool = False
               ) -> tuple[str, KillAt | None]:
    """Return how the next run is killed: by the parent inside a commit or a Parquet write, or by the child at a
    commit point or a moment.

    A share of the runs is killed inside a commit, and every run once the kills left are only enough to reach
    the minimum inside commits (a kill aimed at a commit that finishes first lands elsewhere and is counted so).
    ``scarce`` (no more files to come than kills owed): the kill is one every run with work reaches, at its first
    commit or commit point, since a run that ends unkilled with the stream delivered leaves no work to kill.
    """
    if scarce:
        if in_commit_owed > 0:
            return "none", KillAt(COMMIT, nth=1, delay=rng.uniform(0.0, 0.002))
        return "hook:1", None
    draw = rng.random()
    if draw < 0.4 or 0 < in_commit_owed >= kills_left:
        return "none", KillAt(COMMIT, nth=rng.randint(1, 8), delay=rng.uniform(0.0, 0.002))
    if draw < 0.55:
        return "none", KillAt(WRITE, nth=rng.randint(1, 8), delay=rng.uniform(0.0, 0.002))
    if rng.random() < 0.6:
        return f"hook:{rng.randint(1, 9)}", None
    return f"after:{rng.uniform(0.05, 1.0):.2f}", None


@pytest.mark.slow
@pytest.mark.parametrize("handoff", ["routed", "fused"])
def test_sigkill_at_random_points_over_one_stream_ends_exactly_once(
    spark: SparkSession, store: TableStore, tmp_path: Path, handoff: str
) -> None:
    seed = kill_seed()
    print(f"LAKESHARD_KILL_SEED={seed}")
    source, landing, lakehouse = tmp_path / "generated", tmp_path / "landing", tmp_path / "lh"
    m = generate_landing(source, SynthSpec(events=3000, tenants=12, hours=0.5, seed=seed % 100_000, file_seconds=60,
                                           retry_rate=0.05, redelivered_files=0.1, bad_rate=0.01))
    shutil.copytree(source / "_truth", landing / "_truth")
    arriving = sorted(p for p in source.rglob("part-*") if "_truth" not in p.parts)
    rng = random.Random(seed)
    kills, survived, runs = 0, 0, 0
    landed: Counter[str] = Counter()
    trace: list[str] = [f"seed {seed} (LAKESHARD_KILL_SEED={seed} replays it)"]
    # A run with work to do is killed at one of its first commit points or moments; a run with nothing new
    # finishes. So the stream arrives a file or two a run, lasting about twice as many runs as kills.
    per_run = max(1, len(arriving) // (2 * KILLS))
    while kills < KILLS or arriving:
        assert runs < 20 * KILLS, f"{runs} runs made only {kills} kills: the kill points no longer hit the work\n" + \
            "\n".join(trace)
        # One file is kept back for each kill still owed after this run, so the stream never runs dry first.
        k = min(rng.randint(1, per_run), max(1, len(arriving) - max(0, KILLS - kills - 1)))
        for f in arriving[:k]:  # the next few files arrive
            (landing / f.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, landing / f.relative_to(source))
        arriving = arriving[k:]
        kill, kill_at = _kill_plan(rng, IN_COMMIT - landed[DELTA_COMMIT], KILLS - kills,
                                   scarce=len(arriving) < KILLS - kills)
        done = _ingest(lakehouse, landing, kill, kill_at, handoff)
        runs += 1
        if done.killed:
            kills += 1
            landed[done.landed] += 1
        trace.append(f"{k} new, kill {kill_at or kill}: " + (f"killed {done.landed} {done.table}" if done.killed
                     else "ran to the end") + f" ({done.seconds:.1f}s)")
        if not done.killed:
            assert done.returncode == 0 and "caught-up" in done.stdout, (seed, done.stderr[-3000:])
            survived += 1
    final = _ingest(lakehouse, landing, "none", handoff=handoff)
    assert final.returncode == 0, (seed, final.stderr[-3000:])
    summary = f"seed {seed}: {runs} runs, {kills} killed ({dict(landed)}), {survived} ran to the end"
    print("\n".join(trace))
    print(summary)
    assert kills >= KILLS, summary
    assert landed[DELTA_COMMIT] >= IN_COMMIT, summary

    # Counted against the generator's ground truth, not against any report of the run.
    cfg = load_config(overrides={"lakehouse": str(lakehouse)}, env={})
    check = check_against_truth(spark, store.read(cfg.table_uri(EVENTS)), str(landing))
    assert (check.missing, check.duplicate_rows, check.unexpected) == (0, 0, 0), (summary, check)
    assert check.rows == check.truth_events == m.unique_events, (summary, check)
    quarantine = store.read(cfg.table_uri(QUARANTINE))
    by_cat = {r["category"]: r["n"] for r in quarantine.groupBy("category").agg(F.count("*").alias("n")).collect()}
    assert by_cat == {k: v for k, v in m.bad_by_category.items() if v}, summary
    # The writers expired consumed routed files along the way, and a stream ended by kills left no unconsumed
    # routed file behind: every file still in routed is one a writer has consumed since its last expiry.
    routed_uri = cfg.table_uri(ROUTED)
    if handoff == "fused":  # every batch fitted the driver: nothing went through routed, every ID is indexed
        assert store.files(routed_uri) == []
        assert store.read(cfg.table_uri(ID_INDEX)).count() == m.unique_events, summary
        return
    assert any("expired_consumed" in c.custom_metadata for c in store.history(routed_uri))
    ShardWriter(spark, store, cfg, [0, 1, 2, 3]).expire_routed()
    assert store.files(routed_uri) == []


# Delta's own engine: each restart starts a JVM and every shard is its own commit, so fewer kills, each at a
# writer's commit point (before an events or ID commit of one shard, between two shards' commits, before a
# page-in); the native adapter does not trace its commits, so no kill is aimed inside one.
NATIVE_KILLS = 2


@pytest.mark.slow
@pytest.mark.delta_jvm
def test_sigkill_of_writers_on_delta_engine_at_their_commit_points_ends_exactly_once(
    spark: SparkSession, native_store: TableStore, tmp_path: Path
) -> None:
    seed = kill_seed()
    print(f"LAKESHARD_KILL_SEED={seed}")
    source, landing, lakehouse = tmp_path / "generated", tmp_path / "landing", tmp_path / "lh"
    m = generate_landing(source, SynthSpec(events=400, tenants=6, hours=0.5, seed=seed % 100_000, file_seconds=300,
                                           retry_rate=0.05, redelivered_files=0.1, bad_rate=0.0))
    shutil.copytree(source / "_truth", landing / "_truth")
    arriving = sorted(p for p in source.rglob("part-*") if "_truth" not in p.parts)
    rng = random.Random(seed)
    kills, runs, trace = 0, 0, [f"seed {seed}"]
    per_run = max(1, len(arriving) // NATIVE_KILLS)

    def arrive(k: int) -> None:
        nonlocal arriving
        for f in arriving[:k]:
            (landing / f.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, landing / f.relative_to(source))
        arriving = arriving[k:]

    # Each run with new files is killed at one of its commit points; a file is kept back for each kill still owed
    # after this run. What is left arrives at once for the last run: a run on Delta's engine costs half a minute.
    while kills < NATIVE_KILLS:
        assert runs < 6 * NATIVE_KILLS, "\n".join(trace)
        k = min(rng.randint(1, per_run), max(1, len(arriving) - (NATIVE_KILLS - kills - 1)))
        arrive(k)
        kill = f"hook:{rng.randint(1, 12)}"
        done = _ingest(lakehouse, landing, kill, adapter="native")
        runs += 1
        kills += done.killed
        trace.append(f"{k} new, kill {kill}: " + ("killed" if done.killed else "ran to the end")
                     + f" ({done.seconds:.1f}s)")
        if not done.killed:
            assert done.returncode == 0 and "caught-up" in done.stdout, (seed, done.stderr[-3000:])
    arrive(len(arriving))
    # The rest in one batch: the last run only has to finish what the kills left and take the files kept back.
    # In batches of 3 files (~8 commits on Delta's engine each) that run took 262 of the test's 361 s; at once, 114.
    final = _ingest(lakehouse, landing, "none", adapter="native", batch_files=1_000)
    assert final.returncode == 0 and "caught-up" in final.stdout, (seed, final.stderr[-3000:])
    trace.append(f"the rest, ran to the end ({final.seconds:.1f}s)")
    print("\n".join(trace))
    cfg = load_config(overrides={"lakehouse": str(lakehouse)}, env={})
    check = check_against_truth(spark, native_store.read(cfg.table_uri(EVENTS)), str(landing))
    assert (check.missing, check.duplicate_rows, check.unexpected) == (0, 0, 0), (trace, check)
    assert check.rows == check.truth_events == m.unique_events, (trace, check)
    ids = native_store.read(cfg.table_uri(ID_INDEX)).count()
    assert ids == check.rows, (trace, ids)
