"""Per-flow cost of the demo from 100k to 1M events: does any flow grow faster than linearly?

Each size runs ``lakeshard demo``'s whole path (:func:`lakeshard.app.demo.run_demo`: generate → route → ingest →
close_buckets → compact → autoshard → balance → compact_books → check → needle queries → plots) in a fresh
process on a fresh work directory, so no size inherits another's JVM warm-up, caches or lakehouse. Inside the
process, the demo's progress lines are the hook: a flow starts when the runner says ``<flow>: running ...`` and a
demo step when the demo says ``[n/5] ...``; CPU seconds (user + system of the driver, the Spark JVM and the
JVM's Python workers, read with psutil) are taken at each such line, so each flow's CPU is the difference to the
next one. Wall seconds per flow are the runner's own (``FlowRun.seconds``), per demo step the demo's.

Reported per flow and size: wall and CPU seconds, CPU microseconds per event, and the 1M / 100k ratio divided by
10 (the event ratio): **≤ 1.0 is at most linear**. Also peak resident memory (driver + JVM high-water marks) and
whether every demo check passed. Results go to ``bench/results/<name>.json``, ``.md`` and ``.png`` (per-flow
seconds against events, log-log, with a linear reference through each flow's smallest size); a partial result is
written after each size.

    .venv/bin/python -m bench.bench_scale                                  # 100k, 300k, 1M events; 500 tenants
    .venv/bin/python -m bench.bench_scale --sizes 20000 60000 --name scale-small
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from bench.bench_day import cpu_seconds as day_cpu_seconds

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]  # where `python -m bench.<name>` finds the package
FLOWS = ("route", "ingest", "close_buckets", "compact", "autoshard", "balance", "compact_books")
# The demo's own steps around the pipeline (the pipeline step itself is the flows above).
STEPS = {"generate landing zone": "generate", "check against ground truth and the event log": "check",
         "needle queries: regex pruning vs min/max": "needles", "plots": "plots"}
ROWS = ("spark_start", "generate", *FLOWS, "check", "needles", "plots", "total")
_FLOW_LINE = re.compile(r"^\s*(\w+): (running|up to date)")
_STEP_LINE = re.compile(r"^\[\d+/\d+\] (.*) \.\.\.$")


# ------------------------------------------------------------------------------------------- one size
def cpu_seconds() -> float:
    """Return the CPU seconds (user + system) this process, the Spark JVM and its Python workers used so far."""
    return day_cpu_seconds([os.getpid(), os.getpid()])  # this process, then every process below it


def peak_rss_mb() -> float:
    """Return the summed resident-memory high-water marks (VmHWM) of this process and its children, in MB."""
    total_kb = 0
    for proc in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            lines = Path(f"/proc/{proc.pid}/status").read_text().splitlines()
        except OSError:
            continue
        total_kb += next((int(line.split()[1]) for line in lines if line.startswith("VmHWM:")), 0)
    return round(total_kb / 1024, 1)


class Meter:
    """Cuts the demo's run into segments at its progress lines and keeps each segment's CPU seconds."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.cpu: dict[str, float] = {}
        self.current: str | None = None
        self.mark = cpu_seconds()
        self.started = time.perf_counter()

    def cut(self, name: str | None) -> None:
        """Close the running segment (its CPU since the last cut) and open ``name`` (None: open nothing)."""
        now = cpu_seconds()
        if self.current is not None:
            self.cpu[self.current] = self.cpu.get(self.current, 0.0) + now - self.mark
        self.current, self.mark = name, now

    def line(self, text: str) -> None:
        """Take one demo progress line: cut at a flow's or step's start, then pass it on with the elapsed time."""
        bare = text.strip()
        if (m := _FLOW_LINE.match(bare)) and m.group(1) in FLOWS:
            self.cut(m.group(1))
        elif m := _STEP_LINE.match(bare):
            self.cut(STEPS.get(m.group(1)))  # the pipeline step: its flows cut for themselves
        self.say(f"{time.perf_counter() - self.started:7.1f}s  {text}")


def run_one(events: int, tenants: int, hours: float, seed: int, work: Path, driver_memory: str) -> dict[str, Any]:
    """Return one size's measurements: the demo on a fresh lakehouse in ``work``, in this process."""
    from lakeshard.app.demo import run_demo
    from lakeshard.config import load_config
    from lakeshard.lake import open_store
    from lakeshard.runtime import get_spark
    from lakeshard.synth import SynthSpec

    cfg = load_config(overrides={"lakehouse": str(work / "lakehouse"), "landing": str(work / "landing"),
                                 "spark": {"driver_memory": driver_memory}}, env={})
    meter = Meter(lambda line: print(line, flush=True))
    started = time.perf_counter()
    meter.cut("spark_start")
    spark = get_spark(cfg)
    spark_wall = time.perf_counter() - started
    report = run_demo(spark, open_store(spark, cfg), cfg, SynthSpec(events=events, tenants=tenants, seed=seed,
                                                                    hours=hours),
                      out=work / "report", say=meter.line, progress=False)
    meter.cut(None)
    wall = {"spark_start": spark_wall, "total": time.perf_counter() - started}
    wall.update({STEPS[k]: v for k, v in report.seconds.items() if k in STEPS})
    wall.update({f.flow: f.seconds for f in report.run.flows})
    cpu = {**meter.cpu, "total": sum(meter.cpu.values())}
    return {
        "events": events, "tenants": tenants, "hours": hours, "seed": seed,
        "records": report.manifest.records, "landing_files": report.manifest.files,
        "ok": report.ok, "statuses": {f.flow: f.status for f in report.run.flows},
        "files_events_before_after": [report.files_before_compaction, report.files_after_compaction],
        "buckets_closed": report.buckets_closed,
        "wall_s": {k: round(v, 3) for k, v in wall.items()}, "cpu_s": {k: round(v, 3) for k, v in cpu.items()},
        "peak_rss_mb": peak_rss_mb(),
    }


# ------------------------------------------------------------------------------------------- summary
def summarize(sizes: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Return per row (flow or step): cost per event at each size and the largest / smallest size's ratio over
    the event ratio (≤ 1.0: at most linear), for wall and CPU, with the log-log slope between the two."""
    if len(sizes) < 2:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for row in ROWS:
        entry: dict[str, Any] = {}
        for key in ("wall_s", "cpu_s"):
            # Smallest to largest is the ratio; the two largest sizes show the marginal growth that a
            # fixed cost (JVM warm-up, per-table metadata) would hide at the small end.
            for suffix, (small, big) in (("", (sizes[0], sizes[-1])), ("_top", (sizes[-2], sizes[-1]))):
                a, b, scale = small[key].get(row), big[key].get(row), big["events"] / small["events"]
                if a and b:
                    entry[f"{key}_ratio_over_linear{suffix}"] = round(b / a / scale, 3)
                    entry[f"{key}_slope{suffix}"] = round(math.log(b / a) / math.log(scale), 3)
            entry[f"{key}_us_per_event"] = [round(s[key].get(row, 0) / s["events"] * 1e6, 2) for s in sizes]
        if entry:
            out[row] = entry
    return out


def render_md(results: dict[str, Any]) -> str:
    """Return the results as the markdown report."""
    sizes, summary = results["sizes"], results["summary"]
    label = [f"{s['events'] // 1000:,}k" for s in sizes]
    ratio = f"{label[-1]} / {label[0]}" if len(sizes) > 1 else "-"
    scale = sizes[-1]["events"] / sizes[0]["events"] if sizes else 1
    lines = [
        f"# Per-flow cost of the demo from {label[0] if label else '-'} to {label[-1] if label else '-'} events",
        "",
        f"`bench/bench_scale.py`: `lakeshard demo`'s whole path (`run_demo`) at {', '.join(label)} events, "
        f"{results['args']['tenants']} tenants, {results['args']['hours']} h of arrival, each size in a fresh process "
        f"on a fresh lakehouse. {results['machine']}; {results['date']}. Shared, loaded machine: the CPU columns "
        "(driver + Spark JVM + its Python workers) are the signal, wall seconds are inflated by other processes.",
        "",
        f"**ratio** = ({ratio} seconds) / {scale:g} (the event ratio): ≤ 1.0 means the flow grew at most linearly. "
        "**slope** = the log-log slope between the two sizes (1.0 = linear). **top ratio** = the same ratio between "
        "the two largest sizes, where fixed costs weigh least. Peak RSS sums the high-water marks of the driver, "
        "the JVM and the Python workers alive at the end (forked workers share pages: an upper bound).",
        "",
        "| size | records | landing files | demo checks | wall s | CPU s | peak RSS MB "
        "| `events` files before → after |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for lab, s in zip(label, sizes, strict=True):
        fb, fa = s["files_events_before_after"]
        lines.append(f"| {lab} | {s['records']:,} | {s['landing_files']:,} | "
                     f"{'all passed' if s['ok'] else '**FAILED**'} | {s['wall_s']['total']:,.1f} | "
                     f"{s['cpu_s']['total']:,.1f} | {s['peak_rss_mb']:,.0f} | {fb:,} → {fa:,} |")
    lines += ["", "| flow / step | " + " | ".join(f"{lab} wall s" for lab in label) + " | "
              + " | ".join(f"{lab} CPU s" for lab in label)
              + " | CPU µs/event | wall ratio | **CPU ratio** | CPU slope | CPU top ratio |",
              "| --- |" + " ---: |" * (2 * len(sizes) + 5)]
    for row in ROWS:
        e = summary.get(row, {})
        walls = [f"{s['wall_s'][row]:.2f}" if row in s["wall_s"] else "-" for s in sizes]
        cpus = [f"{s['cpu_s'][row]:.2f}" if row in s["cpu_s"] else "-" for s in sizes]
        per = " → ".join(f"{v:g}" for v in e.get("cpu_s_us_per_event", [])) or "-"
        lines.append(f"| {row} | " + " | ".join(walls + cpus) + f" | {per} | {e.get('wall_s_ratio_over_linear', '-')}"
                     f" | **{e.get('cpu_s_ratio_over_linear', '-')}** | {e.get('cpu_s_slope', '-')}"
                     f" | {e.get('cpu_s_ratio_over_linear_top', '-')} |")
    for what, suffix in (("smallest to largest", ""), ("between the two largest sizes", "_top")):
        over = [r for r in ROWS if summary.get(r, {}).get(f"cpu_s_ratio_over_linear{suffix}", 0) > 1.0]
        lines.append(f"\nAbove linear in CPU, {what}: " + (", ".join(over) if over else "none") + ".")
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: Path) -> None:
    """Write per-flow wall and CPU seconds against events (log-log) with a linear reference per flow."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = results["sizes"]
    xs = [s["events"] for s in sizes]
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5), sharey=True)
    for ax, key, title in zip(axes, ("wall_s", "cpu_s"), ("wall seconds", "CPU seconds (driver + JVM)"),
                              strict=True):
        for i, row in enumerate(r for r in ROWS if r != "total"):
            ys = [s[key].get(row) for s in sizes]
            if not all(ys):
                continue
            color = plt.get_cmap("tab20")(i % 20)
            ax.plot(xs, ys, "o-", color=color, label=row, linewidth=1.2, markersize=4)
            ax.plot([xs[0], xs[-1]], [ys[0], ys[0] * xs[-1] / xs[0]], ":", color=color, linewidth=0.8)
        ax.set(xscale="log", yscale="log", xlabel="events", title=f"{title} per flow (dotted: linear from the "
                                                                      "smallest size)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("seconds")
    axes[1].legend(fontsize=7, ncol=2, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(results: dict[str, Any], out: Path, name: str) -> None:
    """Write ``results`` as ``<out>/<name>.json``, ``.md`` and (two sizes or more) ``.png``."""
    results["summary"] = summarize(results["sizes"])
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / f"{name}.md").write_text(render_md(results))
    if len(results["sizes"]) > 1:
        plot(results, out / f"{name}.png")


# ------------------------------------------------------------------------------------------- driver
def run_size(args: argparse.Namespace, events: int) -> dict[str, Any]:
    """Return one size's measurements from a fresh process on a fresh work directory (removed afterwards)."""
    work = Path(tempfile.mkdtemp(prefix=f"lakeshard-bench-scale-{events}-"))
    result = work / "result.json"
    cmd = [sys.executable, "-m", "bench.bench_scale", "--one", str(events), "--tenants", str(args.tenants),
           "--hours", str(args.hours),
           "--seed", str(args.seed), "--driver-memory", args.driver_memory, "--work", str(work),
           "--result", str(result)]
    tag = f"[{events // 1000}k]"
    try:
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.strip():
                    print(f"{tag} {line.rstrip()}", flush=True)
        if not result.exists():
            raise SystemExit(f"{tag} the run ended with exit code {proc.returncode} and no result")
        return dict(json.loads(result.read_text()))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000, 300_000, 1_000_000], help="events per run")
    p.add_argument("--tenants", type=int, default=500)
    p.add_argument("--hours", type=float, default=2.0, help="hours of arrival (the demo's default)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--driver-memory", default="4g")
    p.add_argument("--out", default=str(RESULTS), help="directory of the results (default bench/results)")
    p.add_argument("--name", default="scale", help="results go to <out>/<name>.json, .md and .png")
    p.add_argument("--keep", action="store_true", help="keep each size's work directory")
    p.add_argument("--render", action="store_true", help="only rewrite .md and .png from an existing <name>.json")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the child: run one size in this process
    p.add_argument("--work", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    return p


def main() -> int:
    args = parser().parse_args()
    if args.render:
        path = Path(args.out) / f"{args.name}.json"
        write(json.loads(path.read_text()), Path(args.out), args.name)
        print((Path(args.out) / f"{args.name}.md").read_text())
        return 0
    if args.one:
        measured = run_one(args.one, args.tenants, args.hours, args.seed, Path(args.work), args.driver_memory)
        Path(args.result).write_text(json.dumps(measured))
        return 0
    results: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC", "args": {k: v for k, v in vars(args).items()
                                                                     if k not in ("one", "work", "result")},
        "sizes": [],
    }
    for events in sorted(args.sizes):
        started = time.perf_counter()
        print(f"=== {events:,} events, {args.tenants} tenants: a fresh process ...", flush=True)
        results["sizes"].append(run_size(args, events))
        s = results["sizes"][-1]
        print(f"=== {events:,} events: {time.perf_counter() - started:,.0f} s, CPU {s['cpu_s']['total']:,.0f} s, "
              f"checks {'passed' if s['ok'] else 'FAILED'}", flush=True)
        write(results, Path(args.out), args.name)
    print((Path(args.out) / f"{args.name}.md").read_text())
    return 0 if all(s["ok"] for s in results["sizes"]) else 1


if __name__ == "__main__":
    sys.exit(main())
