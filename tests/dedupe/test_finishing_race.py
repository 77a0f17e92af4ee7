"""Two processes finishing the same planned fused batch at once: ``lakeshard ingest`` (fused) and ``lakeshard route``
(through ``routed`` and the shard writers). Whichever commits first, every event of the zone is in ``events`` once."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lakeshard.config import load_config
from lakeshard.lake import open_lazy_store
from lakeshard.lake.trace import WRITE
from lakeshard.tables import EVENTS, FUSED_APP_ID, ID_INDEX
from phase_kills import KillAt, child_env, kill_process_group, kill_seed, run_traced

LAKESHARD = [sys.executable, "-m", "lakeshard.app.cli"]


def _planned_fused_batch(landing: Path, lakehouse: Path) -> bool:
    """Return whether an ingest SIGKILLed as it started writing ``events`` left its fused batch planned and not
    delivered (a kill that landed later delivered it)."""
    common = ["--lakehouse", str(lakehouse), "--landing", str(landing)]
    killed = run_traced([*LAKESHARD, "ingest", *common], kill_at=KillAt(WRITE, 1, 0.0, table=EVENTS),
                        env=child_env(), timeout=300)
    assert killed.killed, killed.stderr
    store = open_lazy_store(load_config(overrides={"lakehouse": str(lakehouse)}, env={}))
    ids = str(lakehouse / ID_INDEX)
    return not store.exists(ids) or store.transaction_version(ids, FUSED_APP_ID) is None


def _race(common: list[str], delays: tuple[float, float]) -> list[subprocess.CompletedProcess[str]]:
    """Return how ``lakeshard ingest`` and ``lakeshard route`` ended, started ``delays`` seconds apart."""
    procs = []
    for delay, command in zip(delays, ("ingest", "route"), strict=True):
        time.sleep(delay)
        procs.append(subprocess.Popen([*LAKESHARD, command, *common], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=child_env(), start_new_session=True))
    done = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=300)
        finally:
            kill_process_group(proc.pid)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


@pytest.mark.slow
def test_a_fused_and_a_routed_finish_of_one_planned_batch_write_each_event_once(tmp_path: Path) -> None:
    import pyarrow.parquet as pq
    from deltalake import DeltaTable  # an independent reader of what the commands committed

    from lakeshard.synth.manifest import EVENTS_FILE, TRUTH_DIR

    landing = tmp_path / "landing"
    gen = subprocess.run([*LAKESHARD, "generate", "--landing", str(landing), "--events", "400", "--tenants", "5",
                          "--quiet"], capture_output=True, text=True, timeout=120, env=child_env())
    assert gen.returncode == 0, gen.stderr
    truth = pq.read_table(landing / TRUTH_DIR / EVENTS_FILE, columns=["tenant_id", "event_id"])
    expected = sorted(zip(truth.column("tenant_id").to_pylist(), truth.column("event_id").to_pylist(), strict=True))
    seed = kill_seed()
    rng = random.Random(seed)
    raced = 0
    for attempt in range(4):
        lakehouse = tmp_path / f"lh{attempt}"
        common = ["--lakehouse", str(lakehouse), "--landing", str(landing)]
        if not _planned_fused_batch(landing, lakehouse):
            continue
        # Either may start first, by up to half a second: each timing makes the other one find the batch half done.
        lead = rng.uniform(0.0, 0.5)
        delays = (0.0, lead) if rng.random() < 0.5 else (lead, 0.0)
        runs = _race(common, delays)
        for run in runs:  # a finisher that loses the race may refuse; it never crashes
            assert run.returncode in (0, 1) and "Traceback" not in run.stderr, run.stdout + run.stderr
        settle = subprocess.run([*LAKESHARD, "ingest", *common], capture_output=True, text=True, timeout=300,
                                env=child_env())
        assert settle.returncode == 0, settle.stderr
        events = DeltaTable(str(lakehouse / EVENTS)).to_pyarrow_table(columns=["tenant_id", "event_id"])
        keys = sorted(zip(events.column("tenant_id").to_pylist(), events.column("event_id").to_pylist(), strict=True))
        assert keys == expected, (f"seed {seed} ({os.environ.get('LAKESHARD_KILL_SEED', 'fresh')}), delays {delays}: "
                                  f"{len(keys)} rows, {len(set(keys))} distinct, {len(expected)} expected; "
                                  f"{[r.stdout + r.stderr for r in runs]}")
        assert DeltaTable(str(lakehouse / ID_INDEX)).to_pyarrow_table(columns=["key_hi"]).num_rows == len(expected)
        raced += 1
    assert raced >= 2, f"seed {seed}: only {raced} of 4 kills left a fused batch planned"
