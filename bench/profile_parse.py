"""Where the landing parse's CPU goes, by phase, on a generated zone (no Spark, no Delta).

Parses every file of a landing zone with :func:`lakeshard.landing.parse_landing_arrow` (the driver path of
``lakeshard ingest``) with each phase wrapped in a timer that counts exclusive CPU time (a phase's own time minus
the phases nested in it) on the thread it runs on: the files are parsed on a thread per core, and the process's CPU
clock would charge one thread's phase with what the others did meanwhile. It then hashes the event ids as routing
does, and prints the CPU seconds per phase, the bytes Arrow's JSON reader was handed (failed blocks re-read
included) and the parse's MB/s. The timers patch functions of this process only; nothing in the library changes.

    .venv/bin/python -m bench.profile_parse --landing /tmp/z200k [--json out.json] [--no-phases]
"""

from __future__ import annotations

import argparse
import functools
import json
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.json as pj

import lakeshard.landing.arrow_json as vector
import lakeshard.landing.arrow_read as driver
import lakeshard.landing.batches as batches
from lakeshard.config import LandingConfig
from lakeshard.landing import RecordParser, list_landing_files
from lakeshard.routing import event_hashes

_open = threading.local()  # .stack, per thread: per open phase [started, CPU spent in nested phases]
_lock = threading.Lock()
_spent: dict[str, float] = defaultdict(float)  # phase -> exclusive CPU seconds, every thread's
_calls: dict[str, int] = defaultdict(int)
_arrow_bytes = [0]


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        stack = _open.__dict__.setdefault("stack", [])
        stack.append([time.thread_time(), 0.0])
        try:
            return fn(*args, **kwargs)
        finally:
            started, nested = stack.pop()
            spent = time.thread_time() - started
            with _lock:
                _spent[name] += spent - nested
                _calls[name] += 1
            if stack:
                stack[-1][1] += spent
    return wrapper


def _read_json(source: Any, *args: Any, **kwargs: Any) -> Any:
    _arrow_bytes[0] += source.size()
    return _plain_read_json(source, *args, **kwargs)


_plain_read_json = pj.read_json


def _instrument() -> None:
    pj.read_json = _timed("arrow read_json", _read_json)
    for name, label in (("match_substring_regex", "regex passes"), ("extract_regex", "regex passes")):
        setattr(pc, name, _timed(label, getattr(pc, name)))
    phases: tuple[tuple[Any, str, str], ...] = (
        (batches, "_decode", "file decode"),
        (batches, "split_lines", "line split"),
        (vector, "_utf8_lines", "utf-8 check"),
        (vector.BlockParser, "_arrow_parts", "block take / re-read bookkeeping"),
        (vector.BlockParser, "_accept", "column checks"),
        (vector, "_rfc3339_us", "timestamp normalisation"),
        (vector, "_attributes", "attributes folding"),
        (vector, "_runs", "block assembly (concat, take)"),
        (vector.BlockParser, "parse", "block assembly (concat, take)"),
        (RecordParser, "check", "exact per-record rules"),
        (batches._Sink, "batches", "batch building (exact lines)"),
        (batches, "_accepted_batches", "batch building (accepted)"),
        (batches, "_parse_file", "file loop"),
        (driver, "parse_landing_arrow", "file read + table split"),
    )
    for owner, name, label in phases:
        setattr(owner, name, _timed(label, getattr(owner, name)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--landing", required=True)
    parser.add_argument("--json", default=None, help="write the figures to this file")
    parser.add_argument("--no-phases", action="store_true", help="no timers: the parse's own CPU only")
    args = parser.parse_args()
    if not args.no_phases:
        _instrument()
    files = list_landing_files(args.landing)
    size = sum(f.size_bytes for f in files)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    events, quarantine = driver.parse_landing_arrow(files, limits=LandingConfig(), now_ms=int(time.time() * 1000))
    cpu_parse = time.process_time() - cpu0
    hashed = _timed("event id hashing", event_hashes)(events.column("event_id"), 1)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    doc = {"landing_mb": round(size / 1e6, 1), "events": events.num_rows, "quarantined": quarantine.num_rows,
           "cpu_s": round(cpu, 2), "parse_cpu_s": round(cpu_parse, 2), "wall_s": round(wall, 2),
           "parse_mb_per_cpu_s": round(size / 1e6 / cpu_parse, 1),
           "arrow_bytes_per_zone_byte": round(_arrow_bytes[0] / size, 2) if _arrow_bytes[0] else None,
           "phases": {k: round(v, 3) for k, v in sorted(_spent.items(), key=lambda kv: -kv[1])}}
    del hashed
    print(json.dumps(doc, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
