"""What one writer append costs as a table's live files grow: lakeshard's blind append against a delta-rs commit.

``events`` gains a file per tenant and hour that compaction cannot merge away (a bucket is one tenant's hour): at
the two-day bench's rate, ~500 files an hour, 33,000 after two days, 360,000 after a month. delta-rs 1.6.6 both
prepares a commit and brings its snapshot up to date in time linear in those files. Per live-file count, on a
table partitioned by tenant like ``events``, the median of ``--repeat`` appends of one small Parquet file through
:class:`~lakeshard.lake.embedded.EmbeddedTableStore`, each followed by what the next writer step asks (the version
and the live files), two ways, alternating:

* **delta-rs commit** — the store's commit through delta-rs' ``create_write_transaction`` (what every embedded
  append did before :mod:`lakeshard.lake.embedded.append`), the snapshot brought up to date after it;
* **lakeshard blind append** — the store's own put-if-absent commit file, the version and files from its log
  replay (:mod:`lakeshard.lake.embedded.probed_log`).

The table is grown with commits of 5,000 add actions each (files that are never read). Writes
``bench/results/append-files.{json,md,png}``.

    .venv/bin/python -m bench.bench_append_files [--files 1000,10000,40000,100000] [--repeat 20]
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.transaction import AddAction
from pyspark.sql.types import LongType, StringType, StructField, StructType

import lakeshard.lake.embedded.adapter as embedded
from bench import peer_curve
from lakeshard.lake import EmbeddedTableStore
from lakeshard.lake.embedded.write import COMMIT_HOOKS

RESULTS = Path(__file__).resolve().parent / "results"
PEERS = ("delta-rs commit", "lakeshard blind append")
SCHEMA = StructType([StructField("tenant_id", StringType(), False), StructField("hour", StringType(), False),
                     StructField("event_id", StringType(), False), StructField("ts", LongType(), True)])
STATS = json.dumps({"numRecords": 10, "minValues": {"event_id": "a", "ts": 1}, "maxValues": {"event_id": "z", "ts": 9},
                    "nullCount": {"event_id": 0, "ts": 0}})


def _grow(uri: str, upto: int, have: int) -> int:
    """Add fake files (500 tenants, one per tenant and hour) until the table has ``upto``; return how many it has."""
    while have < upto:
        dt = DeltaTable(uri)
        n = min(5000, upto - have)
        adds = [AddAction(path=f"g/tenant_id=t{i % 500}/hour=h{i // 500}/f{i}.parquet", size=1000,
                          partition_values={"tenant_id": f"t{i % 500}", "hour": f"h{i // 500}"},
                          modification_time=1, data_change=True, stats=STATS)
                for i in range(have, have + n)]
        dt.create_write_transaction(adds, mode="append", schema=dt.schema(), partition_by=["tenant_id", "hour"],
                                    post_commithook_properties=COMMIT_HOOKS)
        have += n
    return have


def _write(directory: str) -> None:
    os.makedirs(f"{directory}/tenant_id=tx/hour=hx", exist_ok=True)
    pq.write_table(pa.table({"event_id": ["e"], "ts": [1]}), f"{directory}/tenant_id=tx/hour=hx/part-0.parquet")


def _append(store: EmbeddedTableStore, uri: str, blind: bool) -> float:
    """Return the seconds one append and the next step's look (version, live files) took, one way or the other."""
    real = embedded.appendable
    embedded.appendable = real if blind else (lambda _uri, _state: False)  # type: ignore[assignment]
    try:
        started = time.perf_counter()
        store.append(uri, None, write=_write)
        store.version(uri)
        store.files(uri)
        return time.perf_counter() - started
    finally:
        embedded.appendable = real  # type: ignore[assignment]


def measure(counts: list[int], repeat: int, work: Path) -> list[dict[str, Any]]:
    """Return, per live-file count, the median seconds of each peer's append on one table grown to that count."""
    uri = str(work / "events")
    EmbeddedTableStore(None).create(uri, SCHEMA, partition_by=["tenant_id", "hour"])
    have, rows = 0, []
    for count in counts:
        have = _grow(uri, count, have)
        store = EmbeddedTableStore(None)
        store.files(uri)  # the store's first look replays the log; steady state is what is measured
        times: dict[str, list[float]] = {peer: [] for peer in PEERS}
        for _ in range(repeat):
            for peer in PEERS:
                times[peer].append(_append(store, uri, blind=peer == PEERS[1]))
        have += repeat * len(PEERS)
        row: dict[str, Any] = {"live_files": count,
                               **{p: round(statistics.median(ts) * 1000, 2) for p, ts in times.items()}}
        row["ratio"] = round(row[PEERS[1]] / row[PEERS[0]], 3)
        rows.append(row)
        print(f"{count:>8,} live files:" + "".join(f" {p} {row[p]} ms" for p in PEERS) + f", ratio {row['ratio']}",
              flush=True)
    return rows


def render_md(doc: dict[str, Any]) -> str:
    lines = [
        "# One writer append as a table's live files grow (`bench_append_files.py`)", "",
        f"{doc['machine']}; {doc['date']}. Median of {doc['repeat']} appends of one small file per live-file count "
        "and side, alternating, each followed by the version and live-file lookup the next writer step makes "
        "(milliseconds), on a table partitioned by tenant and hour. **delta-rs commit**: the embedded store's "
        "commit through delta-rs, its snapshot brought up to date. **lakeshard blind append**: the store's own "
        "put-if-absent commit file, version and files from its own log replay.", "",
        f"| live files | {PEERS[0]} ms | {PEERS[1]} ms | ratio |", "| ---: | ---: | ---: | ---: |",
    ]
    lines += [f"| {r['live_files']:,} | {r[PEERS[0]]} | {r[PEERS[1]]} | **{r['ratio']}** |" for r in doc["rows"]]
    lines += ["", *peer_curve.growth_lines(doc["rows"], "live_files", PEERS, "live files")]
    return "\n".join(lines) + "\n"


def main() -> int:
    return peer_curve.main(__doc__ or "", sizes_flag="files", sizes="1000,10000,40000,100000",
                           sizes_help="live-file counts, ascending", repeat=20, name="append-files", results=RESULTS,
                           measure=measure, render_md=render_md, x="live_files", peers=PEERS,
                           xlabel="live files in the table", ylabel="median append + next look (ms)",
                           title="One writer append as the table's files grow")

if __name__ == "__main__":
    raise SystemExit(main())
