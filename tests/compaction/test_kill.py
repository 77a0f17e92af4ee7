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
# A kill aimed at a phase that ends before the signal arrives lands elsewhere; it is tried again on a fresh copy,
# the later attempts with shorter delays (the last with none: the signal follows the child's enter line).
ATTEMPTS = 5
LANDS = {WRITE: PARQUET_WRITE, COMMIT: DELTA_COMMIT}


def _compact(uri: str, kill_at: KillAt | None = None) -> Run:
    return run_traced([sys.executable, str(SCRIPT), uri], kill_at=kill_at, timeout=300)


def _hittable(spans: list[float]) -> list[int]:
    """Return the entries (1-based) of a phase long enough to be hit by a signal: over a millisecond, else the
    longest (a sub-millisecond write of an empty side of a merge ends before any signal can arrive)."""
    return [n for n, s in enumerate(spans, 1) if s > 0.001] or [max(range(1, len(spans) + 1),
                                                                     key=lambda n: spans[n - 1])]


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
    spans = {p: undisturbed.spans(p) for p in (WRITE, COMMIT)}
    assert spans[WRITE] and spans[COMMIT], f"the compaction wrote or committed nothing: {spans}"

    log = [f"seed {seed}: an undisturbed compaction's phases (ms): "
           + str({p: [round(s * 1000, 1) for s in v] for p, v in spans.items()})]
    for i in range(KILLS):
        phase = (WRITE, COMMIT)[i % 2]
        for attempt in range(ATTEMPTS):
            nth = rng.choice(_hittable(spans[phase]))
            # Somewhere in the first half of that phase as the undisturbed run took it, halved on each retry.
            share = 0.5 / 2**attempt if attempt < ATTEMPTS - 1 else 0.0
            kill_at = KillAt(phase, nth=nth, delay=rng.uniform(0.0, share * spans[phase][nth - 1]))
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
