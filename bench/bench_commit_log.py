"""What one small append costs as a table's Delta log grows: lakeshard's embedded store against delta-rs' defaults.

A lakehouse that runs every few minutes keeps 30 days of commit files (``delta.logRetentionDuration``) in each
table's ``_delta_log``: ``pipeline_events`` gets ~1,400 a day at the two-day bench's rate, 42,000 in 30 days.
Per log length (commits made before measuring), on a small unpartitioned table with a checkpoint every 100
commits, the median of ``--repeat`` appends of one row, each followed by the snapshot update the next commit
needs, two ways, alternating:

* **delta-rs defaults** — ``create_write_transaction`` of a one-row file, with its default post-commit hooks: a
  checkpoint every 100 commits, and a listing of the whole log after each commit to delete expired commit files;
* **lakeshard** — the same call with :data:`lakeshard.lake.embedded.write.COMMIT_HOOKS`: the checkpoint, no
  per-commit cleanup (compact_books cleans every table's log once an hour, ``clean_logs``).

Writes ``bench/results/commit-log.{json,md,png}``.

    .venv/bin/python -m bench.bench_commit_log [--lengths 100,2000,5000,10000] [--repeat 30]
"""

from __future__ import annotations

import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.transaction import AddAction, PostCommitHookProperties

from bench import peer_curve
from lakeshard.lake.embedded.write import COMMIT_HOOKS

RESULTS = Path(__file__).resolve().parent / "results"
PEERS: dict[str, PostCommitHookProperties | None] = {"delta-rs defaults": None, "lakeshard": COMMIT_HOOKS}
ROW = pa.table({"n": pa.array([1], pa.int64())})


def _commit(dt: DeltaTable, hooks: PostCommitHookProperties | None) -> float:
    """Return the seconds the commit of one one-row file (written first, as lakeshard's appends do) and the
    snapshot update after it took."""
    name = f"part-{uuid.uuid4().hex}.parquet"
    path = Path(dt.table_uri.removeprefix("file://")) / name
    pq.write_table(ROW, path)
    add = AddAction(path=name, size=path.stat().st_size, partition_values={},
                    modification_time=int(time.time() * 1000), data_change=True, stats='{"numRecords":1}')
    started = time.perf_counter()
    dt.create_write_transaction([add], mode="append", schema=dt.schema(),
                                commit_properties=CommitProperties(custom_metadata={"bench": "1"}),
                                post_commithook_properties=hooks)
    dt.update_incremental()
    return time.perf_counter() - started


def measure(lengths: list[int], repeat: int, work: Path) -> list[dict[str, Any]]:
    """Return, per log length, the median append seconds of each peer on one table grown to that length."""
    uri = str(work / "table")
    write_deltalake(uri, ROW)
    dt = DeltaTable(uri)
    made, rows = 1, []
    for length in lengths:
        grow_started = time.perf_counter()
        while made < length:  # grown with lakeshard's hooks: nothing expires within the bench anyway
            _commit(dt, COMMIT_HOOKS)
            made += 1
        times: dict[str, list[float]] = {peer: [] for peer in PEERS}
        for _ in range(repeat):
            for peer, hooks in PEERS.items():
                times[peer].append(_commit(dt, hooks))
        made += repeat * len(PEERS)
        log_files = sum(1 for p in (Path(uri) / "_delta_log").iterdir() if p.suffix == ".json")
        row = {"log_commits": length, "log_json_files": log_files,
               **{peer: round(statistics.median(ts) * 1000, 2) for peer, ts in times.items()}}
        row["ratio"] = round(row["lakeshard"] / row["delta-rs defaults"], 3)
        rows.append(row)
        print(f"{length:>7,} commits ({log_files:,} json files, grown in {time.perf_counter() - grow_started:.0f}s):"
              + "".join(f" {peer} {row[peer]} ms" for peer in PEERS) + f", ratio {row['ratio']}", flush=True)
    return rows


def render_md(doc: dict[str, Any]) -> str:
    lines = [
        "# One small append as the Delta log grows (`bench_commit_log.py`)", "",
        f"{doc['machine']}; {doc['date']}. Median of {doc['repeat']} one-row appends per log length and side, "
        "alternating, each with the snapshot update the next commit needs (milliseconds). **delta-rs defaults**: "
        "its post-commit hooks list the whole log after every commit to delete expired commit files. "
        "**lakeshard**: the same commit without that listing; compact_books cleans every table's log hourly.", "",
        "| log commits | json files in `_delta_log` | delta-rs defaults ms | lakeshard ms | ratio |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [f"| {r['log_commits']:,} | {r['log_json_files']:,} | {r['delta-rs defaults']} | {r['lakeshard']} | "
              f"**{r['ratio']}** |" for r in doc["rows"]]
    lines += ["", *peer_curve.growth_lines(doc["rows"], "log_json_files", PEERS, "commit files in the log")]
    return "\n".join(lines) + "\n"


def main() -> int:
    return peer_curve.main(__doc__ or "", sizes_flag="lengths", sizes="100,2000,5000,10000",
                           sizes_help="log lengths to measure at, ascending", repeat=30, name="commit-log",
                           results=RESULTS, measure=measure, render_md=render_md, x="log_json_files", peers=PEERS,
                           xlabel="commit files in _delta_log", ylabel="median append + snapshot update (ms)",
                           title="One small append as the log grows")

if __name__ == "__main__":
    raise SystemExit(main())
