"""One of several racing ingest processes on one lakehouse, paced at random, until caught up.

Usage: python _write_racing.py LAKEHOUSE SEED [ROLE [LANDING [ADAPTER]]]
  waits a random start delay (0-0.5 s), then, with a random pause (0-60 ms) after each step, until a step finds
  nothing new:
  ROLE = "writer" (default): steps a ShardWriter over every shard (the routed stream is complete before it starts);
         "fused":  routes LANDING a batch at a time with the fused hand-off (writers of every shard in memory);
         "router": routes LANDING into ``routed`` (a route-only router, finishing a fused plan it finds unfinished
                   with writers of its own, as the route flow does).
  ADAPTER ``native`` (writers only) writes through Delta's own engine: the process starts its Spark session first
  and waits until every racer has one (a file per racer in ``LAKEHOUSE/_racers``), so JVM start-up times do not
  keep the racers apart.
Prints one line of JSON: steps, conflicts (lost commit races), rows written and batches finished for another
process by this one.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

from lakeshard.config import LakeshardConfig, load_config
from lakeshard.dedupe.writer import ShardWriter
from lakeshard.lake import TableStore, open_lazy_store
from lakeshard.routing.router import Router

SHARDS = [0, 1, 2, 3]
RACERS = 2


def main() -> None:
    lakehouse, seed = sys.argv[1], int(sys.argv[2])
    role = sys.argv[3] if len(sys.argv) > 3 else "writer"
    landing = sys.argv[4] if len(sys.argv) > 4 else ""
    adapter = sys.argv[5] if len(sys.argv) > 5 else "embedded"
    rng = random.Random(seed)
    # One routed commit per step (max_batch_bytes=1: the memory gate lets a step take one commit at least), so
    # the stream takes many steps and the two writers race for most of them.
    cfg = load_config(overrides={"lakehouse": lakehouse, **({"landing": landing} if landing else {}),
                                 "spark": {"master": "local[1]", "shuffle_partitions": 1, "driver_memory": "1g",
                                           "adapter": adapter},
                                 "routing": {"total_shards": len(SHARDS), "default_shard_count": 2},
                                 "dedupe": {"max_batch_bytes": 1}}, env={})
    store = open_lazy_store(cfg)
    if role != "writer":
        _route(cfg, store, rng, fused=role == "fused")
        return
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


def _route(cfg: LakeshardConfig, store: TableStore, rng: random.Random, *, fused: bool) -> None:
    """Route the landing zone a batch at a time (fused: written in memory too), paced at random."""
    writer = ShardWriter(None, store, cfg, SHARDS)
    router = Router(None, store, cfg, max_batch_files=2, handoff=writer, fused=fused)
    time.sleep(rng.uniform(0.0, 0.5))
    steps, finished_for_others, already = 0, 0, 0
    while (report := router.route_once()) is not None:
        steps += 1
        finished_for_others += report.replayed
        already += report.already_committed
        time.sleep(rng.uniform(0.0, 0.06))
    if fused:
        writer.run()
    print(json.dumps({"steps": steps, "conflicts": writer.conflicts, "replayed": finished_for_others,
                      "already_committed": already, "written": sum(r.written for r in writer.reports)}), flush=True)


if __name__ == "__main__":
    main()
