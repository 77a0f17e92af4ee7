"""Where ``lakeshard ingest``'s wall time goes, by thread: the fused batches' parse, route, dedupe and writes.

Runs ``lakeshard ingest`` in this process with a timer around each phase below (the functions are wrapped in this
process only; nothing in the library changes), then prints each phase's total seconds and calls per thread, and
the spans of the longer calls in time order: which thread is the critical path, and how much of the next batch's
parse (the router's look-ahead thread) hides behind the batch in hand.

    .venv/bin/python -m bench.profile_ingest --landing ZONE --lakehouse /tmp/lh [--spans 0.05]

The lakehouse is emptied first. cProfile (``python -m cProfile -m lakeshard.app.cli ingest ...``) gives the
functions inside each phase, for the main thread only.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import shutil
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

# (module, attribute path, also bound by name in these modules)
PHASES: list[tuple[str, str, tuple[str, ...]]] = [
    ("lakeshard.landing.arrow_read", "parse_landing_arrow", ("lakeshard.routing.router",)),
    ("lakeshard.routing.arrow_route", "route_arrow", ("lakeshard.routing.router",)),
    ("lakeshard.routing.router", "Router._look", ()),
    ("lakeshard.routing.router", "Router._commit", ()),
    ("lakeshard.landing.listing", "scan_landing", ("lakeshard.routing.router",)),
    ("lakeshard.routing.consumed", "ConsumedRanges.of", ()),
    ("lakeshard.routing.lifecycle", "plan_intake", ("lakeshard.routing.router",)),
    ("lakeshard.lake.embedded.adapter", "EmbeddedTableStore.append_arrow", ()),
    ("lakeshard.dedupe.writer", "ShardWriter.deliver", ()),
    ("lakeshard.dedupe.writer", "ShardWriter.derive", ()),
    ("lakeshard.dedupe.writer", "ShardWriter.compact_ids", ()),
    ("lakeshard.dedupe.engines", "ArrowStep.run", ()),
    ("lakeshard.dedupe.keyhash", "key_hashes", ()),
    ("lakeshard.dedupe.index", "IdIndex.check", ()),
    ("lakeshard.dedupe.index", "IdIndex.remember", ()),
    ("lakeshard.lake.protocol.partitions", "partition_order", ("lakeshard.lake",)),
    ("lakeshard.lake.protocol.partitions", "write_partitioned", ("lakeshard.lake",)),
    ("lakeshard.lake.embedded.write", "written_adds", ()),
    ("lakeshard.lake.embedded.write", "collect_adds", ()),
    ("lakeshard.lake.embedded.adapter", "EmbeddedTableStore.append", ()),
]
SPANS = ("parse_landing_arrow", "route_arrow", "ShardWriter.deliver", "write_partitioned")


def _wrap(spans: list[tuple[str, str, float, float]], t0: float, module: str, path: str,
          rebound: tuple[str, ...]) -> None:
    owner: Any = importlib.import_module(module)
    *parents, name = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    original: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(original)
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spans.append((threading.current_thread().name, path, start - t0, time.perf_counter() - t0))

    setattr(owner, name, timed)
    for other in rebound:  # modules that imported the function by name
        setattr(importlib.import_module(other), name, timed)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--landing", required=True)
    p.add_argument("--lakehouse", required=True)
    p.add_argument("--spans", type=float, default=0.05, help="print calls at least this long (seconds)")
    args = p.parse_args()
    shutil.rmtree(args.lakehouse, ignore_errors=True)
    from lakeshard.process import prepare_process_memory

    prepare_process_memory()  # as the command does, before the phases' modules load pyarrow
    t0 = time.perf_counter()
    spans: list[tuple[str, str, float, float]] = []
    for module, path, rebound in PHASES:
        _wrap(spans, t0, module, path, rebound)
    from lakeshard.app.cli import main as cli

    try:
        cli(["ingest", "--lakehouse", args.lakehouse, "--landing", args.landing])
    except SystemExit as exc:
        if exc.code:
            raise
    total = time.perf_counter() - t0
    seconds: dict[tuple[str, str], float] = defaultdict(float)
    calls: dict[tuple[str, str], int] = defaultdict(int)
    for thread, path, start, end in spans:
        seconds[(thread, path)] += end - start
        calls[(thread, path)] += 1
    print(f"whole run {total:.2f} s (imports included)", file=sys.stderr)
    print(f"{'thread':16} {'phase':28} {'calls':>5} {'s':>7}", file=sys.stderr)
    for (thread, path), s in sorted(seconds.items(), key=lambda item: -item[1]):
        print(f"{thread[:16]:16} {path:28} {calls[(thread, path)]:5d} {s:7.2f}", file=sys.stderr)
    print("spans:", file=sys.stderr)
    for thread, path, start, end in sorted(spans, key=lambda s: s[2]):
        if path in SPANS and end - start >= args.spans:
            print(f"  {thread[:16]:16} {path:22} {start:6.2f} -> {end:6.2f} ({end - start:.2f})", file=sys.stderr)


if __name__ == "__main__":
    main()
