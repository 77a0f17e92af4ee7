"""A separate lock-taking process for the race tests: waits at a barrier, tries to take a chunk's replace lock.

Usage: python _lock.py LOCKS_TABLE HOLDER BARRIER_DIR LEASE_SECONDS [--die-holding]

Prints one JSON line: {"holder", "outcome": "acquired" | "locked", "error"}. With --die-holding, a
winner SIGKILLs itself right after printing, still holding the lock (a crashed compaction).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

from lakeshard.config import load_config
from lakeshard.lake import open_store
from lakeshard.runtime import get_spark
from lakeshard.versions import Chunk, ChunkLocked, ChunkLocks


def main() -> None:
    table, holder, barrier, lease = sys.argv[1], sys.argv[2], Path(sys.argv[3]), float(sys.argv[4])
    die = "--die-holding" in sys.argv[5:]
    spark = get_spark(load_config(overrides={"spark": {"master": "local[1]", "shuffle_partitions": 1,
                                                       "driver_memory": "1g"}}))
    locks = ChunkLocks(open_store(spark), table, holder=holder, lease=timedelta(seconds=lease))
    locks.ensure_table()
    locks.state(Chunk("acme", "2026-01-01T10"))  # warm the read path so both processes race on the commit
    (barrier / f"ready-{holder}").touch()
    while not (barrier / "go").exists():
        time.sleep(0.01)
    try:
        lease_ = locks.acquire(Chunk("acme", "2026-01-01T10"))
        out = {"holder": holder, "outcome": "acquired", "error": "", "generation": lease_.state.generation}
    except ChunkLocked as exc:
        out = {"holder": holder, "outcome": "locked", "error": str(exc), "generation": exc.state.generation}
    print(json.dumps(out), flush=True)
    if die and out["outcome"] == "acquired":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(3)  # hold a moment, so the loser's re-read finds the lock held


if __name__ == "__main__":
    main()
