"""What the closing integrity check's hashing costs as an hour's bucket count grows: all buckets in one pass against
bucket by bucket.

close_buckets checks every closing ``(tenant, hour)`` bucket before it closes it: rows, distinct event keys and the
``rowhash2`` checksum (:mod:`lakeshard.buckets.checksum`). At 500 tenants an hour closes ~500 small buckets. Per
bucket count, on buckets of 175 event rows (a tenant's hour of a 300k-event, 500-tenant zone) shaped like
``events`` (strings, a timestamp, a map, an int), the median of ``--repeat`` hashings of the same buckets, two
ways, alternating:

* **bucket by bucket** — :func:`~lakeshard.buckets.checksum.rowhash2` called once per bucket (the reference: one
  call per closing bucket);
* **one pass** — :func:`~lakeshard.buckets.checksum.rowhash2_groups` over all of them (what the check uses).

Both give the same result per bucket (checked on every repeat). Reading the files is not measured: both read the
same files. Writes ``bench/results/close-check.{json,md,png}``.

    .venv/bin/python -m bench.bench_close_check [--buckets 100,500,2000] [--repeat 7]
"""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench import peer_curve
from lakeshard.buckets.checksum import rowhash2, rowhash2_groups

RESULTS = Path(__file__).resolve().parent / "results"
PEERS = ("bucket by bucket", "one pass")
ROWS_PER_BUCKET = 175


def bucket(tenant: int, rows: int) -> pa.Table:
    """One bucket's rows: one tenant, one hour, varied string lengths, some nulls and maps."""
    start = datetime(2026, 1, 1, 5, tzinfo=UTC)
    return pa.table({
        "tenant_id": [f"tenant-{tenant:05d}"] * rows,
        "event_id": [f"{tenant:05d}-{i:08d}-" + "x" * (i % 40) for i in range(rows)],
        "ts": pa.array([start + timedelta(seconds=i * 7 % 3600) for i in range(rows)], pa.timestamp("us", tz="UTC")),
        "service": pa.array([None if i % 11 == 0 else f"svc-{i % 13}" for i in range(rows)], pa.string()),
        "message": pa.array(["m" * (i * 37 % 300) for i in range(rows)], pa.string()),
        "attributes": pa.array([[("env", "prod"), ("k", str(i))] for i in range(rows)],
                               pa.map_(pa.string(), pa.string())),
        "size_bytes": pa.array([100 + i % 900 for i in range(rows)], pa.int32()),
    })


def measure(counts: list[int], repeat: int, work: Path) -> list[dict[str, Any]]:
    """Return one row per bucket count (``work`` is not used: the buckets are made in memory)."""
    rows, out = ROWS_PER_BUCKET, []
    for n in counts:
        groups = {(f"tenant-{t:05d}", "2026-01-01T05"): bucket(t, rows) for t in range(n)}
        times: dict[str, list[float]] = {p: [] for p in PEERS}
        for _ in range(repeat):
            started = time.perf_counter()
            alone = {k: rowhash2(t) for k, t in groups.items()}
            times["bucket by bucket"].append(time.perf_counter() - started)
            started = time.perf_counter()
            together = rowhash2_groups(groups)
            times["one pass"].append(time.perf_counter() - started)
            if together != alone:
                raise SystemExit(f"the two ways disagree at {n} buckets")
        row: dict[str, Any] = {"buckets": n, "rows_per_bucket": rows}
        row.update({p: round(statistics.median(ts) * 1000, 2) for p, ts in times.items()})
        row["ratio"] = round(row["one pass"] / row["bucket by bucket"], 3)
        print(f"{n:>6} buckets: bucket by bucket {row['bucket by bucket']:>9.1f} ms, one pass "
              f"{row['one pass']:>8.1f} ms ({row['ratio']}x)", flush=True)
        out.append(row)
    return out


def render_md(doc: dict[str, Any]) -> str:
    rows = doc["rows"]
    lines = ["# The closing check's hashing: one pass against bucket by bucket", "",
             f"{doc['machine']}, {doc['date']}; median of {doc['repeat']} runs per point, "
             f"{rows[0]['rows_per_bucket']} rows per bucket (`bench/bench_close_check.py`).", "",
             "| buckets | bucket by bucket (ms) | one pass (ms) | one pass / bucket by bucket |",
             "| --- | --- | --- | --- |"]
    lines += [f"| {r['buckets']:,} | {r['bucket by bucket']} | {r['one pass']} | **{r['ratio']}** |" for r in rows]
    lines += ["", *peer_curve.growth_lines(rows, "buckets", PEERS, "buckets"), ""]
    return "\n".join(lines)


def main() -> int:
    return peer_curve.main(__doc__ or "", sizes_flag="buckets", sizes="100,500,2000",
                           sizes_help="bucket counts, ascending", repeat=7, name="close-check", results=RESULTS,
                           measure=measure, render_md=render_md, x="buckets", peers=PEERS,
                           xlabel="buckets closing at once", ylabel="ms to hash them (median)",
                           title="Closing check: rowhash2 of every closing bucket")

if __name__ == "__main__":
    raise SystemExit(main())
