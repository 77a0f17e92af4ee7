"""Compaction and pruning (issue 5): lakeshard compaction vs delta-rs ``optimize.compact()`` and ``z_order()``.

One small-file ``events`` table (default 2,000,000 events, 4 tenants x 2 hours = 8 buckets, 50 sorted files
per bucket = 400 files, as shard writers flush them) is copied three times and compacted by:

* **lakeshard** — size-tiered + locality compaction (:class:`lakeshard.compaction.Compactor`), outputs sorted
  by ``service, status, env, ts`` with per-file pruning regexes in the ``fragments`` table, rows with values rare in
  their bucket in a separate outlier file per bucket (default settings); also run without outlier files
  and with a small merge budget (streaming merge), for comparison;
* **delta-rs compact** — ``DeltaTable.optimize.compact(target_size=...)``;
* **delta-rs z-order** — ``DeltaTable.optimize.z_order(["service", "status", "env", "ts"], target_size=...)``.

The delta-rs target size is set to lakeshard's target rows times the input's bytes per row, so all three
aim at the same file size. For each table: wall time, files out, and — for needle queries per tenant over
both hours — files read after partition + min/max pruning (and, for lakeshard, + regex pruning). During
the lakeshard run the JVM's peak heap (all heap pools, reset before) and the Python process's RSS
high-water mark are recorded next to the input's uncompressed size.

Writes ``bench/results/compaction.json`` and ``compaction.md``.

    .venv/bin/python -m bench.bench_compaction [--events 2000000] [--driver-memory 1g]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from lakeshard.compaction import CompactionSettings, Compactor, LocalityPlanner, SizeTieredPlanner, read_fragments
from lakeshard.config import load_config
from lakeshard.lake import open_store
from lakeshard.query import choose_files
from lakeshard.runtime import get_spark
from lakeshard.tables import EVENTS_SCHEMA

RESULTS = Path(__file__).resolve().parent / "results"
SORT = ["service", "status", "env", "ts"]
# Zipf-like service weights: a few hot services, a long tail; "sync" is the rarest.
SERVICES = ["api-gateway", "auth", "billing", "cart", "catalog", "checkout", "db-proxy", "email", "etl",
            "frontend", "graphql", "ingest", "inventory", "ledger", "media", "mobile-bff", "payments",
            "pricing", "search", "session", "shipping", "sync", "thumbnailer", "web", "worker"]
STATUSES = ["debug", "info", "notice", "warn", "error", "critical"]
STATUS_WEIGHTS = [0.06, 0.70, 0.04, 0.12, 0.07, 0.01]
# "canary" is rare and only two services deploy canaries (a non-leading needle that min/max cannot place).
CANARY_SERVICES = {"checkout", "search"}
NEEDLES: list[tuple[str, str, str]] = [
    ("service", "sync", "rare value of the leading column"),
    ("service", "metadata", "absent, sorts between present values (media < metadata < mobile-bff)"),
    ("status", "critical", "rare value, 2nd column"),
    ("status", "fatal", "absent, between present values (error < fatal < info)"),
    ("env", "canary", "rare value, 3rd column, only in 2 services"),
    ("env", "perf", "absent, between present values (dev < perf < prod)"),
    ("status", "info", "common value (70%), 2nd column"),
    ("env", "staging", "common value (11%), 3rd column"),
    ("service", "inventory", "mid-frequency value of the leading column"),
]


def say(text: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {text}", flush=True)


def _arrow_schema() -> pa.Schema:
    return pa.schema([
        ("tenant_id", pa.string(), False), ("event_id", pa.string(), False),
        ("ts", pa.timestamp("us", tz="UTC"), False), ("service", pa.string()), ("status", pa.string()),
        ("env", pa.string()), ("host", pa.string()), ("message", pa.string()),
        ("attributes", pa.map_(pa.string(), pa.string())), ("size_bytes", pa.int32()),
        ("shard", pa.int32(), False), ("routed_version", pa.int64(), False), ("hour", pa.string(), False),
        ("late", pa.bool_()),
    ])


def _flush(rng: np.random.Generator, tenants: int, hours: list[datetime], rows: int, flush: int) -> pa.Table:
    """Return one writer flush: ``rows`` events per bucket, each bucket's rows sorted by the sort schema."""
    weights = 1.0 / np.arange(1, len(SERVICES) + 1) ** 1.1
    weights /= weights.sum()
    parts = []
    for t in range(tenants):
        for h, start in enumerate(hours):
            svc = np.array(SERVICES)[rng.choice(len(SERVICES), rows, p=weights[::-1] if t % 2 else weights)]
            # the tail service "sync" stays rare whatever the permutation
            svc[svc == "sync"] = "worker"
            svc[rng.random(rows) < 0.0005] = "sync"
            status = np.array(STATUSES)[rng.choice(len(STATUSES), rows, p=STATUS_WEIGHTS)]
            env = np.array(["prod", "staging", "dev"])[rng.choice(3, rows, p=[0.85, 0.11, 0.04])]
            canary = np.isin(svc, list(CANARY_SERVICES)) & (rng.random(rows) < 0.02)
            env[canary] = "canary"
            ts = np.datetime64(start.replace(tzinfo=None), "us") + rng.integers(0, 3_600_000_000, rows).astype(
                "timedelta64[us]")
            order = np.lexsort((ts, env, status, svc))
            n = np.arange(rows)
            parts.append(pa.table({
                "tenant_id": np.full(rows, f"tenant-{t}"),
                "event_id": np.char.add(f"e{flush}-{t}-{h}-", n.astype(str))[order],
                "ts": pa.array(ts[order], pa.timestamp("us", tz="UTC")),
                "service": svc[order], "status": status[order], "env": env[order],
                "host": np.char.add("host-", rng.integers(0, 50, rows).astype(str))[order],
                "message": np.char.add("request handled in ms=", rng.integers(0, 5000, rows).astype(str))[order],
                "attributes": pa.nulls(rows, pa.map_(pa.string(), pa.string())),
                "size_bytes": pa.array(rng.integers(80, 400, rows), pa.int32()),
                "shard": pa.array(np.full(rows, flush % 16), pa.int32()),
                "routed_version": pa.array(np.full(rows, flush), pa.int64()),
                "hour": np.full(rows, start.strftime("%Y-%m-%dT%H")),
                "late": pa.array(np.zeros(rows, dtype=bool)),
            }, schema=_arrow_schema()))
    return pa.concat_tables(parts)


def build_table(store: Any, uri: str, events: int, tenants: int, hours: int, files: int, seed: int) -> None:
    """Write the small-file table: ``files`` appends, each adding one sorted file per bucket."""
    store.create(uri, EVENTS_SCHEMA, partition_by=["tenant_id", "hour"])
    rng = np.random.default_rng(seed)
    starts = [datetime(2026, 1, 1, 10, tzinfo=UTC) + timedelta(hours=h) for h in range(hours)]
    rows = events // (tenants * hours * files)
    for flush in range(files):
        write_deltalake(uri, _flush(rng, tenants, starts, rows, flush), mode="append",
                        partition_by=["tenant_id", "hour"])
        if flush % 10 == 9:
            say(f"  wrote {flush + 1}/{files} flushes")


def _jvm_peak_heap(spark: Any, reset: bool) -> int:
    """Return the summed peak usage of the JVM's heap pools (and reset the peaks first when asked)."""
    jvm = spark.sparkContext._jvm
    pools = jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()
    total = 0
    for pool in pools:
        if str(pool.getType().toString()) != "Heap memory":
            continue
        if reset:
            pool.resetPeakUsage()
        else:
            total += int(pool.getPeakUsage().getUsed())
    return total


def _lakeshard_run(spark: Any, store: Any, uri: str, settings: CompactionSettings) -> dict[str, Any]:
    """Compact ``uri`` and return wall time and memory: the merge's Arrow peak (proxy pool) and the JVM's heap."""
    _jvm_peak_heap(spark, reset=True)
    # Every Arrow allocation of the merge goes through this proxy, so its high-water mark is the merge's.
    previous_pool = pa.default_memory_pool()
    merge_pool = pa.proxy_memory_pool(previous_pool)
    pa.set_memory_pool(merge_pool)
    started = time.perf_counter()
    try:
        report = Compactor(store, uri, settings=settings).run(apply=True)
    finally:
        pa.set_memory_pool(previous_pool)
    return {"seconds": time.perf_counter() - started, "rounds": len(report.rounds),
            "arrow_peak_bytes": merge_pool.max_memory(), "memory_budget_bytes": settings.memory_budget_bytes,
            "jvm_peak_heap_bytes": _jvm_peak_heap(spark, reset=False),
            "python_max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def _needles(store: Any, uri: str, tenants: int, hours: int, with_regex: bool) -> dict[str, int]:
    files = store.files(uri)
    fragments = read_fragments(store, uri, files) if with_regex else {}
    start = datetime(2026, 1, 1, 10, tzinfo=UTC)
    out = {}
    for column, value, _ in NEEDLES:
        read = 0
        for t in range(tenants):
            kept, _report = choose_files(files, fragments, tenant=f"tenant-{t}", start=start,
                                         end=start + timedelta(hours=hours), predicates={column: value},
                                         use_regex=with_regex)
            read += len(kept)
        out[f"{column}={value}"] = read
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--tenants", type=int, default=4)
    parser.add_argument("--hours", type=int, default=2)
    parser.add_argument("--files", type=int, default=50, help="small files per bucket")
    parser.add_argument("--target-rows", type=int, default=25_000, help="rows per output file")
    parser.add_argument("--driver-memory", default="1g")
    parser.add_argument("--memory-budget-mib", type=int, default=256, help="the streaming merge's memory budget")
    parser.add_argument("--small-budget-mib", type=int, default=64,
                        help="a second lakeshard run with this smaller budget (streaming merge in many steps)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="time lakeshard and delta-rs compact this many times each, interleaved on fresh "
                             "copies (the machine is shared: the median is reported, every time is kept)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--work", default=None, help="directory for the tables (default: a temporary one)")
    args = parser.parse_args()

    work = Path(args.work or tempfile.mkdtemp(prefix="lakeshard-bench-compaction-"))
    cfg = load_config(overrides={"spark": {"master": "local[2]", "shuffle_partitions": 4,
                                           "driver_memory": args.driver_memory, "adapter": "embedded"}})
    say(f"starting Spark (driver memory {args.driver_memory}) ...")
    spark = get_spark(cfg)
    store = open_store(spark, cfg)
    base = str(work / "base" / "events")
    say(f"writing {args.events:,} events as {args.tenants * args.hours * args.files} small files to {base}")
    build_table(store, base, args.events, args.tenants, args.hours, args.files, args.seed)
    inputs = store.files(base)
    rows_in = sum(f.num_records or 0 for f in inputs)
    bytes_in = sum(f.size_bytes for f in inputs)
    uncompressed = sum(DeltaTable(base).to_pyarrow_dataset().to_table(columns=[c]).nbytes for c in
                       [f.name for f in EVENTS_SCHEMA.fields if f.name not in ("tenant_id", "hour")])
    target_bytes = int(args.target_rows * bytes_in / rows_in)
    results: dict[str, Any] = {}
    copies = {name: str(work / name / "events")
              for name in ("lakeshard", "lakeshard_no_outliers", "lakeshard_small_budget", "delta_compact",
                           "delta_zorder")}
    for path in copies.values():
        shutil.copytree(base, path)

    def settings(budget: int, outliers: bool) -> CompactionSettings:
        return CompactionSettings(
            size_tiered=SizeTieredPlanner(min_files=32, target_rows=args.target_rows,
                                          base_rows=args.target_rows // 64, growth=4),
            locality=LocalityPlanner(target_rows=args.target_rows, growth=4), max_retries=3,
            memory_budget_bytes=budget * 2**20, **({} if outliers else {"outliers": None}))

    def compact(path: str) -> float:
        started = time.perf_counter()
        DeltaTable(path).optimize.compact(target_size=target_bytes)
        return time.perf_counter() - started

    # lakeshard and delta-rs compact alternate on fresh copies, so both see the same load on a shared machine;
    # the first copies are the ones whose files the needle queries count.
    timed: dict[str, list[dict[str, Any]]] = {"lakeshard": [], "delta_compact": []}
    for n in range(args.repeat):
        fresh = {name: copies[name] if n == 0 else str(work / f"{name}-{n}" / "events")
                 for name in ("lakeshard", "delta_compact")}
        if n > 0:
            for path in fresh.values():
                shutil.copytree(base, path)
        say(f"run {n + 1}/{args.repeat}: delta-rs optimize.compact, then lakeshard ({args.memory_budget_mib} MiB) ...")
        timed["delta_compact"].append({"seconds": compact(fresh["delta_compact"])})
        timed["lakeshard"].append(_lakeshard_run(spark, store, fresh["lakeshard"],
                                                 settings(args.memory_budget_mib, True)))
    for name, runs in timed.items():
        seconds = [r["seconds"] for r in runs]
        results[name] = {**runs[0], "seconds": statistics.median(seconds), "seconds_each": seconds}
        if name == "lakeshard":
            results[name]["arrow_peak_bytes"] = max(r["arrow_peak_bytes"] for r in runs)
    for name, budget, outliers in (("lakeshard_no_outliers", args.memory_budget_mib, False),
                                   ("lakeshard_small_budget", args.small_budget_mib, True)):
        say(f"{name}: compaction with a {budget} MiB merge budget ...")
        results[name] = _lakeshard_run(spark, store, copies[name], settings(budget, outliers))

    say("delta-rs optimize.z_order ...")
    started = time.perf_counter()
    DeltaTable(copies["delta_zorder"]).optimize.z_order(SORT, target_size=target_bytes)
    results["delta_zorder"] = {"seconds": time.perf_counter() - started}

    for name, uri in copies.items():
        files = store.files(uri)
        rows = sum(f.num_records or 0 for f in files)
        if rows != rows_in:
            raise SystemExit(f"{name}: {rows} rows after compaction, {rows_in} before")
        results[name].update(files_out=len(files), rows=rows,
                             needles_min_max=_needles(store, uri, args.tenants, args.hours, with_regex=False))
        if name.startswith("lakeshard"):
            results[name]["needles_regex"] = _needles(store, uri, args.tenants, args.hours, with_regex=True)
        say(f"{name}: {results[name]['seconds']:.1f}s, {len(files)} files")
    summary = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"), "machine": platform.platform(),
        "cpus": os.cpu_count(), "events": rows_in, "buckets": args.tenants * args.hours, "files_in": len(inputs),
        "bytes_in": bytes_in,
        "uncompressed_bytes_in": uncompressed, "target_rows": args.target_rows, "target_bytes": target_bytes,
        "driver_memory": args.driver_memory, "results": results,
        "needles": [{"predicate": f"{c}={v}", "what": w} for c, v, w in NEEDLES],
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "compaction.json").write_text(json.dumps(summary, indent=2) + "\n")
    (RESULTS / "compaction.md").write_text(_markdown(summary))
    print(_markdown(summary))


def _goals(s: dict[str, Any]) -> list[str]:
    """Return the issue's goals, each with the ratio this run measured and whether it is met."""
    r = s["results"]
    wall = r["lakeshard"]["seconds"] / r["delta_compact"]["seconds"]
    needles = {n["predicate"]: n["what"] for n in s["needles"]}

    def ratio(p: str) -> float:
        zorder = r["delta_zorder"]["needles_min_max"][p]
        ours = r["lakeshard"]["needles_regex"][p]
        return ours / zorder if zorder else (0.0 if ours == 0 else float("inf"))

    needles_asked = [p for p, what in needles.items() if not what.startswith(("common", "mid-frequency"))]
    leading = [p for p in needles_asked if p.startswith("service=")]
    other = [p for p in needles_asked if not p.startswith("service=")]
    worst_other = max(ratio(p) for p in other)
    worst_leading = max(ratio(p) for p in leading)

    def met(ok: bool) -> str:
        return "met" if ok else "**not met**"

    return [
        f"- needle files read <= 0.5x z-order on non-leading columns (rare and absent values): worst "
        f"{worst_other:.2f}x — {met(worst_other <= 0.5)};",
        f"- no worse than z-order on the leading column: worst {worst_leading:.2f}x — {met(worst_leading <= 1)};",
        f"- wall time within 2x of delta-rs compact: {wall:.2f}x in this run — {met(wall <= 2)}.",
    ]


def _markdown(s: dict[str, Any]) -> str:
    r = s["results"]
    ls, plain, compact, zorder = r["lakeshard"], r["lakeshard_no_outliers"], r["delta_compact"], r["delta_zorder"]
    lines = [
        "# Compaction benchmark", "",
        f"lakeshard and delta-rs compact ran {len(ls['seconds_each'])} times each, alternating on fresh copies of the "
        "table (the machine is shared); their wall time is the median. The other columns ran once.", "",
        f"{s['events']:,} events in {s['files_in']} small files ({s['bytes_in'] / 2**20:.0f} MiB on disk, "
        f"{s['uncompressed_bytes_in'] / 2**20:.0f} MiB in Arrow); target {s['target_rows']:,} rows "
        f"= {s['target_bytes'] / 2**20:.1f} MiB per file; {s['cpus']} CPUs; {s['when']}.", "",
        "| | lakeshard | lakeshard, no outlier files | delta-rs compact | delta-rs z-order |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| wall time (s) | {ls['seconds']:.1f} | {plain['seconds']:.1f} | {compact['seconds']:.1f} | "
        f"{zorder['seconds']:.1f} |",
        f"| wall time, each run (s) | {' / '.join(f'{t:.1f}' for t in ls['seconds_each'])} | | "
        f"{' / '.join(f'{t:.1f}' for t in compact['seconds_each'])} | |",
        f"| wall time / delta-rs compact | {ls['seconds'] / compact['seconds']:.2f} | "
        f"{plain['seconds'] / compact['seconds']:.2f} | 1.00 | {zorder['seconds'] / compact['seconds']:.2f} |",
        f"| files out | {ls['files_out']} | {plain['files_out']} | {compact['files_out']} | {zorder['files_out']} |",
        "",
        "Files read per needle query (summed over tenants; partition pruning first, then min/max stats, "
        "and for lakeshard regexes):", "",
        "| needle | what | lakeshard (regex) | lakeshard (min/max only) | lakeshard, no outlier files (regex) "
        "| compact (min/max) | z-order (min/max) | lakeshard / z-order |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n in s["needles"]:
        p = n["predicate"]
        ours, z = ls["needles_regex"][p], zorder["needles_min_max"][p]
        ratio = f"{ours / z:.2f}" if z else "n/a"
        lines.append(f"| `{p}` | {n['what']} | {ours} | {ls['needles_min_max'][p]} | {plain['needles_regex'][p]} | "
                     f"{compact['needles_min_max'][p]} | {z} | {ratio} |")
    lines += ["", "Goals (computed from this run):", "", *_goals(s), "",
              "Memory of the lakeshard compaction (a bucket's merge runs in memory when 3x its input fits its share "
              "of the budget, else streams; Arrow peak measured with a proxy memory pool):",
              "", "| run | merge budget | wall time (s) | files out | Arrow peak | one bucket's input (Arrow) |",
              "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name in ("lakeshard", "lakeshard_no_outliers", "lakeshard_small_budget"):
        run = r[name]
        per_bucket = s["uncompressed_bytes_in"] / s["buckets"] / 2**20
        lines.append(f"| {name} | {run['memory_budget_bytes'] / 2**20:.0f} MiB | {run['seconds']:.1f} | "
                     f"{run['files_out']} | {run['arrow_peak_bytes'] / 2**20:.1f} MiB | {per_bucket:.0f} MiB |")
    lines += ["", f"JVM peak heap during the lakeshard run {ls['jvm_peak_heap_bytes'] / 2**20:.0f} MiB "
              f"(driver memory {s['driver_memory']}; the merge does not use Spark). Python max RSS over the whole "
              f"run, data generation included: {r['lakeshard_small_budget']['python_max_rss_bytes'] / 2**20:.0f} MiB.",
              ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
