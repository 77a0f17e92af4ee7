"""Landing JSON to exactly-once events: ``lakeshard ingest`` against the peers a Spark or Delta user would pick.

Generates a landing zone with ``lakeshard generate`` (default 1M events, ~570 MB, producer retries, redelivered
files, late and malformed records of every quarantine category), then runs every case on the same zone, each in
a process of its own so that its peak memory is its own, with the memory settings ``lakeshard`` gives its own
process (``lakeshard.process.memory``: no transparent huge pages, Arrow's freed pages kept):

* ``cli`` — ``lakeshard ingest`` (route + dedupe + Delta commits), exactly once;
* ``one-table`` — the one-table floor: lakeshard's parse and one ``write_deltalake`` of the parsed events, no
  dedupe;
* ``one-table-partitioned`` — the same with ``events``' layout: lakeshard's parse and one ``write_deltalake``
  partitioned by (tenant, hour), no dedupe: what the layout's files cost a plain writer (a file per partition);
* ``machine`` — the machine's floor for parse + write: Arrow's JSON reader over the zone's valid lines (prepared
  beforehand, ``ts`` as epoch milliseconds, not timed) and one ``write_deltalake``;
* ``three-tables`` — what any design keeping lakeshard's three tables must do and nothing more: the parse, then
  the parsed events written with pyarrow in the three layouts (``routed`` by shard, ``events`` by (tenant, hour)
  sorted, ``event_ids`` by (shard, hour) with the 128-bit key hashes); no placement, no dedupe, no commit;
* ``batch`` — Spark: ``spark.read.json`` + a Parquet write partitioned by (tenant, hour), no dedupe;
* ``stream-parquet-6h`` / ``stream-parquet-15min`` — Structured Streaming over the zone (file source, JSON),
  ``withWatermark`` on ``ts`` + ``dropDuplicatesWithinWatermark`` on the event key, Parquet file sink partitioned
  by (tenant, hour), ``availableNow``;
* ``stream-delta`` — the same stream with a 6 h watermark into a Delta sink partitioned like ``events``
  (delta-spark);
* ``merge`` — Structured Streaming with ``foreachBatch``: each micro-batch deduplicated on the event key, then an
  insert-only ``MERGE`` into a Delta table partitioned like ``events`` (delta-spark);
* ``cli-native`` / ``cli-connect`` — ``lakeshard ingest`` on Delta's engine (the native adapter), on a classic session
  and under Spark Connect;
* ``stream-delta-connect`` / ``merge-connect`` — ``stream-delta`` and ``merge`` under Spark Connect. The cases under
  Connect share one local Connect server with Delta's engine (:mod:`bench.connect`, ``--connect-heap``), started
  for them; its process tree's memory and CPU count with each case's own. The Spark peers are in
  :mod:`bench.spark_peers`.

The classic Spark cases start a local session the way lakeshard's own does (``lakeshard.runtime``), with Delta's
installed jars (``scripts/install-delta-jars.sh``; ``LAKESHARD_DELTA_JARS`` names another folder).

Figures per case: wall seconds of the case's work (and of its whole process, start-up included), MB/s of landing
bytes, files out, peak RSS and CPU seconds of the case's process tree (the Spark JVM included), sampled with
psutil; rows out, duplicates let through (rows out minus distinct event keys out) and events dropped / extra
(distinct keys out against the zone's ground truth ``_truth/events.parquet``). An event's key is the record
format's ``(tenant_id, event_id, ts)``. Writes ``bench/results/ingest.json``, ``ingest.md`` and ``ingest.png``
(``--name`` another name: e.g. ``ingest-delta`` for the cases on Delta's engine at another size).

    .venv/bin/python -m bench.bench_ingest [--events 1000000] [--cases cli,one-table,...] [--landing ZONE] [--repeat 3]

``--repeat N`` runs ``lakeshard ingest`` and its floors N times, in turn, and reports each by its median run:
one run of each on a shared machine moves their ratio by 10% either way. Each ratio to a floor is also given round
by round (``cli_over_one_table_paired``: the median of each round's ratio, the runs of a round seconds apart), which
a drift of the machine's speed over the call moves less than a ratio of two medians taken from different rounds.

``--events 20000 --tenants 20`` is the smoke size: seconds per in-process case; each Spark case starts its own JVM
(tens of seconds on a quiet 2-core machine, minutes on a loaded one). A generated zone has ~120 files at any
size, so ``--files-per-trigger`` (default 40) sets the streaming peers' micro-batches (about 3).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.connect import local_connect_server
from bench.spark_peers import KEY, SPARK_CASES, Case, files_under

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]  # where `python -m bench.<name>` finds the package
SAMPLE_S = 0.1
SETTLE_S = 3.0  # default rest between two cases, after the first one's output is synced

CASES: dict[str, str] = {
    "cli": "lakeshard ingest",
    "one-table": "one-table floor: lakeshard parse + one write_deltalake (no dedupe)",
    "one-table-partitioned": "partitioned floor: lakeshard parse + one write_deltalake by (tenant, hour) (no dedupe)",
    "machine": "machine floor: Arrow JSON reader over the valid lines + one write_deltalake (no dedupe)",
    "three-tables": "three-table floor: lakeshard parse + the three tables' files (no dedupe, no commit)",
    "batch": "Spark batch, Parquet by (tenant, hour) (no dedupe)",
    "stream-parquet-6h": "Structured Streaming, watermark 6 h, dropDuplicatesWithinWatermark, Parquet sink",
    "stream-parquet-15min": "Structured Streaming, watermark 15 min, dropDuplicatesWithinWatermark, Parquet sink",
    "stream-delta": "Structured Streaming, watermark 6 h, dropDuplicatesWithinWatermark, Delta sink",
    "merge": "Structured Streaming foreachBatch: dedupe in the batch + insert-only MERGE into Delta",
    "cli-native": "lakeshard ingest on Delta's engine, classic session",
    "cli-connect": "lakeshard ingest on Delta's engine under Spark Connect",
    "stream-delta-connect": "Structured Streaming, watermark 6 h, dropDuplicatesWithinWatermark, Delta sink, "
                            "under Spark Connect",
    "merge-connect": "Structured Streaming foreachBatch: dedupe + insert-only MERGE into Delta, under Spark Connect",
}
# The cases --repeat runs more than once (a few seconds each): lakeshard and the floors its ratios are taken against.
REPEATED = ("cli", "one-table", "one-table-partitioned", "machine")
STREAMING_LIKE_EVENTS = ("stream-parquet-6h", "stream-parquet-15min", "stream-delta", "merge")
# lakeshard ingest's cases: the environment each one's process gets (the embedded lakehouse, or Delta's engine).
LAKESHARD_CASES: dict[str, dict[str, str]] = {"cli": {}, "cli-native": {"LAKESHARD_SPARK_ADAPTER": "native"},
                                              "cli-connect": {"LAKESHARD_SPARK_ADAPTER": "native"}}
# The cases run against one local Spark Connect server with Delta's engine (bench.connect), started for them.
CONNECT_CASES = ("cli-connect", "stream-delta-connect", "merge-connect")
# The peers on Delta's engine that lakeshard on the same engine and client is measured against.
DELTA_PEERS = {"cli-native": ("stream-delta", "merge"), "cli-connect": ("stream-delta-connect", "merge-connect")}


# --- The cases, each run in a process of its own (``--run-case``) ------------------------------------------------

def _parse(landing: Path) -> Any:
    from lakeshard.config import LandingConfig
    from lakeshard.landing import list_landing_files, parse_landing_arrow

    events, _ = parse_landing_arrow(list_landing_files(landing), limits=LandingConfig())
    return events


def _one_table(landing: Path, out: Path, hours: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    """Return the figures of lakeshard's parse and one ``write_deltalake`` into ``out``: unpartitioned, or, given
    ``hours`` (each ``ts``'s hour as lakeshard names it), by (tenant, hour) as ``events`` is."""
    from deltalake import write_deltalake

    start = time.perf_counter()
    events = _parse(landing)
    if hours is not None:
        events = events.append_column("hour", hours(events.column("ts")))
    parsed = time.perf_counter()
    write_deltalake(str(out), events, mode="append", partition_by=None if hours is None else ["tenant_id", "hour"])
    end = time.perf_counter()
    layout = "unpartitioned" if hours is None else "partitioned by (tenant, hour)"
    return {"wall_s": end - start, "files_out": files_under(out), "output": ["delta", str(out)],
            "note": f"parse {parsed - start:.1f} s, write {end - parsed:.1f} s; {layout}"}


def case_one_table(landing: Path, work: Path, opts: dict[str, Any]) -> dict[str, Any]:
    return _one_table(landing, work / "one_table")


def case_one_table_partitioned(landing: Path, work: Path, opts: dict[str, Any]) -> dict[str, Any]:
    from lakeshard.dedupe import own_hour_arrow

    return _one_table(landing, work / "one_table_partitioned", own_hour_arrow)


def prepare_valid_lines(landing: Path, work: Path, opts: dict[str, Any]) -> dict[str, Any]:
    """Write the zone's valid records as JSON lines with ``ts`` in epoch milliseconds (the machine floor's input)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    events = _parse(landing)
    ms = pc.cast(pc.cast(events.column("ts"), pa.timestamp("ms", tz="UTC"), safe=False), pa.int64())
    fields = ("tenant_id", "event_id", "service", "status", "env", "host", "message")
    rows = events.select(list(fields)).append_column("ts", ms).append_column("attributes",
                                                                              events.column("attributes"))
    out = work / "valid_lines"
    out.mkdir(parents=True, exist_ok=True)
    per_file = 100_000
    for n, offset in enumerate(range(0, rows.num_rows, per_file)):
        chunk = rows.slice(offset, per_file).to_pylist()
        with (out / f"part-{n:05d}.jsonl").open("w", encoding="utf-8") as f:
            for row in chunk:
                row["attributes"] = dict(row["attributes"] or ())
                f.write(json.dumps({k: v for k, v in row.items() if v is not None and v != {}},
                                   ensure_ascii=False) + "\n")
    return {"wall_s": 0.0, "files_out": 0, "output": ["none", ""], "note": f"{rows.num_rows} lines"}


def case_machine(landing: Path, work: Path, opts: dict[str, Any]) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.json as pj
    from deltalake import write_deltalake

    source = sorted((work / "valid_lines").glob("*.jsonl"))
    out = work / "machine"
    schema = pa.schema([("tenant_id", pa.string()), ("event_id", pa.string()), ("ts", pa.int64()),
                        *((n, pa.string()) for n in ("service", "status", "env", "host", "message"))])
    start = time.perf_counter()
    # Arrow's reader has no map type: ``attributes`` is inferred, a struct of the members each file holds.
    parts = [pj.read_json(p, parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="infer"))
             for p in source]
    events = pa.concat_tables(parts, promote_options="permissive")
    events = events.set_column(2, "ts", events.column("ts").cast(pa.timestamp("ms", tz="UTC")))
    parsed = time.perf_counter()
    write_deltalake(str(out), events, mode="append")
    end = time.perf_counter()
    return {"wall_s": end - start, "files_out": files_under(out), "output": ["delta", str(out)],
            "note": f"read {parsed - start:.1f} s, write {end - parsed:.1f} s; unpartitioned"}


def case_three_tables(landing: Path, work: Path, opts: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from lakeshard.dedupe import key_hashes
    from lakeshard.lake import write_partitioned
    from lakeshard.tables import EVENTS_SORT_COLUMNS

    out = work / "three_tables"
    start, cpu = time.perf_counter(), time.process_time()
    events = _parse(landing)
    parse_cpu = time.process_time() - cpu
    tenants = pc.dictionary_encode(events.column("tenant_id")).combine_chunks().indices.to_numpy()
    shard = pa.array((tenants % 16).astype(np.int32))
    hour = pc.strftime(pc.floor_temporal(events.column("ts"), unit="hour"), format="%Y-%m-%dT%H")
    routed = events.append_column("shard", shard)
    write_partitioned(routed, str(out / "routed"), routed.schema, ["shard"])
    written = routed.append_column("hour", hour)
    write_partitioned(written, str(out / "events"), written.schema, ["tenant_id", "hour"], EVENTS_SORT_COLUMNS)
    hi, lo = key_hashes(events)
    ids = pa.table({"shard": shard, "interval": hour, "key_hi": hi, "key_lo": lo})  # what event_ids holds
    write_partitioned(ids, str(out / "event_ids"), ids.schema, ["shard", "interval"], ["key_hi", "key_lo"])
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"wall_s": wall, "files_out": files_under(out / "events"), "output": ["parquet-flat", str(out / "events")],
            "note": f"CPU {cpu:.1f} s = parse {parse_cpu:.1f} s + writes {cpu - parse_cpu:.1f} s (routed, events, "
                    f"event_ids: {files_under(out)} files); files out counts events' only"}


RUNNERS: dict[str, Case] = {
    "prepare": prepare_valid_lines,
    "one-table": case_one_table,
    "one-table-partitioned": case_one_table_partitioned,
    "machine": case_machine,
    "three-tables": case_three_tables,
    **SPARK_CASES,
}


# --- The harness: each case as a child process, its tree sampled, its output checked against the truth -----------

def _sample_tree(proc: subprocess.Popen[bytes], server: int | None = None) -> tuple[float, float]:
    """Wait for ``proc``; return the peak RSS (MiB) of it and all its descendants together, and their CPU seconds;
    with ``server``, that process's tree too (its CPU seconds counted from now: the server was up before).

    CPU is each process's last sampled user + system time, so a process's final ``SAMPLE_S`` may be missed.
    """
    import psutil

    def tree(pid: int) -> list[Any]:
        try:
            root = psutil.Process(pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    baseline: dict[int, float] = {}  # the server's processes: their CPU seconds when first seen
    cpu: dict[int, float] = {}
    peak = 0
    while proc.poll() is None:
        total = 0
        for owner, processes in ((proc.pid, tree(proc.pid)), (server, tree(server) if server else [])):
            for p in processes:
                try:
                    total += p.memory_info().rss
                    times = p.cpu_times()
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
                cpu[p.pid] = times.user + times.system
                if owner == server:
                    baseline.setdefault(p.pid, cpu[p.pid])
        peak = max(peak, total)
        time.sleep(SAMPLE_S)
    proc.wait()
    return peak / 2**20, sum(v - baseline.get(pid, 0.0) for pid, v in cpu.items())


def _byte_compile_lakeshard() -> None:
    """Write the bytecode of lakeshard's modules, as ``pip install`` does for a regular install and Python does at
    a first import unless PYTHONDONTWRITEBYTECODE is set (as on this machine): the cases then load the modules the
    way a user's runs do, not compile them from source each time."""
    import compileall

    import lakeshard

    compileall.compile_dir(str(Path(lakeshard.__file__).parent), quiet=1)


def _run_child(cmd: list[str], what: str, env: dict[str, str] | None = None,
               server: int | None = None) -> tuple[float, float, float]:
    """Run ``cmd``; return its wall seconds, peak RSS of its tree (MiB) and the tree's CPU seconds (with the
    ``server`` process's tree counted in, when given)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, cwd=ROOT, env=env)
    peak, cpu = _sample_tree(proc, server)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"{what}: expected exit code 0, found {proc.returncode} ({' '.join(cmd)})")
    return wall, peak, cpu


def _keys_out(fmt: str, path: str) -> Any:
    """Return the event keys written (``ts`` as epoch milliseconds), one row per row out."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    from lakeshard.lake.protocol.partitions import PARTITION_VALUES_KEY

    if fmt == "delta":
        table = DeltaTable(path).to_pyarrow_table(columns=KEY)
    elif fmt == "parquet-flat":  # lakeshard's write_partitioned: files flat, partition values in each footer
        pieces = []
        for file in sorted(Path(path).rglob("*.parquet")):
            piece = pq.read_table(file, columns=[c for c in KEY if c != "tenant_id"])
            values = json.loads(piece.schema.metadata[PARTITION_VALUES_KEY])
            pieces.append(piece.append_column("tenant_id", pa.array([values["tenant_id"]] * piece.num_rows)))
        table = pa.concat_tables(pieces).select(KEY)
    else:
        part = ds.partitioning(pa.schema([("tenant_id", pa.string()), ("hour", pa.string())]), flavor="hive")
        table = ds.dataset(path, format="parquet", partitioning=part).to_table(columns=KEY)
    ts = table.column("ts")
    ms = pc.cast(pc.cast(ts, pa.timestamp("ms", tz=getattr(ts.type, "tz", None)), safe=False), pa.int64())
    return pa.table({"tenant_id": table.column("tenant_id").cast(pa.string()),
                     "event_id": table.column("event_id").cast(pa.string()), "ts_ms": ms})


def _against_truth(keys: Any, truth: Any) -> dict[str, int]:
    cols = ["tenant_id", "event_id", "ts_ms"]
    # On the calling thread: an Acero pool thread can abort the interpreter at exit (tests/test_arrow_threads.py).
    distinct = keys.group_by(cols, use_threads=False).aggregate([])
    found = distinct.join(truth, cols, join_type="inner", use_threads=False).num_rows
    return {"rows_out": keys.num_rows, "distinct_out": distinct.num_rows,
            "duplicates_let_through": keys.num_rows - distinct.num_rows,
            "events_dropped": truth.num_rows - found, "extra_events": distinct.num_rows - found}


def run_case(case: str, landing: Path, work: Path, opts: dict[str, Any], attempt: int = 0) -> dict[str, Any]:
    """Return the figures of one case run as a child process on ``landing`` (``attempt``: which run of the case,
    each ``lakeshard ingest`` into a lakehouse of its own). A case under Connect (``opts["remote"]``, its server's
    process ``opts["server_pid"]``) counts the server's memory and CPU with its own."""
    load_before = os.getloadavg()[0]
    remote = opts.get("remote") if case in CONNECT_CASES else None
    server = opts.get("server_pid") if remote else None
    if case in LAKESHARD_CASES:
        lakehouse = work / f"lakehouse-{case}-{attempt}"
        env = {**os.environ, **LAKESHARD_CASES[case], **({"LAKESHARD_SPARK_REMOTE": remote} if remote else {})}
        wall, peak, cpu = _run_child([sys.executable, "-m", "lakeshard.app.cli", "ingest", "--lakehouse",
                                      str(lakehouse), "--landing", str(landing)], case, env=env, server=server)
        from deltalake import DeltaTable

        engine = "Delta's engine" + (" under Spark Connect" if remote else ", classic") if LAKESHARD_CASES[case] \
            else "delta-rs"
        result = {"wall_s": wall, "files_out": len(DeltaTable(str(lakehouse / "events")).file_uris()),
                  "output": ["delta", str(lakehouse / "events")],
                  "note": f"route + dedupe + Delta commits ({engine}); wall s is the whole process"}
    else:
        out = work / f"{case}.result.json"
        # A Spark case writes its output and checkpoints in a folder of its own: the same peer under Connect and on a
        # classic session must not find each other's checkpoint.
        case_work = work / case if case in SPARK_CASES else work
        case_work.mkdir(exist_ok=True)
        wall, peak, cpu = _run_child([sys.executable, "-m", "bench.bench_ingest", "--run-case", case, "--landing",
                                      str(landing), "--work", str(case_work), "--result", str(out),
                                      "--files-per-trigger", str(opts["files_per_trigger"]),
                                      *(["--remote", remote] if remote else [])],
                                     case, server=server)
        result = json.loads(out.read_text())
    result.update(case=case, name=CASES.get(case, case), process_wall_s=wall, peak_rss_mib=peak, cpu_s=cpu,
                  load_before=load_before, load_after=os.getloadavg()[0])
    return result


def _landing_bytes(landing: Path) -> int:
    return sum(p.stat().st_size for p in landing.rglob("*") if p.is_file() and "_truth" not in p.parts)


def _rounded(case: dict[str, Any], mb: float) -> dict[str, Any]:
    out = dict(case)
    for k in ("wall_s", "process_wall_s", "cpu_s"):
        out[k] = round(case[k], 2)
    out["peak_rss_mib"] = round(case["peak_rss_mib"])
    out["mb_per_s"] = round(mb / case["wall_s"], 1)
    out["load_before"], out["load_after"] = round(case["load_before"], 2), round(case["load_after"], 2)
    return out


def ratios(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Return lakeshard's wall and CPU time over each floor's, and the best streaming peer's over lakeshard's."""
    by = {c["case"]: c for c in cases}
    out: dict[str, Any] = _delta_engine_ratios(by)
    if "cli" not in by:
        return out
    cli = by["cli"]
    for name, case in (("cli_over_one_table", "one-table"), ("cli_over_machine", "machine"),
                       ("cli_over_partitioned", "one-table-partitioned"), ("cli_over_three_tables", "three-tables")):
        if case in by:
            out[name] = round(cli["wall_s"] / by[case]["wall_s"], 2)
            # Both whole processes, interpreter start and imports included (the floors' wall s leaves theirs out).
            out[name.replace("cli_", "cli_process_")] = round(cli["process_wall_s"] / by[case]["process_wall_s"], 2)
            # On a loaded machine wall time follows the load; CPU seconds of the process tree do much less.
            out[name.replace("cli_", "cli_cpu_")] = round(cli["cpu_s"] / by[case]["cpu_s"], 2)
            paired = _paired_ratio(cli.get("wall_runs_s"), by[case].get("wall_runs_s"))
            if paired is not None:
                out[f"{name}_paired"] = paired
    streams = [by[c] for c in STREAMING_LIKE_EVENTS if c in by and by[c].get("events_dropped", 1) == 0]
    if streams:
        best = min(streams, key=lambda c: c["wall_s"])
        out["best_streaming_over_cli"] = round(best["wall_s"] / cli["wall_s"], 2)
        out["best_streaming_case"] = best["case"]
        best_cpu = min(streams, key=lambda c: c["cpu_s"])
        out["best_streaming_cpu_over_cli"] = round(best_cpu["cpu_s"] / cli["cpu_s"], 2)
        out["best_streaming_cpu_case"] = best_cpu["case"]
    return out


def _delta_engine_ratios(by: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Return lakeshard on Delta's engine (classic, Connect) over lakeshard embedded, whole process against whole
    process; and the best Delta peer on the same engine and client that drops no event over lakeshard there."""
    out: dict[str, Any] = {}
    for case in DELTA_PEERS:
        if case not in by:
            continue
        if "cli" in by:
            out[f"{case}_over_cli"] = round(by[case]["wall_s"] / by["cli"]["wall_s"], 2)
            out[f"{case}_cpu_over_cli"] = round(by[case]["cpu_s"] / by["cli"]["cpu_s"], 2)
        peers = [by[c] for c in DELTA_PEERS[case] if c in by and by[c].get("events_dropped", 1) == 0]
        if peers:
            best = min(peers, key=lambda c: c["wall_s"])
            out[f"best_peer_over_{case}"] = round(best["wall_s"] / by[case]["wall_s"], 2)
            out[f"best_peer_of_{case}"] = best["case"]
    return out


def _paired_ratio(cli_runs: list[float] | None, floor_runs: list[float] | None) -> float | None:
    """Return the median over the rounds of a repeated call of lakeshard's wall time over the floor's in that
    round (the two runs in the order they ran, round k of each side the k-th); None without two or more rounds."""
    if cli_runs is None or floor_runs is None or len(cli_runs) != len(floor_runs) or len(cli_runs) < 2:
        return None
    return round(statistics.median(a / b for a, b in zip(cli_runs, floor_runs, strict=True)), 2)


def write_results(doc: dict[str, Any]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{doc['name']}.json").write_text(json.dumps(doc, indent=1) + "\n")
    unique = doc["unique_events"]
    lines = [f"# Ingest: landing JSON to events ({doc['events']:,} events, {doc['landing_mb']:.0f} MB)", "",
             f"{doc['when']}, {doc['machine']}, load average {doc['load_start']:.1f} at the start and "
             f"{doc['load_end']:.1f} at the end. Zone from `lakeshard generate --events {doc['events']}`: "
             f"{doc['records']:,} records, {unique:,} unique events, {doc['duplicates']:,} duplicates, "
             f"{doc['bad']:,} malformed. Streaming peers read {doc['files_per_trigger']} files per micro-batch.", "",
             "Each case ran in a process of its own, after the previous case's output was deleted and synced and a"
             " few seconds of rest (`--settle`), lakeshard's modules byte-compiled beforehand as a regular install"
             " has them (this machine's shell sets PYTHONDONTWRITEBYTECODE, which made every run compile them from"
             " source: about 0.2 s of `lakeshard ingest`'s start). Wall s is the case's work (a Spark case's "
             "session start apart; `lakeshard ingest`'s whole process); process s includes the interpreter's and "
             "the JVM's start. MB/s is landing bytes over wall s. Peak RSS and CPU are those of the case's whole "
             "process tree (the Spark JVM included), sampled every 0.1 s. Duplicates let through: rows out minus "
             "distinct event keys (tenant_id, event_id, ts) out. Dropped: events of the ground truth missing from "
             "the output (a watermark drops late events); extra: keys out that are not events of the truth "
             "(records lakeshard quarantines that a lenient peer accepts).", "", *_creation_text(doc),
             "| case | wall s | process s | MB/s | files out | peak RSS MiB | CPU s | rows out | duplicates "
             "| dropped | extra | load avg | note |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for c in doc["cases"]:
        runs = c.get("wall_runs_s")
        note = f"{c['note']}; median of {len(runs)} runs ({', '.join(map(str, runs))} s)" if runs else c["note"]
        lines.append(f"| {c['name']} | {c['wall_s']} | {c['process_wall_s']} | {c['mb_per_s']} | {c['files_out']:,} "
                     f"| {c['peak_rss_mib']:,} | {c['cpu_s']} | {c['rows_out']:,} "
                     f"| {c['duplicates_let_through']:,} | {c['events_dropped']:,} | {c['extra_events']:,} "
                     f"| {c['load_before']} to {c['load_after']} | {note} |")
    r = doc.get("ratios", {})
    if r:
        lines += ["", "Ratios (lower is better for lakeshard's own; the streaming one is the peer's time over "
                      "lakeshard's):"]
        lines += ["", "| ratio | wall | wall, round by round | whole process, both sides | CPU of the process tree |",
                  "| --- | ---: | ---: | ---: | ---: |"]
        for key, text in (("cli_over_one_table", "`lakeshard ingest` / one-table floor"),
                          ("cli_over_machine", "`lakeshard ingest` / machine floor"),
                          ("cli_over_partitioned", "`lakeshard ingest` / partitioned floor"),
                          ("cli_over_three_tables", "`lakeshard ingest` / three-table floor")):
            if key in r:
                process = r.get(key.replace("cli_", "cli_process_"))
                paired = r.get(f"{key}_paired")
                lines.append(f"| {text} | **{r[key]}x** | {f'{paired}x' if paired else '-'} "
                             f"| {f'{process}x' if process else '-'} | {r[key.replace('cli_', 'cli_cpu_')]}x |")
        if "best_streaming_over_cli" in r:
            lines.append(f"| best Structured Streaming peer partitioned like `events` that drops no event / "
                         f"`lakeshard ingest` | **{r['best_streaming_over_cli']}x** ({r['best_streaming_case']}) "
                         f"| - | - | {r['best_streaming_cpu_over_cli']}x ({r['best_streaming_cpu_case']}) |")
    lines += _delta_engine_text(r)
    if doc.get("note"):
        lines += ["", str(doc["note"])]
    (RESULTS / f"{doc['name']}.md").write_text("\n".join(lines) + "\n")
    _plot(doc)


def _delta_engine_text(r: dict[str, Any]) -> list[str]:
    """Return the table of lakeshard on Delta's engine against embedded and against the Delta peers."""
    rows = []
    for case, client in (("cli-native", "classic session"), ("cli-connect", "Spark Connect")):
        if f"{case}_over_cli" in r:
            rows.append(f"| `lakeshard ingest` on Delta's engine, {client} / embedded | **{r[f'{case}_over_cli']}x** "
                        f"| {r[f'{case}_cpu_over_cli']}x |")
        if f"best_peer_over_{case}" in r:
            rows.append(f"| best Delta peer that drops no event ({r[f'best_peer_of_{case}']}) / `lakeshard ingest` on "
                        f"Delta's engine, {client} | **{r[f'best_peer_over_{case}']}x** | - |")
    if not rows:
        return []
    return ["", "On Delta's engine (lakeshard's wall s is its whole process, JVM start included; a peer's leaves its "
                "session's start out; under Connect, memory and CPU count the server's process tree too):", "",
            "| ratio | wall | CPU |", "| --- | ---: | ---: |", *rows]


def _creation_text(doc: dict[str, Any]) -> list[str]:
    """Return the paragraph on what creating a file cost during the call (none for a document without it)."""
    if "file_create_us" not in doc:
        return []
    start, end = doc["file_create_us"]
    return [f"Creating an empty file in the work directory cost {start} us of system time before the runs and {end}"
            " us after them. On ext4 without a journal (this VM's disk) it costs about 25 us normally and about 450"
            " us within minutes of a deletion of many files (the inode allocator skips recently deleted inodes):"
            " `lakeshard ingest` creates about 3k files at 1M events, its floors a few, so at 450 us its runs"
            " carry about 1.4 s of system time the floors do not. Nothing is deleted between lakeshard's runs.", ""]


def _plot(doc: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = doc["cases"]
    names = [c["case"] for c in cases]
    fig, (speed, memory) = plt.subplots(1, 2, figsize=(11, 0.45 * len(cases) + 1.6), sharey=True)
    colours = ["#d62" if c["duplicates_let_through"] or c["events_dropped"] else "#4a7" for c in cases]
    speed.barh(names, [c["mb_per_s"] for c in cases], color=colours)
    speed.invert_yaxis()
    speed.set_xlabel("MB/s of landing JSON (higher is better)")
    memory.barh(names, [c["peak_rss_mib"] for c in cases], color="#57a")
    memory.set_xlabel("peak RSS of the process tree, MiB")
    fig.suptitle(f"Ingest, {doc['events']:,} events, {doc['landing_mb']:.0f} MB "
                 "(red: duplicates let through or events dropped)")
    fig.tight_layout()
    fig.savefig(RESULTS / f"{doc['name']}.png", dpi=110)
    plt.close(fig)


def _earlier_cases(events: int, name: str) -> list[dict[str, Any]]:
    """Return the cases of an earlier ``<name>.json`` of the same size (kept for the cases not run again)."""
    path = RESULTS / f"{name}.json"
    if not path.is_file():
        return []
    doc = json.loads(path.read_text())
    return [c for c in doc["cases"] if "process_wall_s" in c] if doc.get("events") == events else []


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--events", type=int, default=1_000_000, help="zone size; 20000 is the smoke size")
    p.add_argument("--tenants", type=int, default=200)
    p.add_argument("--cases", default=",".join(CASES),
                   help="which cases to run, of: " + ", ".join(CASES) + "; the others keep their figures from an "
                        "earlier ingest.json of the same --events")
    p.add_argument("--files-per-trigger", type=int, default=40,
                   help="maxFilesPerTrigger of the streaming peers (a generated zone has ~120 files at any size)")
    p.add_argument("--landing", default=None, help="an existing zone of `lakeshard generate --events N` to use")
    p.add_argument("--repeat", type=int, default=1,
                   help="runs of lakeshard and its floors, in turn; each is reported by its median run")
    p.add_argument("--settle", type=float, default=SETTLE_S,
                   help="seconds of rest between two cases, once the first one's output is deleted and synced")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--no-save", action="store_true", help="print the figures, write nothing to bench/results")
    p.add_argument("--name", default="ingest", help="the results' name in bench/results (<name>.json, .md, .png)")
    p.add_argument("--render", action="store_true", help="write <name>.md and <name>.png again from <name>.json")
    p.add_argument("--note", default=None, help="a paragraph for ingest.md (with --render)")
    p.add_argument("--connect-heap", default="1g",
                   help="Java heap of the local Connect server the cases under Connect share (Spark's default 1g)")
    p.add_argument("--run-case", default=None, help=argparse.SUPPRESS)
    p.add_argument("--remote", default=None, help=argparse.SUPPRESS)
    p.add_argument("--work", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    return p


def run(args: argparse.Namespace, work: Path, say: Callable[[str], None] = print,
        on_case: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Return the benchmark's document: every chosen case on one zone (generated under ``work`` unless given).

    ``on_case`` gets the document of the cases done so far after each case, so a long run keeps what it measured.
    """
    import pyarrow.parquet as pq

    from lakeshard.synth import EVENTS_FILE, TRUTH_DIR, read_manifest

    chosen = [c for c in args.cases.split(",") if c]
    unknown = sorted(set(chosen) - set(CASES))
    if unknown:
        raise SystemExit(f"--cases: expected names of {', '.join(CASES)}, found {', '.join(unknown)}")
    _byte_compile_lakeshard()
    landing = Path(args.landing) if args.landing else work / "landing"
    if args.landing is None:
        subprocess.run([sys.executable, "-m", "lakeshard.app.cli", "generate", "--landing", str(landing),
                        "--lakehouse", str(work / "unused"), "--events", str(args.events), "--tenants",
                        str(args.tenants), "--quiet"], check=True)
    manifest = read_manifest(landing)
    truth = pq.read_table(landing / TRUTH_DIR / EVENTS_FILE, columns=["tenant_id", "event_id", "ts_ms"])
    mb = _landing_bytes(landing) / 1e6
    opts: dict[str, Any] = {"files_per_trigger": args.files_per_trigger}
    load_start = os.getloadavg()[0]
    creation = [_file_creation_us(work / "probe-start")]
    say(f"creating a file costs {creation[0]:.0f} us of system time here now")
    if "machine" in chosen:
        run_case("prepare", landing, work, opts)
    # lakeshard and its floors are run --repeat times, in turn (cli, one-table, ..., machine, cli, ...): the ratios
    # are then taken of medians, and a drift of the machine's speed weighs on each case alike.
    repeated = [c for c in chosen if c in REPEATED]
    sequence = [*([c for _ in range(max(1, args.repeat)) for c in repeated]), *(c for c in chosen if c not in REPEATED)]
    runs: dict[str, list[dict[str, Any]]] = {}

    def measured() -> dict[str, Any]:
        return _document(args, manifest, mb, load_start, [_median_run(r) for r in runs.values()])

    server = contextlib.ExitStack()
    if any(c in CONNECT_CASES for c in chosen):
        say(f"starting a local Spark Connect server with Delta's engine ({args.connect_heap} heap) ...")
        opts["remote"], opts["server_pid"] = server.enter_context(local_connect_server(args.connect_heap))
    with server:
        for case in sequence:
            figures = run_case(case, landing, work, opts, attempt=len(runs.get(case, [])))
            fmt, path = figures.pop("output")
            figures.update(_against_truth(_keys_out(fmt, path), truth))
            runs.setdefault(case, []).append(_rounded(figures, mb))
            say(json.dumps(runs[case][-1]))
            if on_case is not None:
                on_case(measured())
            if case not in LAKESHARD_CASES:
                shutil.rmtree(path, ignore_errors=True)  # the disk is small; the figures are taken
            # The next case starts once this one's writes and deletions are on disk and the file system's deferred
            # work is done: a run right after a 1M case's output was deleted spent several more seconds in the kernel.
            os.sync()
            time.sleep(args.settle)
    creation.append(_file_creation_us(work / "probe-end"))
    return {**measured(), "file_create_us": [round(c) for c in creation]}


def _file_creation_us(directory: Path, n: int = 1000) -> float:
    """Return the system time this process spends creating one empty file in ``directory`` (which is left in
    place: deleting files is what makes creating the next ones dear).

    On ext4 without a journal (this VM's disk) a file created within minutes of a deletion of many costs ~20x
    more than otherwise (about 450 against 25 us): the inode allocator skips inodes deleted recently, reading
    each one's table block. `lakeshard ingest` creates ~3k files at 1M events, the floors a few, so the
    figure is printed beside the results.
    """
    directory.mkdir(parents=True)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_stime
    for i in range(n):
        (directory / f"f{i}").touch()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_stime - before) / n * 1e6


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the run of median wall time among a case's runs, with every run's wall time and the worst
    correctness figures of them all (each run is checked against the truth, not only the median one)."""
    middle = dict(sorted(runs, key=lambda r: r["wall_s"])[(len(runs) - 1) // 2])
    if len(runs) > 1:
        middle["wall_runs_s"] = [r["wall_s"] for r in runs]
        for key in ("duplicates_let_through", "events_dropped", "extra_events"):
            middle[key] = max(r[key] for r in runs)
    return middle


def _document(args: argparse.Namespace, manifest: Any, mb: float, load_start: float,
              cases: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": args.name, "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores", "events": args.events,
            "landing_mb": round(mb, 1), "records": manifest.records, "duplicates": manifest.duplicate_records,
            "bad": manifest.bad_records, "unique_events": manifest.unique_events,
            "files_per_trigger": args.files_per_trigger, "load_start": round(load_start, 2),
            "load_end": round(os.getloadavg()[0], 2), "cases": cases, "ratios": ratios(cases)}


def main() -> None:
    args = parser().parse_args()
    if args.run_case:  # a child: run one case, write its figures
        # Every case's process has the memory settings `lakeshard` gives its own (no transparent huge pages,
        # Arrow's freed pages kept): the ratios then measure the work, not the settings.
        from lakeshard.process import prepare_process_memory

        prepare_process_memory()
        result = RUNNERS[args.run_case](Path(args.landing), Path(args.work),
                                        {"files_per_trigger": args.files_per_trigger, "remote": args.remote})
        Path(args.result).write_text(json.dumps(result))
        return
    if args.render:
        doc = json.loads((RESULTS / f"{args.name}.json").read_text())
        doc.setdefault("name", args.name)
        doc["ratios"] = ratios(doc["cases"])
        if args.note is not None:
            doc["note"] = args.note
        write_results(doc)
        return
    work = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    try:
        earlier = _earlier_cases(args.events, args.name)

        def save(doc: dict[str, Any]) -> None:
            ran = {c["case"] for c in doc["cases"]}
            cases = [c for c in earlier if c["case"] not in ran] + doc["cases"]
            doc["cases"] = sorted(cases, key=lambda c: list(CASES).index(c["case"]))
            doc["ratios"] = ratios(doc["cases"])
            if not args.no_save:
                write_results(doc)

        doc = run(args, work, on_case=save)
        save(doc)
        print(json.dumps(doc["ratios"]))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
