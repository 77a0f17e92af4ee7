"""A separate process that appends to a table through the embedded store (used by the lake tests).

Usage: python _committer.py TABLE TAG ROWS [--app APP_ID VERSION] [--barrier DIR] [--die-before-commit]

It writes its Parquet files, then (with --barrier) announces itself and waits until the test releases
every process at once, so their commits really race; with --die-before-commit it SIGKILLs itself after
the files are written and before the commit. It prints one JSON line with the outcome.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

from lakeshard.config import load_config
from lakeshard.errors import CommitConflict
from lakeshard.lake import AppTransaction
from lakeshard.lake.embedded import EmbeddedTableStore
from lakeshard.runtime import get_spark


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("table")
    parser.add_argument("tag")
    parser.add_argument("rows", type=int)
    parser.add_argument("--app", nargs=2)
    parser.add_argument("--barrier")
    parser.add_argument("--die-before-commit", action="store_true")
    args = parser.parse_args()

    spark = get_spark(load_config(overrides={"spark": {"master": "local[1]", "shuffle_partitions": 1,
                                                       "driver_memory": "1g"}}))

    class PausingStore(EmbeddedTableStore):
        def _write_files(self, shape, df, write, data_change):  # type: ignore[no-untyped-def]
            written = super()._write_files(shape, df, write, data_change)
            if args.die_before_commit:
                os.kill(os.getpid(), signal.SIGKILL)
            if args.barrier:
                barrier = Path(args.barrier)
                (barrier / f"ready-{args.tag}").touch()
                while not (barrier / "go").exists():
                    time.sleep(0.01)
            return written

    store = PausingStore(spark)
    df = spark.createDataFrame([(args.tag, i % 3, f"{args.tag}-{i}") for i in range(args.rows)],
                               "tenant_id string, hour int, event_id string")
    txns = [AppTransaction(args.app[0], int(args.app[1]))] if args.app else []
    try:
        result = store.append(args.table, df, app_transactions=txns, metadata={"writer": args.tag})
        print(json.dumps({"outcome": "skipped" if result.skipped else "committed", "version": result.version}))
    except CommitConflict as exc:
        print(json.dumps({"outcome": "conflict", "error": str(exc)}))


if __name__ == "__main__":
    main()
