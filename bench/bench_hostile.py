"""Peak memory of routing a landing zone that holds a gzip bomb (issue: hostile landing input).

Builds, chunk by chunk (never the whole expansion in memory), a ``.json.gz`` of newlines that expands to
``--expand-gib`` GiB (default 4) from a few megabytes, next to a small file of valid events. Then runs
``lakeshard route`` on that zone in a child process, once on the in-driver path (what a batch this small
takes) and once forced onto Spark (``routing.arrow_max_bytes = 0``: the bomb is decompressed in a Spark
Python worker), each against a baseline run on the same zone without the bomb. A run's peak RSS is the
summed resident set of the route process and all its descendants (the Spark JVM and its Python workers
included), sampled every 20 ms, with ``ru_maxrss`` of the reaped children (what ``/usr/bin/time -v``
reports) alongside; the growth is the bomb run's peak minus the baseline's. The bomb must come
back as one ``unreadable_file`` quarantine row while the valid events are routed.

Writes ``bench/results/hostile.json`` and ``bench/results/hostile.md``.

    .venv/bin/python -m bench.bench_hostile [--expand-gib 4]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
GIB = 1 << 30
MIB = 1 << 20
VALID_EVENTS = 500

# The child: route the zone while sampling, every 20 ms, the resident set of the route process and all its
# descendants (the Spark JVM and its Python workers are descendants, and are not reaped by the route process,
# so ru_maxrss alone would miss them). Prints the peak of the tree's total, the peak of one process, and
# ru_maxrss of the reaped children (what /usr/bin/time -v reports).
CHILD = r"""
import json, os, resource, subprocess, sys, time
lakehouse, landing, arrow_max_bytes = sys.argv[1], sys.argv[2], sys.argv[3]
env = dict(os.environ, LAKESHARD_ROUTING_ARROW_MAX_BYTES=arrow_max_bytes)
code = ("import sys; from lakeshard.app.cli import main; "
        "sys.exit(main(['route', '--lakehouse', sys.argv[1], '--landing', sys.argv[2]]))")

def tree_rss_kib(root):
    parents = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                parents[int(pid)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            pass
    tree, frontier = {root}, [root]
    while frontier:
        kids = [p for p, pp in parents.items() if pp in frontier and p not in tree]
        tree.update(kids)
        frontier = kids
    sizes = []
    for pid in tree:
        try:
            with open(f"/proc/{pid}/status") as f:
                sizes += [int(line.split()[1]) for line in f if line.startswith("VmRSS:")]
        except OSError:
            pass
    return sum(sizes), max(sizes, default=0)

proc = subprocess.Popen([sys.executable, "-c", code, lakehouse, landing], env=env, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)
peak_total = peak_one = 0
while proc.poll() is None:
    total, one = tree_rss_kib(proc.pid)
    peak_total, peak_one = max(peak_total, total), max(peak_one, one)
    time.sleep(0.02)
out, err = proc.communicate()
print(json.dumps({"rc": proc.returncode, "tree_kib": peak_total, "one_kib": peak_one,
                  "maxrss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                  "stdout": out, "stderr": err[-2000:]}))
"""


def write_bomb(path: Path, expand_bytes: int, chunk: int = 64 * MIB) -> int:
    """Return the compressed size of a gzip file of ``expand_bytes`` newlines written by chunks."""
    block = b"\n" * chunk
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    with path.open("wb") as out:
        left = expand_bytes
        while left > 0:
            piece = block if left >= chunk else block[:left]
            out.write(packer.compress(piece))
            left -= len(piece)
        out.write(packer.flush())
    return path.stat().st_size


def write_valid(path: Path) -> None:
    now_ms = int(time.time() * 1000) - 60_000
    lines = (json.dumps({"tenant_id": f"t{i % 5}", "event_id": f"e{i}", "ts": now_ms}) for i in range(VALID_EVENTS))
    path.write_text("\n".join(lines) + "\n")


def route(lakehouse: Path, landing: Path, arrow_max_bytes: int) -> dict[str, Any]:
    """Return the peak RSS (MiB), wall time and output of one ``lakeshard route`` in a fresh process tree."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, str(lakehouse), str(landing), str(arrow_max_bytes)],
                          capture_output=True, text=True, check=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    if got["rc"] != 0:
        raise RuntimeError(f"lakeshard route failed ({got['rc']}): {got['stderr']}")
    mib = {k: round(got[f"{k}_kib"] / 1024, 1) for k in ("tree", "one", "maxrss")}
    return {"peak_mib": mib["tree"], "peak_one_process_mib": mib["one"], "maxrss_mib": mib["maxrss"],
            "seconds": round(time.perf_counter() - started, 1), "output": got["stdout"].strip()}


def quarantine_rows(lakehouse: Path) -> list[dict[str, Any]]:
    from lakeshard.config import load_config
    from lakeshard.lake import open_lazy_store
    from lakeshard.tables import QUARANTINE, ROUTED

    cfg = load_config(overrides={"lakehouse": str(lakehouse)}, env={})
    store = open_lazy_store(cfg)
    rows = store.read_table_arrow(cfg.table_uri(QUARANTINE), ["source_file", "line_number", "category", "reason"])
    routed = store.read_table_arrow(cfg.table_uri(ROUTED), ["event_id"]).num_rows
    return [{**r, "source_file": Path(r["source_file"]).name, "routed_events": routed} for r in rows.to_pylist()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--expand-gib", type=float, default=4.0, help="what the bomb expands to (default 4 GiB)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    from lakeshard.config import LandingConfig

    bound = LandingConfig().max_file_bytes
    tmp = Path(tempfile.mkdtemp(prefix="bench-hostile-"))
    try:
        plain, bombed = tmp / "landing-plain", tmp / "landing-bomb"
        plain.mkdir()
        bombed.mkdir()
        write_valid(plain / "a-valid.jsonl")
        write_valid(bombed / "a-valid.jsonl")
        started = time.perf_counter()
        compressed = write_bomb(bombed / "b-bomb.json.gz", int(args.expand_gib * GIB))
        build_s = time.perf_counter() - started

        cases: dict[str, Any] = {}
        for path_name, arrow_max_bytes in [("driver", 32 * MIB), ("spark", 0)]:
            base = route(tmp / f"lh-{path_name}-plain", plain, arrow_max_bytes)
            bomb = route(tmp / f"lh-{path_name}-bomb", bombed, arrow_max_bytes)
            cases[path_name] = {"baseline": base, "bomb": bomb,
                                "growth_mib": round(bomb["peak_mib"] - base["peak_mib"], 1),
                                "growth_maxrss_mib": round(bomb["maxrss_mib"] - base["maxrss_mib"], 1),
                                "quarantine": quarantine_rows(tmp / f"lh-{path_name}-bomb")}
            print(path_name, json.dumps(cases[path_name], indent=1), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    result = {"when": datetime.now(UTC).isoformat(timespec="seconds"), "machine": platform.platform(),
              "cpus": os.cpu_count(), "python": platform.python_version(), "expand_bytes": int(args.expand_gib * GIB),
              "compressed_bytes": compressed, "bomb_build_seconds": round(build_s, 1), "max_file_bytes": bound,
              "valid_events": VALID_EVENTS, "cases": cases}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "hostile.json").write_text(json.dumps(result, indent=2) + "\n")
    rows = []
    for name, case in cases.items():
        q = case["quarantine"]
        verdict = "; ".join(f"{r['source_file']} line {r['line_number']}: {r['category']}" for r in q)
        rows.append(f"| {name} | {case['baseline']['peak_mib']:,.0f} | {case['bomb']['peak_mib']:,.0f} | "
                    f"**{case['growth_mib']:,.0f}** | {case['growth_maxrss_mib']:,.0f} | {case['bomb']['seconds']} | "
                    f"{q[0]['routed_events'] if q else 0} | {verdict} |")
    md = [
        "# Routing a landing zone holding a gzip bomb",
        "",
        f"A `.json.gz` of {compressed / MIB:.1f} MiB expanding to {args.expand_gib:g} GiB of newlines, next to a "
        f"file of {VALID_EVENTS} valid events; `lakeshard route` in a fresh process tree each run, "
        f"`landing_format.max_file_bytes` = {bound // MIB} MiB (the default). Peak RSS is the largest resident set "
        "of the process tree: the peak of the summed RSS of the route process and all its descendants (Spark's JVM "
        "and Python workers included), sampled every 20 ms; `ru_maxrss` of the reaped children (what "
        "`/usr/bin/time -v` reports) alongside. Growth = bomb run - baseline run on the same zone without the "
        "bomb. Goal: growth < 1 GiB (before bounded decompression the driver path reached 8.4 GiB "
        "on a 4 GiB bomb).",
        "",
        "| path | baseline peak MiB | bomb peak MiB | growth MiB | growth, ru_maxrss MiB | bomb run s "
        "| events routed | quarantine |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        *rows,
        "",
        f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"{result['when']}. Bomb written by chunks in {build_s:.1f} s. On the Spark path `ru_maxrss` misses the JVM "
        "and its Python workers (the route process does not reap them): the sampled tree total is the figure there.",
        "",
    ]
    (RESULTS / "hostile.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
