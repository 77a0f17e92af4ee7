"""A compaction on Delta's own engine killed (SIGKILL) at a random moment leaves the same rows, and a later
compaction finishes the job.

The child (``_compact_native_until_killed.py``) starts a Spark session with Delta's jars and compacts a table of
small files, one whole bucket per commit through Delta's public writer. The native adapter does not trace its
commits, so the kill is timed: a random moment within the span an undisturbed compaction of a copy took, which
lands in a merge, a swap commit, between a swap and its fragment rows, or between buckets. Timings come from a
fresh seed per run (``LAKESHARD_KILL_SEED`` replays it).
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
KILLS = 2


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

    reference = str(tmp_path / "reference" / "events")
    shutil.copytree(table.uri, reference)
    undisturbed = _compact(reference, -1)
    assert undisturbed.returncode == 0, undisturbed.stderr[-3000:]
    span = float(re.findall(r"seconds=([0-9.]+)", undisturbed.stdout)[-1])
    assert checksum(native_store.read(reference)) == original
    compacted = len(native_store.files(reference))
    assert compacted < files_before, "the undisturbed compaction merged nothing: no phase to kill in"

    # Both kills hit the same copy: the second one a compaction that takes up what the first left behind.
    copy = str(tmp_path / "killed" / "events")
    shutil.copytree(table.uri, copy)
    log = [f"seed {seed}: undisturbed compaction {span:.2f}s, {files_before} files to {compacted}"]
    landed = 0
    for k in range(KILLS):
        # A run after a kill has less left to do and may finish before its kill; so may one faster than the
        # undisturbed run was. The last kill is early when none has landed yet: at least one lands mid-work.
        delay = rng.uniform(0.05, 0.95 if landed or k < KILLS - 1 else 0.3) * span
        killed = _compact(copy, delay)
        log.append(f"kill at {delay:.2f}s: exit {killed.returncode}, {len(native_store.files(copy))} files")
        assert killed.returncode in (-9, 0), f"the compaction failed: {log}\n{killed.stderr[-2000:]}"
        landed += killed.returncode == -9
        assert checksum(native_store.read(copy)) == original, f"rows changed after a kill: {log}"
    assert landed, f"no kill landed while the compaction ran: {log}"
    # A killed attempt's lock lease may hold its bucket for a while; what the next run can take, it finishes.
    again = _compact(copy, -1)
    assert again.returncode == 0, (log, again.stderr[-3000:])
    assert checksum(native_store.read(copy)) == original, f"rows changed by the compaction after the kills: {log}"
    print("\n".join(log))
