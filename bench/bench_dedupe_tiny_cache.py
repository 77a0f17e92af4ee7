"""Cost of exactly once with an ID cache smaller than a step's intervals: a full replay of a ~20k-event zone.

A landing zone of ``--events`` events over ``--hours`` hours (retries, redelivered files, late events) is routed
and written by shard writers; then the whole zone is delivered again and routed, and a fresh writer (cold cache)
writes the replay, with ``dedupe.id_cache_bytes`` = 64 KiB and with the default (256 MiB). Timed: the first
write and the replay's write, per cache size. Checked: ``events`` holds each distinct input key exactly once.
Writes ``bench/results/dedupe-tiny-cache.json`` and ``.md``.

    .venv/bin/python -m bench.bench_dedupe_tiny_cache
    .venv/bin/python -m bench.bench_dedupe_tiny_cache --events 5000
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lakeshard.config import load_config
from lakeshard.dedupe import ShardWriter
from lakeshard.lake import open_store
from lakeshard.routing import Router
from lakeshard.runtime import get_spark
from lakeshard.synth import SynthSpec, generate_landing
from lakeshard.tables import EVENT_KEY, EVENTS

RESULTS = Path(__file__).parent / "results"
SHARDS = 4


def run_case(spark: Any, cache_bytes: int, events: int, hours: float, root: Path) -> dict[str, Any]:
    """Return the timings and counts of writing a zone and then its full replay with this cache bound."""
    landing, lakehouse = root / "landing", root / "lh"
    manifest = generate_landing(landing, SynthSpec(events=events, tenants=20, hours=hours, seed=17,
                                                   file_seconds=300, bad_rate=0.0))
    cfg = load_config(overrides={"lakehouse": str(lakehouse), "landing": str(landing),
                                 "routing": {"total_shards": SHARDS, "default_shard_count": 2},
                                 "dedupe": {"id_cache_bytes": cache_bytes}}, env={})
    store = open_store(spark, cfg)
    Router(spark, store, cfg).run()
    started = time.perf_counter()
    first = ShardWriter(spark, store, cfg, list(range(SHARDS))).run()
    first_s = time.perf_counter() - started
    replay = landing / "replay"
    replay.mkdir()
    for i, f in enumerate(sorted(p for p in landing.rglob("part-*") if "_truth" not in p.parts)):
        shutil.copy(f, replay / f"again-{i}{''.join(f.suffixes)}")
    Router(spark, store, cfg).run()
    writer = ShardWriter(spark, store, cfg, list(range(SHARDS)))
    started = time.perf_counter()
    again = writer.run()
    replay_s = time.perf_counter() - started
    table = store.read(cfg.table_uri(EVENTS))
    rows = table.count()
    distinct = table.dropDuplicates(list(EVENT_KEY)).count()
    stats = writer.cache.stats()
    return {"cache_bytes": cache_bytes, "first_write_s": round(first_s, 2), "replay_write_s": round(replay_s, 2),
            "steps": len(first) + len(again), "replay_rows_in": sum(r.rows_in for r in again),
            "replay_written": sum(r.written for r in again), "ids_paged_in": sum(r.ids_paged_in for r in again),
            "evictions": stats.evictions, "events_rows": rows, "distinct_keys": distinct,
            "expected_unique": manifest.unique_events}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--hours", type=float, default=6.0)
    parser.add_argument("--output", default="dedupe-tiny-cache")
    args = parser.parse_args()
    base = load_config(overrides={"spark": {"master": "local[2]", "shuffle_partitions": 2,
                                            "adapter": "embedded"}}, env={})
    spark = get_spark(base)
    cases = []
    for cache_bytes in (64 * 1024, base.dedupe.id_cache_bytes):
        with tempfile.TemporaryDirectory() as root:
            cases.append(run_case(spark, cache_bytes, args.events, args.hours, Path(root)))
    out = {"when": datetime.now(UTC).isoformat(timespec="seconds"), "machine": platform.platform(),
           "events": args.events, "hours": args.hours, "cases": cases}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.output}.json").write_text(json.dumps(out, indent=2) + "\n")
    head = ("| id_cache_bytes | first write s | replay write s | replay rows in | written on replay | IDs paged in "
            "| evictions | events rows | distinct keys |\n" + "| ---: " * 9 + "|")
    lines = [f"| {c['cache_bytes']:,} | {c['first_write_s']} | {c['replay_write_s']} | {c['replay_rows_in']:,} "
             f"| {c['replay_written']:,} | {c['ids_paged_in']:,} | {c['evictions']:,} | {c['events_rows']:,} "
             f"| {c['distinct_keys']:,} |" for c in cases]
    (RESULTS / f"{args.output}.md").write_text(
        f"# Exactly once with a tiny ID cache ({out['when']})\n\n{args.events:,} events over {args.hours} h, "
        f"{SHARDS} shards, written, then the whole zone replayed to a cold writer.\n\n{head}\n" + "\n".join(lines)
        + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
