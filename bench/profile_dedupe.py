"""Where a lakeshard writer step's time goes, per phase, at the start and at the end of the streaming bench.

Runs ``bench_dedupe``'s lakeshard case (same data, same writer) with every phase of a step wrapped in a timer
that counts exclusive time (a phase's own time minus the phases nested in it), then prints the median per phase
of the first and last ``--window`` steps and writes ``bench/results/<output>.json`` / ``.md``. The timers patch
methods of this process only; nothing in the library changes.

    .venv/bin/python -m bench.profile_dedupe --batches 100 --batch-events 50000
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from deltalake import DeltaTable

import lakeshard.dedupe.keyhash as keyhash
import lakeshard.lake as files_mod
import lakeshard.lake.embedded.adapter as embedded
import lakeshard.lake.embedded.log as embedded_log
import lakeshard.lake.embedded.write as embedded_write
from bench import bench_dedupe as bench
from lakeshard.config import load_config
from lakeshard.dedupe import ShardWriter
from lakeshard.dedupe.engines import ArrowStep
from lakeshard.dedupe.feed import RoutedFeed
from lakeshard.dedupe.index import IdIndex
from lakeshard.lake import open_store
from lakeshard.runtime import get_spark

_stack: list[list[float]] = []  # per open phase: [started, time spent in nested phases]
_step: dict[str, float] = defaultdict(float)  # phase -> exclusive seconds within the current step


def _table_of(args: tuple[Any, ...]) -> str:
    for a in args:
        if isinstance(a, str) and "/" in a:
            parts = a.rstrip("/").split("/")
            return parts[-2] if parts[-1].startswith("w-") else parts[-1]  # a write directory: its table
        if isinstance(a, DeltaTable):
            return a.table_uri.rstrip("/").rsplit("/", 1)[-1]
    return ""


def _timed(name: str, fn: Callable[..., Any], per_table: bool = False) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        label = f"{name} [{_table_of(args)}]" if per_table else name
        _stack.append([time.perf_counter(), 0.0])
        try:
            return fn(*args, **kwargs)
        finally:
            started, nested = _stack.pop()
            spent = time.perf_counter() - started
            _step[label] += spent - nested
            if _stack:
                _stack[-1][1] += spent
    return wrapper


def _instrument() -> None:
    store = embedded.EmbeddedTableStore
    dt = embedded.DeltaTable
    dt.update_incremental = _timed("snapshot update (update_incremental)", dt.update_incremental, per_table=True)
    dt.create_write_transaction = _timed("delta-rs commit (create_write_transaction)", dt.create_write_transaction,
                                         per_table=True)
    dt.transaction_version = _timed("delta-rs transaction_version", dt.transaction_version)
    for name in ("files", "log_entries", "history", "read_arrow_groups"):
        setattr(store, name, _timed(f"store.{name}", getattr(store, name), per_table=True))
    # The store's log state and write helpers live in their own modules; the labels stay the store's phases.
    log = embedded_log.DeltaRsLog
    for name, label in (("_latest_locked", "_latest_locked"), ("app_versions", "_app_versions"), ("table", "_table")):
        setattr(log, name, _timed(f"store.{label}", getattr(log, name), per_table=True))
    for name in ("version_of_commit", "collect_adds"):
        setattr(embedded, name, _timed(f"store._{name}", getattr(embedded_write, name), per_table=True))
    live_files = _timed("store._live_files", embedded_log.live_files, per_table=True)
    for module in (embedded, embedded_log, embedded_write):
        module.live_files = live_files
    files_mod.write_partitioned = _timed("Parquet write (write_partitioned)", files_mod.write_partitioned,
                                         per_table=True)
    keyhash.key_hashes = _timed("key hashes", keyhash.key_hashes)
    # The writer's parts own their methods: each phase is timed on the class that holds it.
    phases: tuple[tuple[type, str, str], ...] = (
        (ArrowStep, "batch", "read routed batch"), (IdIndex, "check", "ID index check"),
        (IdIndex, "page_in", "ID page-in"), (ShardWriter, "compact_ids", "ID compaction"),
        (ShardWriter, "repair_ids", "repair check"), (RoutedFeed, "_new_routed_files", "new routed files"),
        (RoutedFeed, "_intake_version", "intake version"), (IdIndex, "remember", "cache remember"),
        (ArrowStep, "run", "dedupe (rest of step)"), (ShardWriter, "step", "step (rest)"))
    for owner, name, label in phases:
        setattr(owner, name, _timed(label, getattr(owner, name)))
    case = bench.Lakeshard
    case._compact_sealed_hours = _timed("events compaction of sealed hours (bench)",  # type: ignore[method-assign]
                                        case._compact_sealed_hours)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--batch-events", type=int, default=50_000)
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--output", default="dedupe-profile")
    parser.add_argument("--no-compact", action="store_true", help="leave sealed hours uncompacted (the old bench)")
    args = parser.parse_args()
    _instrument()
    work = Path(tempfile.mkdtemp(prefix="lakeshard-profile-dedupe-"))
    try:
        plan, _ = bench.plan_batches(args.batches, args.batch_events)
        paths = []
        for i, numbers in enumerate(plan):
            path = str(work / "input" / f"batch-{i:04d}.parquet")
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(bench.events_for(numbers, args.tenants), path)
            paths.append(path)
        spark = get_spark(load_config(overrides={"spark": {"driver_memory": "8g"}}, env={}))
        cfg = load_config(overrides={"lakehouse": str(work / "lakeshard"), "routing": {"total_shards": bench.SHARDS}},
                          env={})
        case = bench.Lakeshard(spark, cfg, open_store(spark, cfg))
        case.compact = not args.no_compact
        steps: list[dict[str, float]] = []
        totals: list[float] = []
        live: list[int] = []
        for i, path in enumerate(paths):
            case.prepare(path)
            _step.clear()
            started = time.perf_counter()
            case.write(path)
            totals.append(time.perf_counter() - started)
            steps.append(dict(_step))
            live.append(len(case.store.files(case.target)))
            if i % 10 == 9:
                print(f"  batch {i + 1}/{len(paths)}  {totals[-1]:.3f}s  live events files {live[-1]}", flush=True)
        report = _summary(steps, totals, live, args.window)
        report.update(when=datetime.now(UTC).isoformat(timespec="seconds"), batches=args.batches,
                      batch_events=args.batch_events, tenants=args.tenants, compact=case.compact,
                      compactions=case.compactions)
        _write(report, args.output)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _summary(steps: list[dict[str, float]], totals: list[float], live: list[int], window: int) -> dict[str, Any]:
    names = sorted({k for s in steps for k in s})
    first, last = steps[:window], steps[-window:]
    rows = []
    for n in names:
        a = statistics.median(s.get(n, 0.0) for s in first)
        b = statistics.median(s.get(n, 0.0) for s in last)
        ma = statistics.mean(s.get(n, 0.0) for s in first)
        mb = statistics.mean(s.get(n, 0.0) for s in last)
        rows.append({"phase": n, "first_median_s": round(a, 4), "last_median_s": round(b, 4),
                     "first_mean_s": round(ma, 4), "last_mean_s": round(mb, 4)})
    rows.sort(key=lambda r: -(r["last_mean_s"] - r["first_mean_s"]))
    return {"phases": rows, "step_first_median_s": round(statistics.median(totals[:window]), 4),
            "step_last_median_s": round(statistics.median(totals[-window:]), 4),
            "live_events_files_first": live[window - 1], "live_events_files_last": live[-1],
            "step_s": [round(t, 4) for t in totals], "live_events_files": live}


def _write(report: dict[str, Any], name: str) -> None:
    out = bench.RESULTS
    (out / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [f"# Where a writer step's time goes ({report['when']})", "",
             f"{report['batches']} batches x {report['batch_events']:,} events, {report['tenants']} tenants. "
             f"Step median: first 10 {report['step_first_median_s']} s, last 10 {report['step_last_median_s']} s "
             f"(ratio {report['step_last_median_s'] / report['step_first_median_s']:.2f}); live `events` files "
             f"after step 10: {report['live_events_files_first']:,}, at the end: "
             f"{report['live_events_files_last']:,}. Sealed hours compacted inside the timed steps: "
             f"{'yes' if report['compact'] else 'no'}.", "",
             "Exclusive seconds per step (a phase's time minus the phases nested in it), sorted by growth of the mean.",
             "", "| phase [table] | first-10 median | last-10 median | first-10 mean | last-10 mean |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for r in report["phases"]:
        lines.append(f"| {r['phase']} | {r['first_median_s']} | {r['last_median_s']} | {r['first_mean_s']} "
                     f"| {r['last_mean_s']} |")
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
