"""A separate process that appends to a table through the embedded store (used by the lake tests).

Usage: python _committer.py TABLE TAG ROWS [--app APP_ID VERSION] [--barrier DIR] [--die-before-commit]

It writes its Parquet file with pyarrow, as the shard writers' driver-side steps do (``write_partitioned``; no
JVM to start, so the racers are ready within a second or two), then (with --barrier) announces itself and waits
until the test releases every process at once, so their commits really race; with --die-before-commit it SIGKILLs
itself after the files are written and before the commit. It prints one JSON line with the outcome.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

import pyarrow as pa

from lakeshard.errors import CommitConflict
from lakeshard.lake import AppTransaction, WrittenFile, write_partitioned
from lakeshard.lake.embedded import EmbeddedTableStore

# The tests' table (test_embedded.EVENTS), partitioned by tenant_id.
SCHEMA = pa.schema([("tenant_id", pa.string(), False), ("hour", pa.int32()), ("event_id", pa.string(), False),
                    ("ts", pa.timestamp("us", tz="UTC")), ("attributes", pa.map_(pa.string(), pa.string()))])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("table")
    parser.add_argument("tag")
    parser.add_argument("rows", type=int)
    parser.add_argument("--app", nargs=2)
    parser.add_argument("--barrier")
    parser.add_argument("--die-before-commit", action="store_true")
    args = parser.parse_args()

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

    def write(directory: str) -> list[WrittenFile]:
        rows = pa.table({"tenant_id": [args.tag] * args.rows, "hour": [i % 3 for i in range(args.rows)],
                         "event_id": [f"{args.tag}-{i}" for i in range(args.rows)],
                         "ts": [None] * args.rows, "attributes": [None] * args.rows}, schema=SCHEMA)
        return write_partitioned(rows, directory, SCHEMA, ["tenant_id"])

    store = PausingStore(None)
    txns = [AppTransaction(args.app[0], int(args.app[1]))] if args.app else []
    try:
        result = store.append(args.table, None, write=write, app_transactions=txns, metadata={"writer": args.tag})
        print(json.dumps({"outcome": "skipped" if result.skipped else "committed", "version": result.version}))
    except CommitConflict as exc:
        print(json.dumps({"outcome": "conflict", "error": str(exc)}))


if __name__ == "__main__":
    main()
