"""A simulated day of production runs: the declared pipeline's jobs on their schedules, against one growing lakehouse.

24 hours of arrival are replayed as ``databricks.yml``'s jobs would run them, in one process with one Spark
session (flows called in-process through :func:`~lakeshard.pipelines.run_pipeline`, so a run's latency is the
flow's, not a JVM start-up):

* the **ingest** job (flows ``route`` → ``ingest``) every 5 simulated minutes: 288 runs a day;
* the **maintenance** job (``close_buckets`` → ``compact`` → ``autoshard`` → ``balance`` → ``compact_books``) every
  simulated hour, at minute 10 as the bundle's schedule (``0 10 * * * ?``) has it.

Traffic comes from :func:`lakeshard.synth.generate_landing` (Zipf-skewed tenants, bursts, producer retries,
redelivered files, events up to 6 hours late, malformed records), generated per day into a staging directory;
each one-minute landing file is moved into the landing zone just before the first run that should see it, with
its modification time set to its simulated arrival. Time is simulated: every run gets the clock
``run_pipeline(clock=...)`` passes to the flows (placement windows, the parse's absurd-timestamp bound, settling
files, quiet periods and grace, late buckets, metric windows). The simulated day starts at the next full hour of
wall time, so it is never behind the data files' real modification times (which the Delta log records and the
completionist's quiet period and compaction's settling compare against): in simulated time every data file looks
older than it is, so the quiet period is met early and closing an hour is gated by the watermark and its grace.

``--days 2`` extends the same lakehouse with a second day (new traffic, new seed) to show whether anything grows
with age. Reported as ``bench/results/day.{json,md,png}`` for one day and ``day-<N>days.{json,md,png}`` for
``--days N`` (``--out DIR``, ``--name NAME``): each
flow's latency per run, its median in the first and last hour and their ratio (goal ≤ 1.3x), the same for the
last hour of the last day against the first hour of day 1, live files and log commits of every table per hour,
peak resident memory (driver + Spark JVM), and the exact ground-truth check at the end: every generated event
exactly once in ``events``, and the quarantine holding exactly the bad records.

    .venv/bin/python -m bench.bench_day                                   # 2M events/day, 500 tenants, 24 h
    .venv/bin/python -m bench.bench_day --hours 2 --events 100000         # a short slice
    .venv/bin/python -m bench.bench_day --days 2 --events 1000000 --keep-landing-hours 6   # results/day-2days.*
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from lakeshard.config import LakeshardConfig, load_config
from lakeshard.lake import TableStore, open_store
from lakeshard.pipelines import run_pipeline
from lakeshard.runtime import get_spark
from lakeshard.synth import EVENTS_FILE, TRUTH_DIR, Manifest, SynthSpec, check_against_truth, generate_landing
from lakeshard.tables import (
    BUCKETS,
    CHUNK_LOCKS,
    EVENTS,
    ID_INDEX,
    LANDING_BATCHES,
    PIPELINE_EVENTS,
    PLACEMENTS,
    QUARANTINE,
    ROUTED,
    ROUTING_METRICS,
    TENANT_SETTINGS,
)

RESULTS = Path(__file__).resolve().parent / "results"
INGEST_FLOWS = ("route", "ingest")
MAINTENANCE_FLOWS = ("close_buckets", "compact", "autoshard", "balance", "compact_books")
FLOWS = INGEST_FLOWS + MAINTENANCE_FLOWS
INGEST_EVERY = timedelta(minutes=5)
MAINTENANCE_MINUTE = 10  # the bundle's maintenance schedule: "0 10 * * * ?"
FILE_SECONDS = 60  # arrival covered by one landing file
TABLES = (EVENTS, ROUTED, LANDING_BATCHES, BUCKETS, PIPELINE_EVENTS, PLACEMENTS, ID_INDEX, QUARANTINE,
          ROUTING_METRICS, TENANT_SETTINGS, CHUNK_LOCKS)
_PART = re.compile(r"part-(\d+)")


# ------------------------------------------------------------------------------------------- traffic
@dataclass
class Arrivals:
    """A day's landing files, staged outside the landing zone, released in order of simulated arrival."""

    staging: Path
    landing: Path
    pending: list[tuple[datetime, str]]  # (arrival, path relative to the staging root), oldest first
    manifest: Manifest

    def retire(self, before: datetime, archive: Path) -> int:
        """Move every landing file last written before ``before`` out of the zone into ``archive`` (the lifecycle
        rule of docs/routing.md, "Landing zone lifecycle"); return how many."""
        n = 0
        for path in sorted(p for p in self.landing.rglob("*") if p.is_file()):
            if datetime.fromtimestamp(path.stat().st_mtime, UTC) < before:
                target = archive / path.relative_to(self.landing)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(path), target)
                n += 1
        return n

    def release(self, until: datetime) -> int:
        """Move every file that has arrived by ``until`` into the landing zone, stamped with its arrival; return
        how many."""
        n = 0
        while self.pending and self.pending[0][0] <= until:
            arrival, rel = self.pending.pop(0)
            target = self.landing / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(self.staging / rel), target)
            os.utime(target, (arrival.timestamp(), arrival.timestamp()))
            n += 1
        return n


def stage_day(work: Path, landing: Path, spec: SynthSpec) -> Arrivals:
    """Return the day's traffic generated into ``work`` (files and ground truth), ready to be released."""
    staging = work / f"staging-{spec.start:%Y%m%dT%H}"
    manifest = generate_landing(staging, spec, overwrite=True)
    pending = []
    for rel in manifest.file_lines:
        match = _PART.search(rel.rsplit("/", 1)[-1])
        if match is None:
            raise ValueError(f"unexpected landing file name {rel!r}")
        window = int(match.group(1))  # a redelivery is named by the window it arrives in
        pending.append((spec.start + timedelta(seconds=(window + 1) * spec.file_seconds), rel))
    pending.sort()
    return Arrivals(staging, landing, pending, manifest)


# -------------------------------------------------------------------------------------------- memory
def _status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return 0


def _mb(pids: list[int], key: str) -> float:
    return round(sum(_status_kb(p, key) for p in pids) / 1024, 1)


# ------------------------------------------------------------------------------------------------ run
@dataclass
class Day:
    """What one simulated day run gathers."""

    runs: list[dict[str, Any]] = field(default_factory=list)  # one row per flow run
    hours: list[dict[str, Any]] = field(default_factory=list)  # one row per simulated hour: table sizes, memory
    failures: list[str] = field(default_factory=list)


def table_sizes(store: TableStore, cfg: LakeshardConfig) -> dict[str, dict[str, int]]:
    """Return each table's live files and log commits (version + 1) now."""
    out = {}
    for table in TABLES:
        uri = cfg.table_uri(table)
        if store.exists(uri):
            out[table] = {"files": len(store.files(uri)), "commits": store.version(uri) + 1}
    return out


def cpu_seconds(pids: list[int]) -> float:
    """Return the CPU seconds (user + system) the driver, the Spark JVM and the JVM's Python workers used so far:
    unlike wall time, not inflated when other processes share the cores."""
    procs = [psutil.Process(p) for p in pids]
    for p in pids[1:]:
        procs += psutil.Process(p).children(recursive=True)
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
        except psutil.NoSuchProcess:  # a worker that ended meanwhile
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def _run_job(spark: SparkSession, store: TableStore, cfg: LakeshardConfig, flows: tuple[str, ...], now: datetime,
             day: int, run: int, out: Day, pids: list[int]) -> None:
    """Run a job's flows one ``run_pipeline`` each (as the job's tasks run), in order, by the simulated clock."""
    for name in flows:
        cpu = cpu_seconds(pids)
        report = run_pipeline(spark, store, cfg, flows=[name], clock=lambda: now)
        cpu = cpu_seconds(pids) - cpu
        f = report.flows[0]
        result = f.result
        out.runs.append({"day": day, "run": run, "sim_time": now.isoformat(), "flow": f.flow, "status": f.status,
                         "seconds": round(f.seconds, 3), "cpu_s": round(cpu, 3),
                         "rows_in": result.rows_in if result else 0, "rows_out": result.rows_out if result else 0})
        if f.status == "failed":  # the job's later tasks depend on this one
            out.failures.append(f"day {day} {now:%H:%M} {f.flow}: {f.error}")
            return


def simulate(spark: SparkSession, cfg: LakeshardConfig, work: Path, *, events: int, tenants: int, days: int,
             hours: float, seed: int, pids: list[int], keep_landing_hours: float = 0.0,
             say: Callable[[str], None] = print,
             hourly: Callable[[dict[str, Any]], None] = lambda partial: None) -> dict[str, Any]:
    """Return the results of ``days`` simulated days of ``hours`` each on one lakehouse under ``work``;
    ``hourly`` gets the results so far after every simulated hour (no ground truth yet). With
    ``keep_landing_hours`` > 0, landing files quiet for longer are moved out of the zone after each maintenance job
    (a lifecycle rule); 0 keeps every file in the zone."""
    store = open_store(spark, cfg)
    landing = Path(cfg.landing)
    landing.mkdir(parents=True, exist_ok=True)
    wall = datetime.now(UTC)
    first = wall.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    out = Day()
    manifests: list[Manifest] = []
    truths: list[pa.Table] = []
    started = time.perf_counter()
    run_no = 0
    for d in range(days):
        start = first + timedelta(days=d)
        spec = SynthSpec(events=events, tenants=tenants, seed=seed + d, start=start, hours=hours,
                         file_seconds=FILE_SECONDS, late_max_hours=6.0)
        gen_started = time.perf_counter()
        arrivals = stage_day(work, landing, spec)
        manifests.append(arrivals.manifest)
        truths.append(pq.read_table(arrivals.staging / TRUTH_DIR / EVENTS_FILE, columns=["tenant_id", "event_id",
                                                                                          "ts_ms"]))
        m = arrivals.manifest
        say(f"day {d + 1}: generated {m.records:,} records in {m.files} files ({m.unique_events:,} events, "
            f"{m.duplicate_records:,} duplicates, {m.bad_records:,} bad, {m.late_events:,} late) "
            f"in {time.perf_counter() - gen_started:.0f}s; simulated day starts {start:%Y-%m-%d %H:%M}Z")
        steps = round(hours * 3600 / INGEST_EVERY.total_seconds())
        hour_started, hour_first_run = time.perf_counter(), len(out.runs)
        for i in range(1, steps + 1):
            now = start + i * INGEST_EVERY
            run_no += 1
            arrivals.release(now)
            _run_job(spark, store, cfg, INGEST_FLOWS, now, d + 1, run_no, out, pids)
            if now.minute == MAINTENANCE_MINUTE:
                _run_job(spark, store, cfg, MAINTENANCE_FLOWS, now, d + 1, run_no, out, pids)
                if keep_landing_hours > 0:
                    arrivals.retire(now - timedelta(hours=keep_landing_hours), work / "landing-archive")
            if now.minute == 0 or i == steps:  # a simulated hour is over: table sizes and one progress line
                sizes = table_sizes(store, cfg)
                row = {"day": d + 1, "sim_time": now.isoformat(), "hour": (now - first).total_seconds() / 3600,
                       "wall_s": round(time.perf_counter() - started, 1), "rss_mb": _mb(pids, "VmRSS:"),
                       "tables": sizes}
                out.hours.append(row)
                this_hour = out.runs[hour_first_run:]
                med = {f: statistics.median([r["seconds"] for r in this_hour if r["flow"] == f
                                             and r["status"] == "completed"] or [0.0]) for f in FLOWS}
                say(f"day {d + 1} {now:%H:%M}Z: " + " ".join(f"{f} {med[f]:.2f}s" for f in FLOWS)
                    + f" | events {sizes.get(EVENTS, {}).get('files', 0):,} files, routed "
                    f"{sizes.get(ROUTED, {}).get('files', 0):,}, pipeline_events "
                    f"{sizes.get(PIPELINE_EVENTS, {}).get('commits', 0):,} commits | rss {row['rss_mb']:,.0f} MB"
                    f" | hour {time.perf_counter() - hour_started:.0f}s wall, total {row['wall_s']:.0f}s"
                    + (f" | {len(out.failures)} FAILED flow runs" if out.failures else ""))
                hour_started, hour_first_run = time.perf_counter(), len(out.runs)
                hourly({"runs": out.runs, "hours": out.hours, "failures": out.failures, "truth": None,
                        "wall_s": round(time.perf_counter() - started, 1), "peak_rss_mb": _mb(pids, "VmHWM:"),
                        "first_hour": first.isoformat(), "manifests": []})
        if arrivals.pending:  # cannot happen: the last run is at the end of the arrival span
            out.failures.append(f"day {d + 1}: {len(arrivals.pending)} landing files never released")
    wall_s = time.perf_counter() - started

    say("checking against ground truth ...")
    truth_dir = work / "truth"
    (truth_dir / TRUTH_DIR).mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.concat_tables(truths), truth_dir / TRUTH_DIR / EVENTS_FILE)
    check = check_against_truth(spark, store.read(cfg.table_uri(EVENTS)), truth_dir)
    quarantined = store.read(cfg.table_uri(QUARANTINE)).count() if store.exists(cfg.table_uri(QUARANTINE)) else 0
    bad = sum(m.bad_records for m in manifests)
    truth = {"truth_events": check.truth_events, "rows": check.rows, "missing": check.missing,
             "unexpected": check.unexpected, "duplicate_rows": check.duplicate_rows,
             "exactly_once": check.exactly_once, "bad_records": bad, "quarantined": quarantined,
             "quarantine_ok": quarantined == bad}
    truth["ok"] = bool(check.exactly_once and truth["quarantine_ok"] and not out.failures)
    return {"runs": out.runs, "hours": out.hours, "failures": out.failures, "truth": truth,
            "wall_s": round(wall_s, 1), "peak_rss_mb": _mb(pids, "VmHWM:"), "first_hour": first.isoformat(),
            "manifests": [{k: v for k, v in m.to_dict().items()
                           if k not in ("file_lines", "redelivered_files", "events_by_tenant",
                                        "bytes_by_tenant", "events_by_tenant_hour", "bursts")} for m in manifests]}


# --------------------------------------------------------------------------------------------- report
def _median(runs: list[dict[str, Any]], flow: str, key: str = "seconds") -> float | None:
    xs = [r[key] for r in runs if r["flow"] == flow and r["status"] == "completed" and key in r]
    return round(statistics.median(xs), 3) if xs else None


def _hour_runs(runs: list[dict[str, Any]], day: int, which: str) -> list[dict[str, Any]]:
    """Return the runs of the first or last simulated hour of ``day``."""
    mine = [r for r in runs if r["day"] == day]
    if not mine:
        return []
    times = [datetime.fromisoformat(r["sim_time"]) for r in mine]
    lo, hi = min(times), max(times)
    if which == "first":
        return [r for r, t in zip(mine, times, strict=True) if t < lo + timedelta(minutes=60)]
    return [r for r, t in zip(mine, times, strict=True) if t > hi - timedelta(minutes=60)]


def summarize(results: dict[str, Any], days: int) -> dict[str, Any]:
    """Return per-flow medians of the first and last hour (each day, and last day's last vs day 1's first)."""
    runs = results["runs"]
    out: dict[str, Any] = {}
    for flow in FLOWS:
        row: dict[str, Any] = {}
        first = _median(_hour_runs(runs, 1, "first"), flow)
        for d in range(1, days + 1):
            f, last = _median(_hour_runs(runs, d, "first"), flow), _median(_hour_runs(runs, d, "last"), flow)
            fc, lc = (_median(_hour_runs(runs, d, "first"), flow, "cpu_s"),
                      _median(_hour_runs(runs, d, "last"), flow, "cpu_s"))
            done = [r["seconds"] for r in runs if r["flow"] == flow and r["day"] == d and r["status"] == "completed"]
            row[f"day{d}"] = {"first_hour_median_s": f, "last_hour_median_s": last,
                              # the hourly flows run once an hour: their first and last three runs too
                              "first3_median_s": round(statistics.median(done[:3]), 3) if done else None,
                              "last3_median_s": round(statistics.median(done[-3:]), 3) if done else None,
                              "ratio": round(last / f, 2) if f and last else None,
                              "first_hour_cpu_median_s": fc, "last_hour_cpu_median_s": lc,
                              "cpu_ratio": round(lc / fc, 2) if fc and lc else None,
                              "runs": sum(1 for r in runs if r["flow"] == flow and r["day"] == d),
                              "total_s": round(sum(r["seconds"] for r in runs if r["flow"] == flow and r["day"] == d),
                                               1)}
        if days > 1:
            last = _median(_hour_runs(runs, days, "last"), flow)
            row["last_day_last_hour_over_day1_first_hour"] = round(last / first, 2) if first and last else None
            fc, lc = (_median(_hour_runs(runs, 1, "first"), flow, "cpu_s"),
                      _median(_hour_runs(runs, days, "last"), flow, "cpu_s"))
            row["last_day_last_hour_over_day1_first_hour_cpu"] = round(lc / fc, 2) if fc and lc else None
        out[flow] = row
    return out


def render_md(results: dict[str, Any], args: argparse.Namespace, days: int) -> str:
    s, t = results["summary"], results["truth"]
    hours = results["hours"]
    simulated = f"{hours[-1]['hour']:g} of {args.days * args.hours:g}" if hours else "0"
    partial = "" if t is not None else (f"**Partial results: the run was still going (or cut off) after "
                                        f"{simulated} simulated hours; no ground-truth check yet.** ")
    lines = ["# A simulated day of production runs (`bench_day.py`)", "",
             partial + f"{args.events:,} unique events per simulated day of {args.hours:g} h, {args.tenants} tenants "
             f"(Zipf-skewed, bursts, retries, redelivered files, late events, bad records), {days} day(s); "
             f"ingest job (route → ingest) every 5 simulated minutes, maintenance job (close_buckets → compact → "
             f"autoshard → balance → compact_books) hourly at minute 10; one Spark session, flows called in-process; "
             + (f"landing files quiet for {args.keep_landing_hours:g} h moved out of the zone after each maintenance "
                f"job (lifecycle rule). " if args.keep_landing_hours > 0 else "the landing zone keeps every file. ")
             + f"Machine: {results['machine']}. Wall time {results['wall_s']:,.0f} s; peak RSS (driver + JVM) "
             f"{results['peak_rss_mb']:,.0f} MB.", "",
             "## Latency per run: first vs last simulated hour (median seconds)", "",
             "Wall seconds per run, and CPU seconds per run (driver + Spark JVM + its Python workers), which other "
             "processes sharing the cores do not inflate.", ""]
    head = ["flow"]
    for d in range(1, days + 1):
        head += [f"day {d} first h", f"day {d} last h", f"day {d} ratio", f"day {d} CPU s first → last h (ratio)"]
    if days > 1:
        head += [f"day {days} last h / day 1 first h", "same, CPU"]
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for flow in FLOWS:
        cells = [flow]
        for d in range(1, days + 1):
            r = s[flow][f"day{d}"]
            cells += [str(r["first_hour_median_s"]), str(r["last_hour_median_s"]),
                      f"**{r['ratio']}**" if r["ratio"] is not None else "-",
                      f"{r.get('first_hour_cpu_median_s')} → {r.get('last_hour_cpu_median_s')} "
                      f"(**{r.get('cpu_ratio')}**)"]
        if days > 1:
            cells += [f"**{s[flow]['last_day_last_hour_over_day1_first_hour']}**",
                      f"**{s[flow].get('last_day_last_hour_over_day1_first_hour_cpu')}**"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Goal: every ratio ≤ 1.3. The maintenance flows run once an hour; the median of their first and "
              "last three runs per day:", ""]
    for flow in MAINTENANCE_FLOWS:
        lines.append(f"- {flow}: " + "; ".join(
            f"day {d} {s[flow][f'day{d}']['first3_median_s']} s → {s[flow][f'day{d}']['last3_median_s']} s"
            for d in range(1, days + 1)))
    lines += ["", "## Tables over time (live files / log commits)", ""]
    picks = sorted({0, len(hours) // 4, len(hours) // 2, 3 * len(hours) // 4, len(hours) - 1}) if hours else []
    head = ["table", *[f"{hours[i]['hour']:.0f} h" for i in picks]]
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for table in TABLES:
        cells = [table]
        for i in picks:
            x = hours[i]["tables"].get(table)
            cells.append(f"{x['files']:,} / {x['commits']:,}" if x else "-")
        lines.append("| " + " | ".join(cells) + " |")
    if t is None:
        return "\n".join(lines) + "\n"
    lines += ["", "## Ground truth at the end", "",
              "| check | expected | found | ok |", "| --- | --- | --- | --- |",
              f"| events exactly once | {t['truth_events']:,} | {t['rows']:,} rows, {t['missing']} missing, "
              f"{t['unexpected']} unexpected, {t['duplicate_rows']} twice | {t['exactly_once']} |",
              f"| quarantine = bad records | {t['bad_records']:,} | {t['quarantined']:,} | {t['quarantine_ok']} |",
              f"| flow runs failed | 0 | {len(results['failures'])} | {not results['failures']} |", ""]
    for f in results["failures"][:20]:
        lines.append(f"- {f}")
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = datetime.fromisoformat(results["first_hour"])
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(12, 11), sharex=True)
    for flow in FLOWS:
        rows = [r for r in results["runs"] if r["flow"] == flow and r["status"] == "completed"]
        x = [(datetime.fromisoformat(r["sim_time"]) - first).total_seconds() / 3600 for r in rows]
        ax1.plot(x, [r["seconds"] for r in rows], ".-" if flow in MAINTENANCE_FLOWS else ".", label=flow,
                 markersize=3, linewidth=0.8)
    ax1.set_ylabel("seconds per run")
    ax1.set_title("flow latency per run over the simulated day(s)")
    ax1.legend(ncol=3, fontsize=8)
    hx = [h["hour"] for h in results["hours"]]
    for table in TABLES:
        ys = [h["tables"].get(table, {}).get("files", 0) for h in results["hours"]]
        if any(ys):
            ax2.plot(hx, ys, ".-", label=table, linewidth=1)
            ax3.plot(hx, [h["tables"].get(table, {}).get("commits", 0) for h in results["hours"]], ".-", label=table,
                     linewidth=1)
    ax2.set_ylabel("live files")
    ax2.set_yscale("symlog")
    ax2.legend(ncol=4, fontsize=7)
    ax3.set_ylabel("log commits")
    ax3.set_yscale("symlog")
    ax3.set_xlabel("simulated hours")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(spark: SparkSession, args: argparse.Namespace, work: Path, say: Callable[[str], None] = print
        ) -> dict[str, Any]:
    """Return the results of the simulation ``args`` describe, written to ``args.out`` as ``args.name``.*."""
    cfg = load_config(overrides={"lakehouse": str(work / "lakehouse"), "landing": str(work / "landing"),
                                 "routing": {"total_shards": args.shards}}, env={})
    jvm_pid = int(spark.sparkContext._jvm.ProcessHandle.current().pid())  # type: ignore[union-attr]
    pids = [os.getpid(), jvm_pid]
    results = simulate(spark, cfg, work, events=args.events, tenants=args.tenants, days=args.days, hours=args.hours,
                       seed=args.seed, pids=pids, keep_landing_hours=args.keep_landing_hours, say=say,
                       hourly=lambda partial: write(partial, args))
    write(results, args)
    return results


def write(results: dict[str, Any], args: argparse.Namespace) -> None:
    """Write ``results`` (final, or partial: no ground truth yet) as ``<out>/<name>.json``, ``.md`` and ``.png``."""
    results["machine"] = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    results["args"] = {k: v for k, v in vars(args).items() if k != "out"}
    days = max((r["day"] for r in results["runs"]), default=1)
    results["summary"] = summarize(results, days)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / f"{args.name}.md").write_text(render_md(results, args, days))
    plot(results, out / f"{args.name}.png")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=2_000_000, help="unique events per simulated day (its --hours)")
    p.add_argument("--tenants", type=int, default=500)
    p.add_argument("--days", type=int, default=1, help="simulated days on the same lakehouse")
    p.add_argument("--hours", type=float, default=24.0, help="simulated hours per day (a short slice: e.g. 2)")
    p.add_argument("--shards", type=int, default=16, help="shards on the routing ring")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", default=str(RESULTS), help="directory of the results (default bench/results)")
    p.add_argument("--name", default=None,
                   help="results go to <out>/<name>.json, .md and .png (default: day, or day-<N>days for --days N)")
    p.add_argument("--driver-memory", default="4g")
    p.add_argument("--keep-landing-hours", type=float, default=0.0,
                   help="move landing files quiet for longer than this out of the zone after each maintenance job "
                        "(a landing lifecycle rule, docs/routing.md); 0 keeps them all")
    p.add_argument("--keep", action="store_true", help="keep the work directory (lakehouse, landing zone)")
    return p


def main() -> int:
    args = parser().parse_args()
    if args.name is None:
        args.name = "day" if args.days == 1 else f"day-{args.days}days"
    if args.hours * 12 < 1 or args.hours > 24:
        parser().error("--hours must be between 1/12 (one ingest run) and 24")
    work = Path(tempfile.mkdtemp(prefix="lakeshard-bench-day-"))
    print(f"work directory {work}", flush=True)
    try:
        spark = get_spark(load_config(overrides={"spark": {"driver_memory": args.driver_memory}}, env={}))
        results = run(spark, args, work, say=lambda line: print(line, flush=True))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print((Path(args.out) / f"{args.name}.md").read_text())
    return 0 if results["truth"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
