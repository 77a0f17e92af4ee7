"""Needle queries through ``spark.read.format("lakeshard")`` vs a plain ``spark.read.parquet`` of the live files.

One compacted ``events`` table is built as ``bench_compaction.py`` builds its table (Zipf services, rare values
in non-leading columns; default 2,000,000 events, 4 tenants x 2 hours, 50 writer files per bucket) and
compacted by lakeshard (sort ``service, status, env, ts``, fragment regexes). Each needle of
``bench_compaction.NEEDLES`` is then asked per tenant, ``tenant_id = '<t>' AND <column> = '<value>'``, two ways:

* **lakeshard** — ``spark.read.format("lakeshard").load(uri).where(...)``: the data source prunes by partition,
  min/max statistics and fragment regexes; files read = the data source's own pruning report (``reportPath``);
* **plain Parquet** — ``spark.read.option("basePath", uri).parquet(*live paths).where(...)``: Spark's partition
  pruning of the directories and Parquet row-group min/max filtering; files read = the scan's SQL metric
  "number of files read", from the Spark UI's REST API (``/api/v1/applications/<id>/sql?details=true``; the
  session is started with ``spark.ui.enabled``). Next to it, the number of those files whose footer min/max
  (some row group's) admits the needle: what row-group pruning leaves to decode.

Both sides collect the matching rows (checked equal). Wall time is the median of ``--repeat`` runs per
needle and side, alternating; one warm-up query first. Writes ``bench/results/needles.{json,md,png}``.

    .venv/bin/python -m bench.bench_needles [--events 2000000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq

from bench.bench_compaction import NEEDLES, build_table, say
from lakeshard.compaction import CompactionSettings, Compactor, LocalityPlanner, SizeTieredPlanner
from lakeshard.config import load_config
from lakeshard.lake import FileInfo, open_store
from lakeshard.query import register_lakeshard_source
from lakeshard.runtime import local_spark_conf

RESULTS = Path(__file__).resolve().parent / "results"


def _spark(driver_memory: str, ui_port: int) -> Any:
    from pyspark.sql import SparkSession

    cfg = load_config(overrides={"spark": {"master": "local[2]", "shuffle_partitions": 4,
                                           "driver_memory": driver_memory, "adapter": "embedded"}})
    conf = {**local_spark_conf(cfg), "spark.ui.enabled": "true", "spark.ui.port": str(ui_port),
            # partition directories as strings (tenant ids, hours), as the Delta schema has them
            "spark.sql.sources.partitionColumnTypeInference.enabled": "false"}
    return SparkSession.builder.master("local[2]").config(map=conf).getOrCreate(), cfg


def _rest(spark: Any, path: str) -> Any:
    url = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}/{path}"
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


def _last_execution_id(spark: Any) -> int:
    executions = _rest(spark, "sql?details=false&length=100000")
    return max((int(e["id"]) for e in executions), default=-1)


def _files_read_metric(spark: Any, after: int) -> int | None:
    """Return the "number of files read" summed over the Parquet scans of the SQL executions after ``after``
    (waiting for the UI's listener to record them), or None when no scan reports it."""
    for _ in range(50):
        executions = [e for e in _rest(spark, "sql?details=true&length=100000") if int(e["id"]) > after]
        if executions and all(e.get("status") == "COMPLETED" for e in executions):
            total, seen = 0, False
            for e in executions:
                for node in e.get("nodes", []):
                    if not str(node.get("nodeName", "")).startswith("Scan parquet"):
                        continue
                    for metric in node.get("metrics", []):
                        if metric.get("name") == "number of files read":
                            total += int(str(metric["value"]).replace(",", ""))
                            seen = True
            if seen:
                return total
        time.sleep(0.2)
    return None


def _footer_admits(path: str, column: str, value: str) -> bool:
    meta = pq.ParquetFile(path).metadata
    at = meta.schema.to_arrow_schema().get_field_index(column)
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(at).statistics
        if stats is None or not stats.has_min_max or stats.min <= value <= stats.max:
            return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--tenants", type=int, default=4)
    parser.add_argument("--hours", type=int, default=2)
    parser.add_argument("--files", type=int, default=50, help="writer files per bucket before compaction")
    parser.add_argument("--target-rows", type=int, default=25_000, help="rows per compacted file")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--driver-memory", default="1g")
    parser.add_argument("--ui-port", type=int, default=4050)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    say("starting Spark with the UI on ...")
    spark, cfg = _spark(args.driver_memory, args.ui_port)
    store = open_store(spark, cfg)
    register_lakeshard_source(spark)
    work = Path(tempfile.mkdtemp(prefix="lakeshard-bench-needles-"))
    uri = str(work / "events")
    say(f"writing {args.events:,} events as {args.tenants * args.hours * args.files} writer files ...")
    build_table(store, uri, args.events, args.tenants, args.hours, args.files, args.seed)
    settings = CompactionSettings(
        size_tiered=SizeTieredPlanner(min_files=32, target_rows=args.target_rows, base_rows=args.target_rows // 64,
                                      growth=4),
        locality=LocalityPlanner(target_rows=args.target_rows, growth=4), max_retries=3)
    say("compacting ...")
    Compactor(store, uri, settings=settings).run(apply=True)
    live: list[FileInfo] = store.files(uri)
    paths = [f"{uri}/{unquote(f.path)}" for f in live]
    report_path = work / "report.json"

    def lakeshard(where: str) -> tuple[list[Any], int]:
        df = spark.read.format("lakeshard").option("reportPath", str(report_path)).load(uri).where(where)
        rows = df.select("event_id").collect()
        return rows, len(json.loads(report_path.read_text())["read"])

    def plain(where: str) -> tuple[list[Any], int | None]:
        before = _last_execution_id(spark)
        rows = spark.read.option("basePath", uri).parquet(*paths).where(where).select("event_id").collect()
        return rows, _files_read_metric(spark, before)

    lakeshard("tenant_id = 'tenant-0' AND env = 'prod'")  # warm-up: Python workers, the JIT, the file cache
    plain("tenant_id = 'tenant-0' AND env = 'prod'")
    needles = []
    for column, value, what in NEEDLES:
        times: dict[str, list[float]] = {"lakeshard": [], "plain": []}
        files = {"lakeshard": 0, "plain": 0}
        counted = True
        rows_out = 0
        for _ in range(args.repeat):
            for t in range(args.tenants):
                where = f"tenant_id = 'tenant-{t}' AND {column} = '{value}'"
                t0 = time.perf_counter()
                ours, read_ours = lakeshard(where)
                t1 = time.perf_counter()
                theirs, read_theirs = plain(where)
                t2 = time.perf_counter()
                if sorted(r[0] for r in ours) != sorted(r[0] for r in theirs):
                    raise SystemExit(f"{where}: lakeshard {len(ours)} rows, plain Parquet {len(theirs)}")
                times["lakeshard"].append(t1 - t0)
                times["plain"].append(t2 - t1)
                if _ == 0:
                    files["lakeshard"] += read_ours
                    counted = counted and read_theirs is not None
                    files["plain"] += read_theirs or 0
                    rows_out += len(ours)
        admits = sum(_footer_admits(f"{uri}/{unquote(f.path)}", column, value) for f in live)  # every tenant's
        # per query (one tenant): the median over repeats x tenants; files summed over tenants
        row = {"predicate": f"{column}={value}", "what": what, "rows": rows_out,
               "files_lakeshard": files["lakeshard"], "files_plain_metric": files["plain"] if counted else None,
               "files_plain_footer_admits": admits,
               "wall_lakeshard_s": round(statistics.median(times["lakeshard"]), 4),
               "wall_plain_s": round(statistics.median(times["plain"]), 4)}
        say(json.dumps(row))
        needles.append(row)
    summary = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": platform.platform(),
               "cpus": os.cpu_count(), "events": args.events, "tenants": args.tenants, "hours": args.hours,
               "live_files": len(live), "target_rows": args.target_rows, "repeat": args.repeat, "needles": needles}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "needles.json").write_text(json.dumps(summary, indent=2) + "\n")
    (RESULTS / "needles.md").write_text(_markdown(summary))
    _plot(summary, RESULTS / "needles.png")
    print(_markdown(summary))
    spark.stop()


def _markdown(s: dict[str, Any]) -> str:
    lines = [
        "# Needle queries: the lakeshard data source vs plain Parquet", "",
        f"`bench/bench_needles.py`: {s['events']:,} events, {s['tenants']} tenants x {s['hours']} hours, compacted by "
        f"lakeshard into {s['live_files']} live files (target {s['target_rows']:,} rows). Each needle is asked once "
        "per tenant (`tenant_id = '<t>' AND <column> = '<value>'`), collecting the matching rows (equal on both "
        "sides). Files read are summed over the tenants; wall time is the median per query over "
        f"{s['repeat']} rounds x {s['tenants']} tenants, the two sides alternating. {s['cpus']} CPUs, shared; "
        f"{s['when']}.", "",
        "- **lakeshard**: `spark.read.format(\"lakeshard\")`, files read from its pruning report (partition, "
        "min/max, regex).",
        "- **plain**: `spark.read.option(\"basePath\", uri).parquet(*live files)`, Spark's partition pruning and "
        "Parquet row-group min/max; files read = the scan's SQL metric \"number of files read\" (Spark UI REST "
        "API); *footer admits* = how many of the tenants' files have a row group whose min/max admits the value "
        "(what row-group filtering leaves to decode).", "",
        "| needle | what | rows (all tenants) | files read, lakeshard | files read, plain (Spark metric) "
        "| plain: footer admits | wall lakeshard (s) | wall plain (s) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n in s["needles"]:
        metric = "n/a" if n["files_plain_metric"] is None else n["files_plain_metric"]
        lines.append(f"| `{n['predicate']}` | {n['what']} | {n['rows']} | {n['files_lakeshard']} | {metric} | "
                     f"{n['files_plain_footer_admits']} | {n['wall_lakeshard_s']} | {n['wall_plain_s']} |")
    return "\n".join([*lines, ""])


def _plot(s: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n["predicate"] for n in s["needles"]]
    x = range(len(names))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    axes[0].bar([i - 0.27 for i in x], [n["files_lakeshard"] for n in s["needles"]], 0.27, label="lakeshard")
    axes[0].bar(list(x), [n["files_plain_metric"] or 0 for n in s["needles"]], 0.27, label="plain (Spark metric)")
    axes[0].bar([i + 0.27 for i in x], [n["files_plain_footer_admits"] for n in s["needles"]], 0.27,
                label="plain: footer admits")
    axes[0].set_ylabel("files read (all tenants)")
    axes[1].bar([i - 0.2 for i in x], [n["wall_lakeshard_s"] for n in s["needles"]], 0.4, label="lakeshard")
    axes[1].bar([i + 0.2 for i in x], [n["wall_plain_s"] for n in s["needles"]], 0.4, label="plain Parquet")
    axes[1].set_ylabel("seconds per query (median)")
    for ax in axes:
        ax.set_xticks(list(x), names, rotation=45, ha="right")
        ax.legend()
    fig.suptitle("Needle queries: lakeshard data source vs spark.read.parquet")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
