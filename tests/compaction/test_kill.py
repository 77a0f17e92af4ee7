"""A compaction killed (SIGKILL) inside its merge write or its swap commit leaves the same rows.

The compaction runs in a child process traced through the store's phase seam (:mod:`phase_kills`); the parent
kills it a random short time after it entered a randomly chosen merge write (Parquet) or swap commit (delta-rs),
checks from the child's last trace line that the kill landed inside that phase, and compares the table's row
checksum with the original, before and after a vacuum removes the killed attempt's orphans. Timings come from a
fresh seed per run (``LAKESHARD_KILL_SEED`` replays it).
"""

from __future__ import annotations

import random
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from lakeshard.lake.trace import COMMIT, WRITE
from phase_kills import DELTA_COMMIT, PARQUET_WRITE, KillAt, Run, kill_seed, run_traced

from .conftest import AppendEvents, checksum

if TYPE_CHECKING:
    from lakeshard.lake import TableStore

SCRIPT = Path(__file__).with_name("_compact_until_killed.py")
KILLS = 6
# A kill aimed at a phase that ends before the signal arrives lands elsewhere; it is tried again on a fresh copy.
ATTEMPTS = 3
LANDS = {WRITE: PARQUET_WRITE, COMMIT: DELTA_COMMIT}


def _compact(uri: str, kill_at: KillAt | None = None) -> Run:
    return run_traced([sys.executable, str(SCRIPT), uri], kill_at=kill_at, timeout=300)


def test_sigkill_inside_merge_writes_and_swap_commits_leaves_the_same_rows(
    store: TableStore, events_table: tuple[str, AppendEvents], tmp_path: Path
) -> None:
    seed = kill_seed()
    print(f"LAKESHARD_KILL_SEED={seed}")
    rng = random.Random(seed)
    uri, append = events_table
    append("t1", 8, 40)
    append("t2", 8, 40)
    original = checksum(store.read(uri))
    reference = str(tmp_path / "reference" / "events")
    shutil.copytree(uri, reference)
    undisturbed = _compact(reference)
    assert undisturbed.returncode == 0, undisturbed.stderr
    assert checksum(store.read(reference)) == original
    phases = {p: undisturbed.entered(p) for p in (WRITE, COMMIT)}
    assert phases[WRITE] >= 1 and phases[COMMIT] >= 1, f"the compaction wrote or committed nothing: {phases}"

    log = [f"seed {seed}: an undisturbed compaction enters {phases}"]
    for i in range(KILLS):
        phase = (WRITE, COMMIT)[i % 2]
        for attempt in range(ATTEMPTS):
            kill_at = KillAt(phase, nth=rng.randint(1, phases[phase]),
                             delay=rng.uniform(0.0, 0.005 if phase == WRITE else 0.001))
            copy = str(tmp_path / f"kill{i}-{attempt}" / "events")
            shutil.copytree(uri, copy)
            run = _compact(copy, kill_at)
            log.append(f"kill {kill_at}: {'killed' if run.killed else 'not killed'}, landed {run.landed}")
            assert checksum(store.read(copy)) == original, f"rows changed after a kill: {log}"
            store.vacuum(copy, retention_hours=0)  # orphans of the killed attempt go; live files stay
            assert checksum(store.read(copy)) == original, f"rows changed by the vacuum after a kill: {log}"
            if run.killed and run.landed == LANDS[phase]:
                break
        else:
            raise AssertionError(f"{ATTEMPTS} kills aimed inside a {phase} all landed elsewhere: {log}")
    print("\n".join(log))
