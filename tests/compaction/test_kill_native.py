"""A compaction on Delta's own engine killed (SIGKILL) at a random moment leaves the same rows, and a later
compaction finishes the job.

The child (``_compact_native_until_killed.py``) starts a Spark session with Delta's jars and compacts a table of
small files, one whole bucket per commit through Delta's public writer. The native adapter does not trace its
commits, so the kill is timed: a random moment within the span an undisturbed compaction of a copy took (or, when
a run ends before its kill, the span that run took), which lands in a merge, a swap commit, between a swap and its
fragment rows, or between buckets. Timings come from a fresh seed per run (``LAKESHARD_KILL_SEED`` replays it).
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from lakeshard.compaction.sample import SmallFileTable
from phase_kills import child_env, kill_seed

from .conftest import checksum

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakeshard.lake import TableStore

SCRIPT = Path(__file__).with_name("_compact_native_until_killed.py")
KILLS = 2  # runs with a kill timer; more (up to MAX_RUNS) while none has landed
MAX_RUNS = 6


def _copy_table(uri: str, folder: Path) -> str:
    """Return the path of a copy of the table at ``uri`` made in ``folder``."""
    path = str(folder / "events")
    shutil.copytree(uri, path)
    return path


def _seconds(run: subprocess.CompletedProcess[str]) -> float:
    """Return how long an unkilled compaction run said it took."""
    return float(re.findall(r"seconds=([0-9.]+)", run.stdout)[-1])


def _compact(uri: str, delay: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), uri, f"{delay:.3f}"], capture_output=True, text=True,
                          env=child_env(), timeout=600, check=False, start_new_session=True)


@pytest.mark.slow
@pytest.mark.delta_jvm
def test_sigkill_of_a_compaction_on_delta_engine_leaves_the_same_rows(
    spark: SparkSession, native_store: TableStore, tmp_path: Path
) -> None:
    seed = kill_seed()
    print(f"LAKESHARD_KILL_SEED={seed}")
    rng = random.Random(seed)
    table = SmallFileTable(spark, native_store, str(tmp_path / "events"))
    table.append("t1", 6, 30)
    original = checksum(native_store.read(table.uri))
    files_before = len(native_store.files(table.uri))

    reference = _copy_table(table.uri, tmp_path / "reference")
    undisturbed = _compact(reference, -1)
    assert undisturbed.returncode == 0, undisturbed.stderr[-3000:]
    span = _seconds(undisturbed)
    assert checksum(native_store.read(reference)) == original
    compacted = len(native_store.files(reference))
    assert compacted < files_before, "the undisturbed compaction merged nothing: no phase to kill in"

    # Kills hit the same copy, a later one a compaction taking up what an earlier one left behind. A run may end
    # before its kill: one after a kill has less left to do, and the machine's load changes how long a run takes
    # (the undisturbed one above took 61 s once, and the next was done before its kill at 54 s). So a run that ends
    # unkilled gives the span the next kills are drawn in, and while no kill has landed one that left nothing to
    # compact is followed by a fresh copy (a new path: the test session's Delta log cache knows the old one), so the
    # next kill has work to land in.
    copy = _copy_table(table.uri, tmp_path / "killed-0")
    log = [f"seed {seed}: undisturbed compaction {span:.2f}s, {files_before} files to {compacted}"]
    landed = runs = 0
    while runs < KILLS or not landed:
        assert runs < MAX_RUNS, f"no kill landed while the compaction ran: {log}"
        before = len(native_store.files(copy))
        delay = rng.uniform(0.05, 0.95 if landed else 0.5) * span
        killed = _compact(copy, delay)
        runs += 1
        after = len(native_store.files(copy))
        log.append(f"kill at {delay:.2f}s: exit {killed.returncode}, {before} files to {after}")
        assert killed.returncode in (-9, 0), f"the compaction failed: {log}\n{killed.stderr[-2000:]}"
        landed += killed.returncode == -9
        assert checksum(native_store.read(copy)) == original, f"rows changed after a kill: {log}"
        if killed.returncode == 0:
            if before > compacted:  # it had work: its own time is what a compaction takes now
                span = min(span, _seconds(killed))
            if after <= compacted and not landed:
                copy = _copy_table(table.uri, tmp_path / f"killed-{runs}")
    # A killed attempt's lock lease may hold its bucket for a while; what the next run can take, it finishes.
    again = _compact(copy, -1)
    assert again.returncode == 0, (log, again.stderr[-3000:])
    assert checksum(native_store.read(copy)) == original, f"rows changed by the compaction after the kills: {log}"
    print("\n".join(log))
