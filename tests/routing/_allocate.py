"""A separate allocator process for the race test: waits at a barrier, resolves placements, prints them.

Usage: python _allocate.py LAKEHOUSE TAG BARRIER_DIR TENANTS WINDOWS
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lakeshard.config import load_config
from lakeshard.lake import open_lazy_store
from lakeshard.routing.allocator import ShardAllocator


def main() -> None:
    lakehouse, tag, barrier, tenants, windows = sys.argv[1], sys.argv[2], Path(sys.argv[3]), *map(int, sys.argv[4:6])
    cfg = load_config(overrides={"lakehouse": lakehouse, "spark": {"master": "local[1]", "shuffle_partitions": 1,
                                                                   "driver_memory": "1g"}})
    store = open_lazy_store(cfg)
    allocator = ShardAllocator(store, cfg)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    pairs = [(f"tenant-{t}", start + timedelta(minutes=5 * w)) for t in range(tenants) for w in range(windows)]
    allocator.tables.ensure()
    (barrier / f"ready-{tag}").touch()
    while not (barrier / "go").exists():
        time.sleep(0.01)
    got = allocator.resolve(pairs)
    out = {f"{t}@{s.isoformat()}": list(p.shards) for (t, s), p in got.items()}
    print(json.dumps({"placements": out, "lost_races": allocator.stats.lost_races, "commits": allocator.stats.commits,
                      "spark_started": getattr(store, "spark_started", True)}))


if __name__ == "__main__":
    main()
