"""One of two racing shard-writer processes: step the same shards as the other until caught up, paced at random.

Usage: python _write_racing.py LAKEHOUSE SEED [ADAPTER]
  waits a random start delay (0-0.5 s), then steps a ShardWriter over every shard with a random pause
  (0-60 ms) after each step, until a step finds nothing new. The routed stream is complete before it starts.
  ADAPTER ``native`` writes through Delta's own engine: the process starts its Spark session first and waits
  until every racer has one (a file per racer in ``LAKEHOUSE/_racers``), so JVM start-up times do not
  keep the racers apart.
Prints one line of JSON: steps, conflicts (lost commit races) and rows written by this process.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

from lakeshard.config import load_config
from lakeshard.dedupe.writer import ShardWriter
from lakeshard.lake import open_lazy_store

SHARDS = [0, 1, 2, 3]
RACERS = 2


def main() -> None:
    lakehouse, seed = sys.argv[1], int(sys.argv[2])
    adapter = sys.argv[3] if len(sys.argv) > 3 else "embedded"
    rng = random.Random(seed)
    # One routed commit per step (max_batch_bytes=1: the memory gate lets a step take one commit at least), so
    # the stream takes many steps and the two writers race for most of them.
    cfg = load_config(overrides={"lakehouse": lakehouse,
                                 "spark": {"master": "local[1]", "shuffle_partitions": 1, "driver_memory": "1g",
                                           "adapter": adapter},
                                 "routing": {"total_shards": len(SHARDS), "default_shard_count": 2},
                                 "dedupe": {"max_batch_bytes": 1}}, env={})
    store = open_lazy_store(cfg)
    writer = ShardWriter(None, store, cfg, SHARDS)
    if adapter == "native":
        store.version(lakehouse + "/events")  # the session is up (the test created the writers' tables)
        racers = Path(lakehouse) / "_racers"
        racers.mkdir(exist_ok=True)
        (racers / str(os.getpid())).touch()
        waited = time.monotonic()
        while len(list(racers.iterdir())) < RACERS:
            if time.monotonic() - waited > 900:
                sys.exit("the other racer never started its Spark session")
            time.sleep(0.05)
    time.sleep(rng.uniform(0.0, 0.5))
    steps, lost, written = 0, 0, 0
    while (report := writer.step()) is not None:
        steps += 1
        lost += report.conflict
        written += report.written
        time.sleep(rng.uniform(0.0, 0.06))
    print(json.dumps({"steps": steps, "conflicts": writer.conflicts, "lost_steps": lost, "written": written}),
          flush=True)


if __name__ == "__main__":
    main()
