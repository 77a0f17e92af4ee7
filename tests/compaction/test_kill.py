"""A compaction killed (SIGKILL) at any moment leaves the table readable with exactly the same rows."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .conftest import AppendEvents, checksum

if TYPE_CHECKING:
    from lakeshard.lake import TableStore

SCRIPT = Path(__file__).with_name("_compact_until_killed.py")


def _spawn(uri: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "lib"),
                                                        os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, str(SCRIPT), uri], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def test_sigkill_at_any_moment_leaves_the_same_rows(store: TableStore, events_table: tuple[str, AppendEvents],
                                                    tmp_path: Path) -> None:
    """Kills at 30%..95% of an undisturbed run's time: every table reads back with the original rows."""
    uri, append = events_table
    append("t1", 8, 40)
    append("t2", 8, 40)
    original = checksum(store.read(uri))
    reference = str(tmp_path / "reference" / "events")
    shutil.copytree(uri, reference)
    started = time.perf_counter()
    done = _spawn(reference)
    _, err = done.communicate(timeout=300)
    duration = time.perf_counter() - started
    assert done.returncode == 0, err
    assert checksum(store.read(reference)) == original
    for i, fraction in enumerate([0.3, 0.6, 0.8, 0.95]):
        copy = str(tmp_path / f"kill{i}" / "events")
        shutil.copytree(uri, copy)
        proc = _spawn(copy)
        time.sleep(duration * fraction)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        assert checksum(store.read(copy)) == original, f"rows changed after a kill at {fraction:.0%}"
        store.vacuum(copy, retention_hours=0)  # orphans of the killed attempt go; live files stay
        assert checksum(store.read(copy)) == original
