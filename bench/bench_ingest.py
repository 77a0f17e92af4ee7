"""Landing JSON to exactly-once events: ``lakeshard ingest`` against the peers a Spark user would pick, in one run.

Generates a landing zone with ``lakeshard generate`` (default 1M events, ~570 MB, producer retries, redelivered
files, late and malformed records of every quarantine category), then times on the same zone:

* ``lakeshard ingest`` — the CLI as a separate process (route + dedupe + Delta commits), exactly once;
* ``spark batch`` — ``spark.read.json`` + a Parquet write partitioned by (tenant, hour), no dedupe (the floor);
* ``spark streaming 6h`` / ``15min`` — Structured Streaming, ``withWatermark`` + ``dropDuplicatesWithinWatermark``,
  Parquet file sink, ``availableNow``: the duplicates each watermark lets through are counted;
* ``delta-rs`` — the landing zone parsed by lakeshard's parser in this process and appended with ``write_deltalake``,
  no dedupe;
* ``floor`` — what any design keeping lakeshard's three tables must do and nothing more: the parse, then the parsed
  events written with pyarrow in the three layouts (``routed`` by shard, ``events`` by (tenant, hour) sorted,
  ``event_ids`` by (shard, hour) with the 128-bit key hashes); no placement, no dedupe, no commit. Its note gives
  the CPU seconds of the parse and of the writes: the budget a 2-core machine has for the rest.

Figures per case: wall seconds, MB/s of landing bytes, events/s, files out, peak RSS (the process's own for the
CLI, this process's for the in-process cases), rows out and duplicates let through (rows out minus distinct event
keys). Writes ``bench/results/ingest.json``, ``ingest.md`` and ``ingest.png``.

    .venv/bin/python bench/bench_ingest.py [--events 1000000] [--skip-streaming]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
KEY = ["tenant_id", "event_id", "ts"]


def _files_under(root: Path, suffix: str = ".parquet") -> int:
    return sum(1 for p in root.rglob(f"*{suffix}") if not any(part.startswith(("_", ".")) for part in p.parts))


def _landing_bytes(landing: Path) -> int:
    return sum(p.stat().st_size for p in landing.rglob("*") if p.is_file() and "_truth" not in p.parts)


def _child_peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def _self_peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _case(name: str, wall: float, mb: float, rows: int, distinct: int, files: int, peak_mib: float,
          events: int, note: str = "") -> dict[str, Any]:
    return {"case": name, "wall_s": round(wall, 2), "mb_per_s": round(mb / wall, 1),
            "events_per_s": round(events / wall), "rows_out": rows, "distinct_out": distinct,
            "duplicates_let_through": rows - distinct, "files_out": files, "peak_rss_mib": round(peak_mib),
            "note": note}


def run_cli(landing: Path, work: Path, mb: float, unique: int) -> dict[str, Any]:
    """Return the figures of ``lakeshard ingest`` run as its own process on a fresh lakehouse."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    lakehouse = work / "lakehouse"
    env = dict(os.environ)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "lakeshard.app.cli", "ingest", "--lakehouse", str(lakehouse), "--landing",
                    str(landing)], check=True, env=env, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)  # the CLI's Python process
    peak = _child_peak_mib()
    events = DeltaTable(str(lakehouse / "events")).to_pyarrow_table(columns=["tenant_id", "event_id", "ts"])
    distinct = events.group_by(KEY).aggregate([]).num_rows
    exact = events.num_rows == distinct == unique
    files = len(DeltaTable(str(lakehouse / "events")).file_uris())
    del pc
    return _case("lakeshard ingest", wall, mb, events.num_rows, distinct, files, peak, unique,
                 ("exact" if exact else f"NOT exact (truth {unique})") + f"; {cpu:.1f} s CPU (Python process)")


def _spark() -> Any:
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master("local[2]").appName("bench_ingest")
            .config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "8").getOrCreate())


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


def _count_out(spark: Any, out: Path) -> tuple[int, int]:
    frame = spark.read.parquet(str(out))
    return frame.count(), frame.select(*KEY).distinct().count()


def run_spark_batch(spark: Any, landing: Path, work: Path, mb: float, unique: int) -> dict[str, Any]:
    out = work / "spark_batch"
    start = time.perf_counter()
    frame = _typed(spark.read.schema(_json_schema()).json(str(landing / "*" / "*" / "*")))
    frame.write.partitionBy("tenant_id", "hour").parquet(str(out))
    wall = time.perf_counter() - start
    rows, distinct = _count_out(spark, out)
    return _case("spark batch (no dedupe)", wall, mb, rows, distinct, _files_under(out), _self_peak_mib(), unique,
                 "no dedupe, no Delta commit")


def run_streaming(spark: Any, landing: Path, work: Path, mb: float, unique: int, watermark: str) -> dict[str, Any]:
    out = work / f"stream_{watermark.replace(' ', '')}"
    start = time.perf_counter()
    stream = (_typed(spark.readStream.schema(_json_schema()).option("maxFilesPerTrigger", 20)
                     .json(str(landing / "*" / "*" / "*")))
              .withWatermark("ts", watermark).dropDuplicatesWithinWatermark(["tenant_id", "event_id"]))
    query = (stream.writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(work / f"ckpt_{watermark.replace(' ', '')}"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    wall = time.perf_counter() - start
    rows, distinct = _count_out(spark, out)
    return _case(f"spark streaming dropDuplicatesWithinWatermark {watermark}", wall, mb, rows, distinct,
                 _files_under(out), _self_peak_mib(), unique, "Parquet file sink, availableNow")


def run_delta_rs(landing: Path, work: Path, mb: float, unique: int) -> dict[str, Any]:
    from deltalake import write_deltalake

    from lakeshard.config import LandingConfig
    from lakeshard.landing import list_landing_files, parse_landing_arrow

    out = work / "delta_rs"
    start = time.perf_counter()
    events, _ = parse_landing_arrow(list_landing_files(landing), limits=LandingConfig())
    write_deltalake(str(out), events.drop_columns(["attributes"]).append_column(
        "attributes", events.column("attributes")), mode="append")
    wall = time.perf_counter() - start
    distinct = events.select(KEY).group_by(KEY).aggregate([]).num_rows
    return _case("lakeshard parse + delta-rs append (no dedupe)", wall, mb, events.num_rows, distinct,
                 _files_under(out), _self_peak_mib(), unique, "parsed in this process, one write_deltalake")


def run_floor(landing: Path, work: Path, mb: float, unique: int) -> dict[str, Any]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from lakeshard.config import LandingConfig
    from lakeshard.dedupe.keyhash import key_hashes
    from lakeshard.lake.protocol.partitions import write_partitioned
    from lakeshard.landing import list_landing_files, parse_landing_arrow
    from lakeshard.tables import EVENTS_SORT_COLUMNS

    out = work / "floor"
    start, cpu = time.perf_counter(), time.process_time()
    events, _ = parse_landing_arrow(list_landing_files(landing), limits=LandingConfig())
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
    distinct = events.select(KEY).group_by(KEY).aggregate([]).num_rows
    return _case("floor: lakeshard parse + the three tables' files (no dedupe, no commit)", wall, mb, events.num_rows,
                 distinct, _files_under(out / "events"), _self_peak_mib(), unique,
                 f"CPU {cpu:.1f} s = parse {parse_cpu:.1f} s + writes {cpu - parse_cpu:.1f} s (routed, events, "
                 f"event_ids: {_files_under(out)} files); files out counts events' only")


def _earlier_cases(events: int) -> list[dict[str, Any]]:
    """Return the cases of an earlier ``ingest.json`` of the same size (kept for the cases not run again)."""
    path = RESULTS / "ingest.json"
    if not path.is_file():
        return []
    doc = json.loads(path.read_text())
    return list(doc["cases"]) if doc.get("events") == events else []


def write_results(doc: dict[str, Any]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ingest.json").write_text(json.dumps(doc, indent=1) + "\n")
    lines = [f"# Ingest: landing JSON to events ({doc['events']:,} events, {doc['landing_mb']:.0f} MB)", "",
             f"{doc['when']}, {doc['machine']}. Zone from `lakeshard generate --events {doc['events']}`: "
             f"{doc['records']:,} records, {doc['duplicates']:,} duplicates, {doc['bad']:,} malformed.", "",
             "Duplicates let through: rows out minus distinct (tenant, event, ts) keys out. Events short: true unique "
             "events minus distinct keys out (a watermark drops late events; a lenient peer accepts records lakeshard "
             "quarantines, which makes it negative).", "",
             "| case | wall s | MB/s | events/s | files out | peak RSS MiB | rows out | duplicates let through "
             "| events short | note |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for c in doc["cases"]:
        lines.append(f"| {c['case']} | {c['wall_s']} | {c['mb_per_s']} | {c['events_per_s']:,} "
                     f"| {c['files_out']:,} | {c['peak_rss_mib']:,} | {c['rows_out']:,} "
                     f"| {c['duplicates_let_through']:,} | {doc['unique_events'] - c['distinct_out']:,} "
                     f"| {c['note']} |")
    if doc.get("note"):
        lines += ["", str(doc["note"])]
    lines += ["", "Peak RSS is the CLI process's own for `lakeshard ingest`, this Python process's for the others (the "
                  "Spark JVM of the Spark cases is not counted)."]
    (RESULTS / "ingest.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(9, 0.6 * len(doc["cases"]) + 1.2))
    names = [c["case"] for c in doc["cases"]]
    ax.barh(names, [c["mb_per_s"] for c in doc["cases"]], color="#4a7")
    ax.invert_yaxis()
    ax.set_xlabel("MB/s of landing JSON (higher is better)")
    ax.set_title(f"Ingest, {doc['events']:,} events, {doc['landing_mb']:.0f} MB")
    fig.tight_layout()
    fig.savefig(RESULTS / "ingest.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--tenants", type=int, default=200)
    parser.add_argument("--skip-streaming", action="store_true", help="leave out the two streaming cases")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--cases", default="cli,batch,streaming,deltars,floor",
                        help="which cases to run; the others keep their figures from an earlier ingest.json of the "
                             "same --events")
    parser.add_argument("--landing", default=None, help="an existing zone of `lakeshard generate --events N` to use")
    args = parser.parse_args()
    chosen = set(args.cases.split(","))
    work = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    landing = Path(args.landing) if args.landing else work / "landing"
    try:
        if args.landing is None:
                subprocess.run([sys.executable, "-m", "lakeshard.app.cli", "generate", "--landing", str(landing),
                            "--lakehouse", str(work / "unused"), "--events", str(args.events), "--tenants",
                            str(args.tenants),
                            "--quiet"], check=True)
        from lakeshard.synth.manifest import read_manifest

        manifest = read_manifest(landing)
        mb = _landing_bytes(landing) / 1e6
        unique = manifest.unique_events
        earlier = _earlier_cases(args.events)
        cases: list[dict[str, Any]] = []
        if "cli" in chosen:
            cases.append(run_cli(landing, work, mb, unique))
            print(json.dumps(cases[-1]), flush=True)
        if chosen & {"batch", "streaming"}:
            spark = _spark()
            if "batch" in chosen:
                cases.append(run_spark_batch(spark, landing, work, mb, unique))
                print(json.dumps(cases[-1]), flush=True)
            if "streaming" in chosen and not args.skip_streaming:
                for watermark in ("6 hours", "15 minutes"):
                    cases.append(run_streaming(spark, landing, work, mb, unique, watermark))
                    print(json.dumps(cases[-1]), flush=True)
            spark.stop()
        if "deltars" in chosen:
            cases.append(run_delta_rs(landing, work, mb, unique))
            print(json.dumps(cases[-1]), flush=True)
        if "floor" in chosen:
            cases.append(run_floor(landing, work, mb, unique))
            print(json.dumps(cases[-1]), flush=True)
        ran = {c["case"] for c in cases}
        cases = [c for c in earlier if c["case"] not in ran] + cases
        doc = {"when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
               "machine": f"{platform.machine()}, {os.cpu_count()} cores", "events": args.events,
               "landing_mb": round(mb, 1), "records": manifest.records, "duplicates": manifest.duplicate_records,
               "bad": manifest.bad_records, "unique_events": unique, "cases": cases}
        write_results(doc)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
