"""Time lakeshard.synth: generate a landing zone of N events (default 1M) and report events/s.

Writes ``bench/results/synth.json`` (this run) and updates ``bench/results/synth.md`` (one row per
machine and event count, the latest run winning).

    .venv/bin/python -m bench.bench_synth [--events 1000000] [--seed 7] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lakeshard.synth import SynthSpec, generate_landing

RESULTS = Path(__file__).resolve().parent / "results"
HEADER = (
    "| machine | cpus | events | records | files | MB (uncompressed) | seconds | events/s | date |\n"
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n"
)


def run(events: int, seed: int, keep: Path | None) -> dict[str, Any]:
    """Return the measurements of one generation of ``events`` events."""
    target = keep or Path(tempfile.mkdtemp(prefix="lakeshard-bench-synth-"))
    try:
        started = time.perf_counter()
        truth = generate_landing(target, SynthSpec(events=events, seed=seed), overwrite=True)
        seconds = time.perf_counter() - started
    finally:
        if keep is None:
            shutil.rmtree(target, ignore_errors=True)
    return {
        "benchmark": "synth.generate_landing",
        "machine": platform.node() or "unknown",
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "events": events,
        "records": truth.records,
        "files": truth.files,
        "line_bytes": truth.line_bytes,
        "seconds": round(seconds, 3),
        "events_per_second": round(events / seconds),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def write_results(result: dict[str, Any]) -> None:
    """Write ``synth.json`` and update this machine's row for this event count in ``synth.md``."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "synth.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    row = (
        f"| {result['machine']} | {result['cpus']} | {result['events']:,} | {result['records']:,} | "
        f"{result['files']} | {result['line_bytes'] / 1e6:.0f} | {result['seconds']} | "
        f"{result['events_per_second']:,} | {result['date']} |\n"
    )
    key = f"| {result['machine']} | {result['cpus']} | {result['events']:,} |"
    md = RESULTS / "synth.md"
    rows = []
    if md.exists():
        rows = [line + "\n" for line in md.read_text(encoding="utf-8").splitlines() if line.startswith("| ")][2:]
    rows = [r for r in rows if not r.startswith(key)] + [row]
    md.write_text("# lakeshard.synth: landing-zone generation\n\n" + HEADER + "".join(rows), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", type=Path, default=None, help="write the landing zone here and keep it")
    args = parser.parse_args()
    result = run(args.events, args.seed, args.keep)
    write_results(result)
    print(
        f"{result['events']:,} events ({result['records']:,} records, {result['files']} files) "
        f"in {result['seconds']} s: {result['events_per_second']:,} events/s"
    )


if __name__ == "__main__":
    main()
