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
  insert-only ``MERGE`` into a Delta table partitioned like ``events`` (delta-spark).

The Spark cases start a local session the way lakeshard's own does (``lakeshard.runtime.session``), with Delta's
installed jars (``scripts/install-delta-jars.sh``; ``LAKESHARD_DELTA_JARS`` names another folder).

Figures per case: wall seconds of the case's work (and of its whole process, start-up included), MB/s of landing
bytes, files out, peak RSS and CPU seconds of the case's process tree (the Spark JVM included), sampled with
psutil; rows out, duplicates let through (rows out minus distinct event keys out) and events dropped / extra
(distinct keys out against the zone's ground truth ``_truth/events.parquet``). An event's key is the record
format's ``(tenant_id, event_id, ts)``. Writes ``bench/results/ingest.json``, ``ingest.md`` and ``ingest.png``.

    .venv/bin/python bench/bench_ingest.py [--events 1000000] [--cases cli,one-table,...] [--landing ZONE] [--repeat 3]

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
import dataclasses
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

from lakeshard.tables import EVENT_KEY

RESULTS = Path(__file__).resolve().parent / "results"
KEY = list(EVENT_KEY)  # the event key (docs/design.md §2), as Spark's and pyarrow's column lists take it
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
}
# The cases --repeat runs more than once (a few seconds each): lakeshard and the floors its ratios are taken against.
REPEATED = ("cli", "one-table", "one-table-partitioned", "machine")
STREAMING_LIKE_EVENTS = ("stream-parquet-6h", "stream-parquet-15min", "stream-delta", "merge")


# --- The cases, each run in a process of its own (``--run-case``) ------------------------------------------------

def _files_under(root: Path, suffix: str = ".parquet") -> int:
    return sum(1 for p in root.rglob(f"*{suffix}") if not any(part.startswith(("_", ".")) for part in p.parts))


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
    return {"wall_s": end - start, "files_out": _files_under(out), "output": ["delta", str(out)],
            "note": f"parse {parsed - start:.1f} s, write {end - parsed:.1f} s; {layout}"}


def case_one_table(landing: Path, work: Path, opts: dict[str, Any]) -> dict[str, Any]:
    return _one_table(landing, work / "one_table")


def case_one_table_partitioned(landing: Path, work: Path, opts: dict[str, Any]) -> dict[str, Any]:
    from lakeshard.dedupe.index import own_hour_arrow

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
    return {"wall_s": end - start, "files_out": _files_under(out), "output": ["delta", str(out)],
            "note": f"read {parsed - start:.1f} s, write {end - parsed:.1f} s; unpartitioned"}


def case_three_tables(landing: Path, work: Path, opts: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from lakeshard.dedupe.keyhash import key_hashes
    from lakeshard.lake.protocol.partitions import write_partitioned
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
    return {"wall_s": wall, "files_out": _files_under(out / "events"), "output": ["parquet-flat", str(out / "events")],
            "note": f"CPU {cpu:.1f} s = parse {parse_cpu:.1f} s + writes {cpu - parse_cpu:.1f} s (routed, events, "
                    f"event_ids: {_files_under(out)} files); files out counts events' only"}


def _spark() -> Any:
    """Return a local session set up as lakeshard's own (``local_spark_conf``), with Delta's installed jars."""
    from pyspark.sql import SparkSession

    from lakeshard.config import LakeshardConfig
    from lakeshard.errors import EnvironmentProblem
    from lakeshard.runtime.session import delta_jars_folder, find_java, local_spark_conf

    cfg = LakeshardConfig()
    cfg = dataclasses.replace(cfg, spark=dataclasses.replace(cfg.spark, master="local[2]", app_name="bench_ingest",
                                                             adapter="native"))
    find_java()
    conf = local_spark_conf(cfg)
    if "spark.jars" not in conf:
        raise EnvironmentProblem(f"Delta's jars: expected delta-spark's jar in {delta_jars_folder()}, found none; "
                                 "run scripts/install-delta-jars.sh or set LAKESHARD_DELTA_JARS to their folder")
    return SparkSession.builder.master(cfg.spark.master).config(map=dict(conf)).getOrCreate()


def _json_schema() -> Any:
    from pyspark.sql.types import MapType, StringType, StructField, StructType

    fields = [StructField(n, StringType()) for n in ("tenant_id", "event_id", "ts", "service", "status", "env",
                                                     "host", "message")]
    return StructType([*fields, StructField("attributes", MapType(StringType(), StringType()))])


def _typed(frame: Any) -> Any:
    """Return the JSON frame with ``ts`` as a timestamp (RFC 3339 string or epoch milliseconds) and bad rows gone."""
    from pyspark.sql import functions as F

    ts = F.coalesce(F.try_to_timestamp(F.col("ts")),
                    F.timestamp_millis(F.expr("try_cast(ts as bigint)")))
    # The peers keep what a partition directory can hold: present ids of lakeshard's lengths and a timestamp.
    # A far-future ts (a producer bug the zone holds) would move a streaming watermark centuries ahead and drop
    # everything after it as late: the peers get lakeshard's range check too.
    in_range = F.col("ts").between(F.lit("2000-01-01 00:00:00").cast("timestamp"),
                                   F.current_timestamp() + F.expr("INTERVAL 1 DAY"))
    valid = (F.length("tenant_id").between(1, 128) & F.length("event_id").between(1, 256) & in_range)
    return frame.withColumn("ts", ts).where(valid).withColumn("hour", F.date_format("ts", "yyyy-MM-dd'T'HH"))


def _landing_glob(landing: Path) -> str:
    return str(landing / "*" / "*" / "*")


def _stream(spark: Any, landing: Path, opts: dict[str, Any]) -> Any:
    return _typed(spark.readStream.schema(_json_schema()).option("maxFilesPerTrigger", opts["files_per_trigger"])
                  .json(_landing_glob(landing)))


SparkRun = Callable[[Any], tuple[Path, str, str, Any]]


def _timed_spark(run: SparkRun) -> dict[str, Any]:
    """Return the figures of ``run(spark)``, the session's start apart; ``run`` gives its output directory, format,
    note and its streaming query (``None`` for a batch job)."""
    spark = _spark()
    start = time.perf_counter()
    out, fmt, note, query = run(spark)
    wall = time.perf_counter() - start
    batches = None if query is None else len([p for p in query.recentProgress if p.get("numInputRows", 0)])
    spark.stop()
    if batches is not None:
        note = f"{note}, {batches} micro-batches"
    return {"wall_s": wall, "files_out": _files_under(out), "output": [fmt, str(out)], "note": note,
            "micro_batches": batches}


def case_batch(landing: Path, work: Path, opts: dict[str, Any]) -> dict[str, Any]:
    def run(spark: Any) -> tuple[Path, str, str, Any]:
        out = work / "spark_batch"
        frame = _typed(spark.read.schema(_json_schema()).json(_landing_glob(landing)))
        frame.write.partitionBy("tenant_id", "hour").parquet(str(out))
        return out, "parquet", "no dedupe, no Delta commit", None

    return _timed_spark(run)


def _case_stream_parquet(watermark: str) -> Callable[[Path, Path, dict[str, Any]], dict[str, Any]]:
    def case(landing: Path, work: Path, opts: dict[str, Any]) -> dict[str, Any]:
        def run(spark: Any) -> tuple[Path, str, str, Any]:
            name = watermark.replace(" ", "")
            out = work / f"stream_parquet_{name}"
            query = (_stream(spark, landing, opts).withWatermark("ts", watermark)
                     .dropDuplicatesWithinWatermark(KEY).writeStream.format("parquet")
                     .partitionBy("tenant_id", "hour").option("path", str(out))
                     .option("checkpointLocation", str(work / f"ckpt_parquet_{name}"))
                     .trigger(availableNow=True).start())
            query.awaitTermination()
            return out, "parquet", "availableNow", query

        return _timed_spark(run)

    return case


def case_stream_delta(landing: Path, work: Path, opts: dict[str, Any]) -> dict[str, Any]:
    def run(spark: Any) -> tuple[Path, str, str, Any]:
        out = work / "stream_delta"
        query = (_stream(spark, landing, opts).withWatermark("ts", "6 hours").dropDuplicatesWithinWatermark(KEY)
                 .writeStream.format("delta").partitionBy("tenant_id", "hour")
                 .option("checkpointLocation", str(work / "ckpt_delta")).trigger(availableNow=True)
                 .start(str(out)))
        query.awaitTermination()
        return out, "delta", "delta-spark sink, availableNow", query

    return _timed_spark(run)


def case_merge(landing: Path, work: Path, opts: dict[str, Any]) -> dict[str, Any]:
    from delta.tables import DeltaTable

    def run(spark: Any) -> tuple[Path, str, str, Any]:
        out = work / "merge"
        schema = _typed(spark.read.schema(_json_schema()).json(_landing_glob(landing))).schema
        DeltaTable.create(spark).location(str(out)).addColumns(schema).partitionedBy("tenant_id", "hour").execute()
        condition = ("t.tenant_id = s.tenant_id AND t.hour = s.hour AND t.event_id = s.event_id AND t.ts = s.ts")

        def merge(batch: Any, batch_id: int) -> None:
            (DeltaTable.forPath(spark, str(out)).alias("t").merge(batch.dropDuplicates(KEY).alias("s"), condition)
             .whenNotMatchedInsertAll().execute())

        query = (_stream(spark, landing, opts).writeStream.foreachBatch(merge)
                 .option("checkpointLocation", str(work / "ckpt_merge")).trigger(availableNow=True).start())
        query.awaitTermination()
        return out, "delta", "delta-spark MERGE per micro-batch, availableNow", query

    return _timed_spark(run)


RUNNERS: dict[str, Callable[[Path, Path, dict[str, Any]], dict[str, Any]]] = {
    "prepare": prepare_valid_lines,
    "one-table": case_one_table,
    "one-table-partitioned": case_one_table_partitioned,
    "machine": case_machine,
    "three-tables": case_three_tables,
    "batch": case_batch,
    "stream-parquet-6h": _case_stream_parquet("6 hours"),
    "stream-parquet-15min": _case_stream_parquet("15 minutes"),
    "stream-delta": case_stream_delta,
    "merge": case_merge,
}


# --- The harness: each case as a child process, its tree sampled, its output checked against the truth -----------

def _sample_tree(proc: subprocess.Popen[bytes]) -> tuple[float, float]:
    """Wait for ``proc``; return the peak RSS (MiB) of it and all its descendants together, and their CPU seconds.

    CPU is each process's last sampled user + system time, so a process's final ``SAMPLE_S`` may be missed.
    """
    import psutil

    root = psutil.Process(proc.pid)
    cpu: dict[int, float]
    peak, cpu = 0, {}
    while proc.poll() is None:
        total = 0
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        for p in tree:
            try:
                total += p.memory_info().rss
                times = p.cpu_times()
                cpu[p.pid] = times.user + times.system
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        peak = max(peak, total)
        time.sleep(SAMPLE_S)
    proc.wait()
    return peak / 2**20, sum(cpu.values())


def _byte_compile_lakeshard() -> None:
    """Write the bytecode of lakeshard's modules, as ``pip install`` does for a regular install and Python does at
    a first import unless PYTHONDONTWRITEBYTECODE is set (as on this machine): the cases then load the modules the
    way a user's runs do, not compile them from source each time."""
    import compileall

    import lakeshard

    compileall.compile_dir(str(Path(lakeshard.__file__).parent), quiet=1)


def _run_child(cmd: list[str], what: str) -> tuple[float, float, float]:
    """Run ``cmd``; return its wall seconds, peak RSS of its tree (MiB) and the tree's CPU seconds."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    peak, cpu = _sample_tree(proc)
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
    each ``lakeshard ingest`` into a lakehouse of its own)."""
    load_before = os.getloadavg()[0]
    if case == "cli":
        lakehouse = work / f"lakehouse-{attempt}"
        wall, peak, cpu = _run_child([sys.executable, "-m", "lakeshard.app.cli", "ingest", "--lakehouse",
                                      str(lakehouse), "--landing", str(landing)], case)
        from deltalake import DeltaTable

        result = {"wall_s": wall, "files_out": len(DeltaTable(str(lakehouse / "events")).file_uris()),
                  "output": ["delta", str(lakehouse / "events")], "note": "route + dedupe + Delta commits"}
    else:
        out = work / f"{case}.result.json"
        wall, peak, cpu = _run_child([sys.executable, __file__, "--run-case", case, "--landing", str(landing),
                                      "--work", str(work), "--result", str(out), "--files-per-trigger",
                                      str(opts["files_per_trigger"])], case)
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
    out: dict[str, Any] = {}
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


def _paired_ratio(cli_runs: list[float] | None, floor_runs: list[float] | None) -> float | None:
    """Return the median over the rounds of a repeated call of lakeshard's wall time over the floor's in that
    round (the two runs in the order they ran, round k of each side the k-th); None without two or more rounds."""
    if cli_runs is None or floor_runs is None or len(cli_runs) != len(floor_runs) or len(cli_runs) < 2:
        return None
    return round(statistics.median(a / b for a, b in zip(cli_runs, floor_runs, strict=True)), 2)


def write_results(doc: dict[str, Any]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ingest.json").write_text(json.dumps(doc, indent=1) + "\n")
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
    if doc.get("note"):
        lines += ["", str(doc["note"])]
    (RESULTS / "ingest.md").write_text("\n".join(lines) + "\n")
    _plot(doc)


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
    fig.savefig(RESULTS / "ingest.png", dpi=110)
    plt.close(fig)


def _earlier_cases(events: int) -> list[dict[str, Any]]:
    """Return the cases of an earlier ``ingest.json`` of the same size (kept for the cases not run again)."""
    path = RESULTS / "ingest.json"
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
    p.add_argument("--render", action="store_true", help="write ingest.md and ingest.png again from ingest.json")
    p.add_argument("--note", default=None, help="a paragraph for ingest.md (with --render)")
    p.add_argument("--run-case", default=None, help=argparse.SUPPRESS)
    p.add_argument("--work", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    return p


def run(args: argparse.Namespace, work: Path, say: Callable[[str], None] = print,
        on_case: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Return the benchmark's document: every chosen case on one zone (generated under ``work`` unless given).

    ``on_case`` gets the document of the cases done so far after each case, so a long run keeps what it measured.
    """
    import pyarrow.parquet as pq

    from lakeshard.synth.manifest import EVENTS_FILE, TRUTH_DIR, read_manifest

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
    opts = {"files_per_trigger": args.files_per_trigger}
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
    cases: list[dict[str, Any]] = []
    for case in sequence:
        figures = run_case(case, landing, work, opts, attempt=len(runs.get(case, [])))
        fmt, path = figures.pop("output")
        figures.update(_against_truth(_keys_out(fmt, path), truth))
        runs.setdefault(case, []).append(_rounded(figures, mb))
        say(json.dumps(runs[case][-1]))
        cases = [_median_run(r) for r in runs.values()]
        if on_case is not None:
            on_case(_document(args, manifest, mb, load_start, cases))
        if case != "cli":
            shutil.rmtree(path, ignore_errors=True)  # the disk is small; the figures are taken
        # The next case starts once this one's writes and deletions are on disk and the file system's deferred work
        # is done: a run right after a 1M case's output was deleted spent several more seconds in the kernel.
        os.sync()
        time.sleep(args.settle)
    creation.append(_file_creation_us(work / "probe-end"))
    return {**_document(args, manifest, mb, load_start, cases), "file_create_us": [round(c) for c in creation]}


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
    return {"when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
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
        result = RUNNERS[args.run_case](Path(args.landing), Path(args.work), {"files_per_trigger":
                                                                              args.files_per_trigger})
        Path(args.result).write_text(json.dumps(result))
        return
    if args.render:
        doc = json.loads((RESULTS / "ingest.json").read_text())
        doc["ratios"] = ratios(doc["cases"])
        if args.note is not None:
            doc["note"] = args.note
        write_results(doc)
        return
    work = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    try:
        earlier = _earlier_cases(args.events)

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
