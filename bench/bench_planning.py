"""Query planning cost: a needle query's plan with 100 vs 10,000 commits in the log, and 10k vs 100k live files.

Planning is :func:`lakeshard.query.plan_read`: the table's live files (the store's snapshot, replayed
from the checkpoint and probed commit files without listing ``_delta_log``), the
partition stage, one pruned read of the ``fragments`` table (the needle's bucket only), min/max and regex
pruning. No Spark job and no data file is read. For contrast, the walk of the history that planning did
before the ``fragments`` table (:func:`~lakeshard.compaction.fragment_table.commit_info_fragments`) is timed
on the same tables.

The tables are built cheaply, not through the pipeline: a few template Parquet files (one per hour) are
hard-linked as every data file, and the Delta log's commit files are written directly (the protocol's JSON:
add actions with statistics; commits without files carry an app transaction, as the completionist's fences
do), with a checkpoint 50 commits before the end, as delta-rs' checkpoint every 100 commits leaves the log.
Every live file of a compacted bucket has a ``fragments`` row.

Each figure is the median of ``--repeat`` runs (alternating between the two tables compared), **cold** (a new
store: the snapshot is loaded from the checkpoint and the commits after it, as a new query process does) and
**warm** (the same store again).

Writes ``bench/results/planning.json``, ``planning.md`` and ``planning.png``.

    .venv/bin/python -m bench.bench_planning [--repeat 15] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from lakeshard.compaction import FragmentMeta, FragmentTable
from lakeshard.compaction.fragment_table import commit_info_fragments
from lakeshard.lake import EmbeddedTableStore
from lakeshard.pruning import ColumnPruning
from lakeshard.query import in_partitions, plan_read
from lakeshard.tables import EVENTS_PARTITIONING, EVENTS_SCHEMA

RESULTS = Path(__file__).resolve().parent / "results"
DAY = datetime(2026, 3, 1, tzinfo=UTC)
HOURS = 24
TENANTS = 50
TAIL = 50  # commits after the newest checkpoint
# The needle lies inside every file's env [min, max]: min/max cannot prune it, the env regex can.
ENVS = ("dev", "prod", "staging")
NEEDLE = {"env": "pre.view|1"}
NEEDLE_TENANT, NEEDLE_HOUR = "tenant-000", 7


def _hour(h: int) -> str:
    return (DAY + timedelta(hours=h)).strftime("%Y-%m-%dT%H")


def _templates(root: Path, store: EmbeddedTableStore, uri: str) -> dict[int, tuple[Path, int, dict[str, Any]]]:
    """Return per hour a tiny Parquet file (the table's columns minus partitions), its size and its stats."""
    schema = store.arrow_schema(uri)
    file_schema = pa.schema([f for f in schema if f.name not in EVENTS_PARTITIONING])
    out = {}
    for h in range(HOURS):
        start = DAY + timedelta(hours=h)
        rows = [{"event_id": f"e{h}-{i}", "ts": start + timedelta(minutes=10 * i + 1), "service": "api",
                 "status": "info", "env": ENVS[i % len(ENVS)], "size_bytes": 100, "shard": 0, "routed_version": 1}
                for i in range(5)]
        path = root / f"template-{h:02d}.parquet"
        pq.write_table(pa.Table.from_pylist(rows, schema=file_schema), path)
        stats = {"numRecords": 5, "minValues": {"ts": rows[0]["ts"].strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                                                 "service": "api", "env": min(ENVS), "status": "info"},
                 "maxValues": {"ts": rows[-1]["ts"].strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                               "service": "api", "env": max(ENVS), "status": "info"},
                 "nullCount": {"ts": 0}}
        out[h] = (path, path.stat().st_size, stats)
    return out


def _commit(log: Path, version: int, actions: list[dict[str, Any]]) -> None:
    info = {"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "WRITE",
                           "operationParameters": {"mode": "Append"}}}
    (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in [info, *actions]) + "\n")


def build(root: Path, name: str, *, live_files: int, commits: int) -> tuple[str, dict[str, float]]:
    """Return the URI of an events table with ``live_files`` files added over the first commits and
    ``commits`` commits in all (the rest carry only an app transaction), and the build's timings."""
    t0 = time.perf_counter()
    uri = str(root / name)
    store = EmbeddedTableStore(None)
    store.create(uri, EVENTS_SCHEMA, partition_by=EVENTS_PARTITIONING)
    templates = _templates(root, store, uri)
    log = Path(uri) / "_delta_log"
    checkpoint_at = max(1, commits - 1 - TAIL)
    data_commits = min(checkpoint_at, 100)
    per_commit = -(-live_files // data_commits)
    metas: list[FragmentMeta] = []
    buckets: list[tuple[str, str]] = []
    columns = {"service": ColumnPruning.build(["api"]), "status": ColumnPruning.build(["info"]),
               "env": ColumnPruning.build(ENVS)}
    version, made, millis = 0, 0, int(time.time() * 1000)
    while made < live_files:
        version += 1
        adds = []
        for i in range(made, min(live_files, made + per_commit)):
            tenant, h = f"tenant-{i % TENANTS:03d}", (i // TENANTS) % HOURS
            rel = f"tenant_id={tenant}/hour={_hour(h)}/part-{i:07d}.parquet"
            target = Path(uri) / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            os.link(templates[h][0], target)
            adds.append({"add": {"path": rel, "partitionValues": {"tenant_id": tenant, "hour": _hour(h)},
                                 "size": templates[h][1], "modificationTime": millis, "dataChange": True,
                                 "stats": json.dumps(templates[h][2])}})
            first = (("api", "info", "prod", (DAY + timedelta(hours=h)).strftime("%Y-%m-%d %H:%M:%S.000000")))
            metas.append(FragmentMeta(rel, 1, 5, first, first, columns))
            buckets.append((tenant, _hour(h)))
        made += len(adds)
        _commit(log, version, adds)
        if version == checkpoint_at:
            DeltaTable(uri).create_checkpoint()
    while version < commits - 1:
        version += 1
        _commit(log, version, [{"txn": {"appId": "bench/fence", "version": version, "lastUpdated": millis}}])
        if version == checkpoint_at:
            DeltaTable(uri).create_checkpoint()
    t1 = time.perf_counter()
    fragments = FragmentTable(store, uri)
    fragments.write(metas, buckets)
    t2 = time.perf_counter()
    fragments.ensure()  # the one-time migration: a walk of the history, as an existing lakehouse pays once
    t3 = time.perf_counter()
    return uri, {"build_s": round(t1 - t0, 2), "fragments_write_s": round(t2 - t1, 2),
                 "migration_s": round(t3 - t2, 2)}


def _plan(uri: str, store: EmbeddedTableStore) -> tuple[list[Any], Any]:
    start = DAY + timedelta(hours=NEEDLE_HOUR)
    return plan_read(store, uri, tenant=NEEDLE_TENANT, start=start, end=start + timedelta(hours=1), predicates=NEEDLE)


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure_pair(uris: tuple[str, str], repeat: int) -> list[dict[str, Any]]:
    """Return, for each of two tables, the needle's planning times (cold, warm), what it read, the history
    walk's time and the snapshot load's; runs alternate between the two tables, so that load from other
    processes on the machine falls on both alike."""
    warm = [EmbeddedTableStore(None), EmbeddedTableStore(None)]
    times: list[dict[str, list[float]]] = [{"cold": [], "warm": [], "walk": [], "load": []} for _ in uris]
    for i, uri in enumerate(uris):
        _plan(uri, warm[i])  # the warm store's first look
    for _ in range(repeat):
        for i, uri in enumerate(uris):
            times[i]["cold"].append(_timed(lambda u=uri: _plan(u, EmbeddedTableStore(None))))
            times[i]["warm"].append(_timed(lambda u=uri, s=warm[i]: _plan(u, s)))
            times[i]["load"].append(_timed(lambda u=uri: EmbeddedTableStore(None).files(u)))
    out = []
    for i, uri in enumerate(uris):
        store = EmbeddedTableStore(None)
        kept, report = _plan(uri, store)
        start = DAY + timedelta(hours=NEEDLE_HOUR)
        candidates, _ = in_partitions(store.files(uri), tenant=NEEDLE_TENANT, start=start,
                                      end=start + timedelta(hours=1))
        read = FragmentTable(store, uri).read(candidates)
        walk = statistics.median(
            _timed(lambda u=uri, c=candidates: commit_info_fragments(EmbeddedTableStore(None), u, c))
            for _ in range(max(1, repeat // 3)))
        out.append({"plan_cold_s": round(statistics.median(times[i]["cold"]), 4),
                    "plan_warm_s": round(statistics.median(times[i]["warm"]), 4),
                    "files_considered": report.considered, "files_read": len(kept),
                    "pruned_by_regex": report.pruned_by_regex, "fragments_files_read": read.files_read,
                    "fragments_rows_scanned": read.rows_scanned, "history_walk_s": round(walk, 4),
                    "snapshot_load_s": round(statistics.median(times[i]["load"]), 4)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="1,000 commits and 20k files (a smoke run)")
    args = parser.parse_args()
    many_commits, many_files = (1_000, 20_000) if args.quick else (10_000, 100_000)
    cases = [("commits", 100, 2_000), ("commits", many_commits, 2_000),
             ("files", 101, 10_000), ("files", 101, many_files)]
    root = Path(tempfile.mkdtemp(prefix="bench-planning-"))
    rows = []
    try:
        # The 100k-file table's cold load takes seconds: fewer runs there.
        for pair, repeat in ((cases[:2], args.repeat), (cases[2:], max(3, args.repeat // 3))):
            built = [build(root, f"t{len(rows) + n}", live_files=files, commits=commits)
                     for n, (_, commits, files) in enumerate(pair)]
            measured = measure_pair((built[0][0], built[1][0]), repeat)
            for (kind, commits, files), (_, build_times), m in zip(pair, built, measured, strict=True):
                row = {"experiment": kind, "commits": commits, "live_files": files, **build_times, **m}
                print(json.dumps(row))
                rows.append(row)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ratio_commits = rows[1]["plan_cold_s"] / rows[0]["plan_cold_s"]
    ratio_files = rows[3]["plan_cold_s"] / rows[2]["plan_cold_s"]
    result = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count()}, "repeat": args.repeat,
              "cases": rows, "ratio_commits_cold": round(ratio_commits, 3),
              "ratio_commits_warm": round(rows[1]["plan_warm_s"] / rows[0]["plan_warm_s"], 3),
              "ratio_files_cold": round(ratio_files, 3), "goal_ratio_commits": 1.2}
    name = "planning-quick" if args.quick else "planning"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(_markdown(result))
    _plot(result, RESULTS / f"{name}.png")
    print(f"commits ratio (cold) {ratio_commits:.2f} (goal <= 1.2); files ratio (cold) {ratio_files:.2f}")


def _markdown(result: dict[str, Any]) -> str:
    lines = ["# Query planning: commits in the log and live files", "",
             "`bench/bench_planning.py`: a needle query's plan (`plan_read`: live files, partition stage, pruned "
             "read of `fragments`, min/max and regex pruning; no Spark, no data read). Median of "
             f"{result['repeat']} runs; cold = a new store (snapshot from the checkpoint + {TAIL} commits), "
             "warm = the same store again. `history walk` is the commit-info walk planning did before the "
             "`fragments` table, on the same table; `snapshot load` is a new store's `files()` of the data table "
             "alone (`_last_checkpoint`, the checkpoint, then the commit files after it probed by name; no listing "
             "of `_delta_log`, see docs/decisions.md 16): the part of planning that is the Delta snapshot, not the "
             "planner. The `fragments` table is still loaded by delta-rs (its log is short).", "",
             "| experiment | commits | live files | plan cold (s) | plan warm (s) | files considered | files read "
             "| fragments rows scanned | history walk (s) | data table snapshot load (s) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in result["cases"]:
        lines.append(f"| {r['experiment']} | {r['commits']:,} | {r['live_files']:,} | {r['plan_cold_s']} | "
                     f"{r['plan_warm_s']} | {r['files_considered']:,} | {r['files_read']} | "
                     f"{r['fragments_rows_scanned']} | {r['history_walk_s']} | {r['snapshot_load_s']} |")
    lines += ["", f"Ratio of cold planning time, {result['cases'][1]['commits']:,} vs 100 commits: "
              f"**{result['ratio_commits_cold']}** (goal ≤ {result['goal_ratio_commits']}; warm "
              f"{result['ratio_commits_warm']}). {result['cases'][3]['live_files']:,} vs 10,000 live files: "
              f"**{result['ratio_files_cold']}** (the listing of live files is linear in them).", ""]
    return "\n".join(lines)


def _plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = result["cases"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, pair, label in ((axes[0], cases[:2], "commits"), (axes[1], cases[2:], "live_files")):
        names = [f"{c[label]:,}" for c in pair]
        x = range(len(pair))
        ax.bar([i - 0.2 for i in x], [c["plan_cold_s"] for c in pair], 0.4, label="plan (cold)")
        ax.bar([i + 0.2 for i in x], [c["history_walk_s"] for c in pair], 0.4, label="history walk (before)")
        ax.set_xticks(list(x), names)
        ax.set_xlabel(label.replace("_", " "))
        ax.set_ylabel("seconds")
        ax.legend()
    fig.suptitle("Needle query planning")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
