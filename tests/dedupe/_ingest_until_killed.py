"""One ingest process for the SIGKILL harness: route + write until caught up, unless it is killed first.

Usage: python _ingest_until_killed.py LAKEHOUSE LANDING KILL [HANDOFF [ADAPTER [BATCH_FILES]]]
  KILL = "hook:N"    SIGKILL itself at the N-th commit point (before a router or writer commit, or a page-in)
         "after:S"   SIGKILL itself S seconds after it started (anywhere: mid-parse, mid-flush, mid-read...)
         "none"      not by itself (the test may still kill it from outside, following its phase trace)
  HANDOFF = "routed" (the default: router, then two shard writers reading ``routed``) or "fused" (the router hands
            each batch to writers of every shard in memory, docs/decisions.md record 19)
  ADAPTER = "native": the shard writers commit through Delta's own engine (a Spark session with Delta's jars,
         one commit per shard); the router stays on the embedded adapter, driver-side. Routed hand-off only.
  BATCH_FILES = the router's most landing files per batch (default 3: many batches, so many commit points)
Prints "caught-up" when it finished without being killed.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading

from lakeshard.config import load_config
from lakeshard.dedupe.writer import ShardWriter
from lakeshard.lake import open_lazy_store
from lakeshard.routing.router import Router
from phase_kills import die  # the process and its JVM

SHARDS = 4


def main() -> None:
    lakehouse, landing, kill = sys.argv[1:4]
    handoff = sys.argv[4] if len(sys.argv) > 4 else "routed"
    adapter = sys.argv[5] if len(sys.argv) > 5 else "embedded"
    batch_files = int(sys.argv[6]) if len(sys.argv) > 6 else 3
    cfg = load_config(overrides={"lakehouse": lakehouse, "landing": landing,
                                 "spark": {"master": "local[1]", "shuffle_partitions": 1, "driver_memory": "1g"},
                                 "routing": {"total_shards": SHARDS, "default_shard_count": 2},
                                 # consumed routed files expire often, so kills land in expiries too
                                 "dedupe": {"routed_expire_files": 4}}, env={})
    store = open_lazy_store(cfg)  # small steps run driver-side: Spark (a JVM) starts only if one needs it
    calls = [0]
    mode, _, arg = kill.partition(":")

    def commit_point(*where: object) -> None:
        calls[0] += 1
        if mode == "hook" and calls[0] == int(arg):
            die()

    if mode == "after":
        threading.Timer(float(arg), die).start()
    if handoff == "fused":
        fused = ShardWriter(None, store, cfg, list(range(SHARDS)), before_commit=commit_point)
        router = Router(None, store, cfg, max_batch_files=batch_files, before_commit=commit_point, handoff=fused,
                        fused=True)
        while router.route_once() is not None or fused.run():
            pass
        print("caught-up", flush=True)
        os._exit(0)
    router = Router(None, store, cfg, max_batch_files=batch_files, before_commit=commit_point)
    writes_to = store
    if adapter == "native":
        from lakeshard.lake import open_store
        from lakeshard.runtime import get_spark

        native = dataclasses.replace(cfg, spark=dataclasses.replace(cfg.spark, adapter="native"))
        writes_to = open_store(get_spark(native), native)
    writers = [ShardWriter(None, writes_to, cfg, [0, 1], before_commit=commit_point),
               ShardWriter(None, writes_to, cfg, [2, 3], before_commit=commit_point)]
    while True:
        routed = router.route_once()
        wrote = [w.step() for w in writers]
        if routed is None and all(r is None for r in wrote):
            break
    print("caught-up", flush=True)
    os._exit(0)  # do not wait for a pending kill timer


if __name__ == "__main__":
    main()
