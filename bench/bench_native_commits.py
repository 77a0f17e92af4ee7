"""What one small commit costs on Delta's own engine (the native adapter), as the table's log grows.

Each commit appends two rows (two partitions) with one app transaction, the shape of a shard writer's or a lock's
commit. Per log length (table versions made before measuring), the median of ``--repeat`` commits of each peer on
a table of its own, the peers taking turns:

* **Delta public writer** - ``df.write.format("delta").mode("append")`` with ``txnAppId`` / ``txnVersion``, no
  lakeshard: the documented idempotent write, and what lakeshard's own public-writer path runs;
* **lakeshard append (public writer)** - ``NativeTableStore.append`` of a DataFrame (the path of every
  DataFrame append, on a classic session and under Spark Connect alike);
* **lakeshard append_arrow** - ``NativeTableStore.append_arrow`` (pyarrow writes the files, Delta's
  ``OptimisticTransaction`` commits them: a commit recorded as ``WRITE``, the app id added to the transaction's
  reads without ``txnVersion``'s state reconstruction; what the shard writers commit on a classic session);
* **lakeshard append_arrow, py4j with Nagle** - the same with Nagle's algorithm back on both ends of the py4j
  connection for its commits (py4j's default), which ``lakeshard.jvm.replies`` switches off.

Writes ``bench/results/native-commits.{json,md,png}``.

    .venv/bin/python -m bench.bench_native_commits [--lengths 10,50,100] [--repeat 8]
"""

from __future__ import annotations

import socket
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench import peer_curve

RESULTS = Path(__file__).resolve().parent / "results"
PUBLIC = "Delta public writer"
LAKESHARD_DF = "lakeshard append (public writer)"
ARROW = "lakeshard append_arrow"
NAGLE = "lakeshard append_arrow, py4j with Nagle"
PEERS = [PUBLIC, LAKESHARD_DF, ARROW, NAGLE]


def _nagle(spark: Any, on: bool) -> None:
    """Put Nagle's algorithm on (py4j's default) or off at both ends of this thread's py4j connection."""
    from lakeshard.jvm.replies import thread_runnable

    jvm = spark._jvm
    jvm._gateway_client.get_thread_connection().socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY,
                                                                  0 if on else 1)
    thread_runnable(jvm, jvm.java.lang.Thread.currentThread()).getSocket().setTcpNoDelay(not on)


def measure(lengths: list[int], repeat: int, work: Path) -> list[dict[str, Any]]:
    """Return, per log length, each peer's median commit milliseconds on its own table grown to that length."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from lakeshard.config import load_config
    from lakeshard.lake import AppTransaction, NativeTableStore
    from lakeshard.runtime import delta_jars, get_spark

    spark = get_spark(load_config(overrides={"spark": {"master": "local[2]", "adapter": "native",
                                                       "jars": delta_jars()}}))
    store = NativeTableStore(spark)
    schema = StructType([StructField("tenant_id", StringType(), False), StructField("n", LongType(), True)])
    arrow_schema = pa.schema([pa.field("tenant_id", pa.string(), False), pa.field("n", pa.int64())])
    tables = {peer: str(work / f"t{i}") for i, peer in enumerate(PEERS)}
    for uri in tables.values():
        store.create(uri, schema, partition_by=["tenant_id"])
    versions = dict.fromkeys(PEERS, 0)  # each table's app transaction version (= its table version here)

    def public(uri: str, version: int) -> None:
        spark.createDataFrame([("a", version), ("b", version)], schema).write.format("delta").mode("append") \
            .option("txnAppId", "bench/1").option("txnVersion", version).save(uri)

    def lakeshard_df(uri: str, version: int) -> None:
        store.append(uri, spark.createDataFrame([("a", version), ("b", version)], schema),
                     app_transactions=[AppTransaction("bench/1", version)])

    def arrow(uri: str, version: int) -> None:
        store.append_arrow(uri, pa.table({"tenant_id": ["a", "b"], "n": [version, version]}, schema=arrow_schema),
                           app_transactions=[AppTransaction("bench/1", version)])

    def with_nagle(uri: str, version: int) -> None:
        _nagle(spark, True)
        try:
            arrow(uri, version)
        finally:
            _nagle(spark, False)

    commits: dict[str, Callable[[str, int], None]] = {PUBLIC: public, LAKESHARD_DF: lakeshard_df, ARROW: arrow,
                                                      NAGLE: with_nagle}

    def commit(peer: str) -> float:
        versions[peer] += 1
        started = time.perf_counter()
        commits[peer](tables[peer], versions[peer])
        return time.perf_counter() - started

    rows = []
    for length in lengths:
        grow_started = time.perf_counter()
        for peer in PEERS:  # grown on the fast path: the log's length is what matters, not who wrote it
            while versions[peer] < length:
                versions[peer] += 1
                arrow(tables[peer], versions[peer])
        times: dict[str, list[float]] = {peer: [] for peer in PEERS}
        for _ in range(repeat):
            for peer in PEERS:
                times[peer].append(commit(peer))
        row: dict[str, Any] = {"log_commits": length}
        row.update({peer: round(statistics.median(ts) * 1000, 1) for peer, ts in times.items()})
        row["means_ms"] = {peer: round(statistics.fmean(ts) * 1000, 1) for peer, ts in times.items()}
        row["arrow_over_public"] = round(row[ARROW] / row[PUBLIC], 3)
        row["nagle_over_arrow"] = round(row[NAGLE] / row[ARROW], 3)
        row["rows"] = {peer: spark.read.format("delta").load(uri).count() for peer, uri in tables.items()}
        rows.append(row)
        print(f"{length:>4} commits (grown in {time.perf_counter() - grow_started:.0f}s):"
              + "".join(f" {peer} {row[peer]} ms;" for peer in PEERS), flush=True)
    return rows


def render_md(doc: dict[str, Any]) -> str:
    lines = [
        "# One small commit on Delta's own engine (`bench_native_commits.py`)", "",
        f"{doc['machine']}; {doc['date']}; Spark local[2], delta-spark from `make env`. Median of {doc['repeat']} "
        "commits per log length and peer, the peers taking turns, each on a table of its own (milliseconds; a "
        "commit of two rows in two partitions with one app transaction; checkpoints every 10 commits fall inside "
        "some of them, so the means in the JSON are higher). **Delta public writer**: `df.write` with `txnAppId`, "
        "no lakeshard. **lakeshard append (public writer)**: `NativeTableStore.append` of a DataFrame. "
        "**lakeshard append_arrow**: files by pyarrow, Delta's `OptimisticTransaction` commits them as `WRITE`, the "
        "app id read without `txnVersion`. **…, py4j with Nagle**: the same with py4j's default sockets.", "",
        "| log commits | Delta public writer | lakeshard append (public writer) | lakeshard append_arrow | "
        "append_arrow, py4j with Nagle | append_arrow / public writer | with Nagle / without |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [f"| {r['log_commits']} | {r[PUBLIC]} | {r[LAKESHARD_DF]} | {r[ARROW]} | {r[NAGLE]} | "
              f"**{r['arrow_over_public']}** | {r['nagle_over_arrow']} |" for r in doc["rows"]]
    lines += ["", *peer_curve.growth_lines(doc["rows"], "log_commits", PEERS, "commits in the log"), "",
              "Where the public writer's time goes: a Spark job writing the rows, and Delta's `txnVersion` "
              "recomputing the table's state to answer the app id's version (a Spark job over the log); "
              "`append_arrow` writes in this process and reads the version from lakeshard's own replay of the "
              "log. The public writers get faster over the first versions as the JVM warms up; the lengths run "
              "in ascending order."]
    return "\n".join(lines) + "\n"


def main() -> int:
    return peer_curve.main(__doc__ or "", sizes_flag="lengths", sizes="10,50,100",
                           sizes_help="table versions to measure at, ascending", repeat=8, name="native-commits",
                           results=RESULTS, measure=measure, render_md=render_md, x="log_commits", peers=PEERS,
                           xlabel="table versions", ylabel="median commit (ms)",
                           title="One small commit on Delta's engine")


if __name__ == "__main__":
    raise SystemExit(main())
