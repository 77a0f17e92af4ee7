"""A completionist process for the closing-race test: closes buckets in a loop until a stop file appears.

Usage: python _close_in_loop.py LAKEHOUSE LANDING STOP_FILE
It sees no writer lag (as if every backlog read came just before a routed batch), so it closes buckets that a
writer in another process may be committing into at that moment. Prints "closed N" when it stops.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta

from lakeshard.buckets import Completionist
from lakeshard.buckets.planner import Bucket
from lakeshard.config import load_config
from lakeshard.lake import open_store
from lakeshard.runtime import get_spark


class BlindCompletionist(Completionist):
    def _writer_lag_buckets(self) -> set[Bucket]:
        return set()


def main() -> None:
    lakehouse, landing, stop = sys.argv[1:4]
    cfg = load_config(overrides={"lakehouse": lakehouse, "landing": landing,
                                 "spark": {"master": "local[1]", "shuffle_partitions": 1, "driver_memory": "1g",
                                           "adapter": "embedded"},
                                 "routing": {"total_shards": 2, "default_shard_count": 2}}, env={})
    spark = get_spark(cfg)
    closer = BlindCompletionist(spark, open_store(spark, cfg), cfg, quiet=timedelta(0), grace=timedelta(0))
    closed = 0
    while not os.path.exists(stop):
        closed += len(closer.run().closed)
    print(f"closed {closed}", flush=True)


if __name__ == "__main__":
    main()
