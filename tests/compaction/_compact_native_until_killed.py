"""Run one compaction of the events table given as argv[1] on Delta's own engine (a local Spark session with
Delta's jars; each whole bucket swapped through Delta's public writer), SIGKILLing itself argv[2] seconds after
the compaction started (a negative delay: never).

Prints ``started`` once the session is up and ``rounds=N seconds=S`` when the compaction ends unkilled: the test
aims its kills inside the span an undisturbed run took.
"""

import dataclasses
import os
import sys
import threading
import time

from lakeshard.compaction import CompactionSettings, Compactor, LocalityPlanner, SizeTieredPlanner
from lakeshard.config import load_config
from lakeshard.lake import open_store
from lakeshard.runtime import get_spark
from phase_kills import die

uri, delay = sys.argv[1], float(sys.argv[2])
cfg = load_config(overrides={"spark": {"master": "local[1]", "shuffle_partitions": 1, "driver_memory": "1g"}}, env={})
cfg = dataclasses.replace(cfg, spark=dataclasses.replace(cfg.spark, adapter="native"))
store = open_store(get_spark(cfg), cfg)
settings = CompactionSettings(
    size_tiered=SizeTieredPlanner(min_files=4, target_rows=150, base_rows=16, growth=4, settle_seconds=0,
                                  grace_seconds=0),
    locality=LocalityPlanner(target_rows=150, growth=2, max_level=3), max_regex_chars=200,
)
compactor = Compactor(store, uri, settings=settings)
print("started", flush=True)
if delay >= 0:
    threading.Timer(delay, die).start()  # the process and its JVM (started in a session of its own)
started = time.monotonic()
report = compactor.run(apply=True)
print(f"rounds={len(report.rounds)} seconds={time.monotonic() - started:.3f}", flush=True)
os._exit(0)  # no wait for a pending kill timer, nor for the JVM's shutdown
