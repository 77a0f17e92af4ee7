"""The Spark peers of ``lakeshard ingest`` (:mod:`bench.bench_ingest`): what a Spark or Delta user would write instead.

Each case reads the landing zone's JSON with Spark, keeps what a partition directory can hold (the typed rows of
:func:`typed`), and writes it partitioned like ``events``:

* ``batch`` — ``spark.read.json`` + a Parquet write by (tenant, hour), no dedupe;
* ``stream-parquet-6h`` / ``stream-parquet-15min`` — Structured Streaming (file source), ``withWatermark`` on ``ts``
  and ``dropDuplicatesWithinWatermark`` on the event key, a Parquet sink, ``availableNow``;
* ``stream-delta`` — the same stream with a 6 h watermark into a Delta sink;
* ``merge`` — ``foreachBatch``: each micro-batch deduplicated on the event key, then an insert-only ``MERGE`` (SQL,
  so that it runs under Spark Connect too) into a Delta table.

With ``opts["remote"]`` (an ``sc://`` URL) a case runs over Spark Connect against that server: the shape of
serverless and databricks-connect. Otherwise it starts a local classic session the way lakeshard's own does, with
Delta's installed jars. A case's wall time leaves the session's start out.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lakeshard.tables import EVENT_KEY

__all__ = ["KEY", "SPARK_CASES", "files_under"]

KEY = list(EVENT_KEY)  # the event key (docs/design.md §2), as Spark's and pyarrow's column lists take it

Case = Callable[[Path, Path, dict[str, Any]], dict[str, Any]]
SparkRun = Callable[[Any], tuple[Path, str, str, Path | None]]


def files_under(root: Path, suffix: str = ".parquet") -> int:
    """Return how many ``suffix`` files ``root`` holds, at any depth, outside hidden and ``_`` folders."""
    return sum(1 for p in root.rglob(f"*{suffix}") if not any(part.startswith(("_", ".")) for part in p.parts))


def session(remote: str | None) -> Any:
    """Return a Spark Connect session to ``remote``, or a local classic one set up as lakeshard's own
    (``local_spark_conf``) with Delta's installed jars."""
    from pyspark.sql import SparkSession

    if remote:
        return SparkSession.builder.remote(remote).getOrCreate()
    from lakeshard.config import LakeshardConfig
    from lakeshard.errors import EnvironmentProblem
    from lakeshard.runtime import delta_jars_folder, find_java, local_spark_conf

    cfg = LakeshardConfig()
    cfg = dataclasses.replace(cfg, spark=dataclasses.replace(cfg.spark, master="local[2]", app_name="bench_ingest",
                                                             adapter="native"))
    find_java()
    conf = local_spark_conf(cfg)
    if "spark.jars" not in conf:
        raise EnvironmentProblem(f"Delta's jars: expected delta-spark's jar in {delta_jars_folder()}, found none; "
                                 "run scripts/install-delta-jars.sh or set LAKESHARD_DELTA_JARS to their folder")
    return SparkSession.builder.master(cfg.spark.master).config(map=dict(conf)).getOrCreate()


def json_schema() -> Any:
    from pyspark.sql.types import MapType, StringType, StructField, StructType

    fields = [StructField(n, StringType()) for n in ("tenant_id", "event_id", "ts", "service", "status", "env",
                                                     "host", "message")]
    return StructType([*fields, StructField("attributes", MapType(StringType(), StringType()))])


def typed(frame: Any) -> Any:
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
    return typed(spark.readStream.schema(json_schema()).option("maxFilesPerTrigger", opts["files_per_trigger"])
                 .json(_landing_glob(landing)))


def _timed_spark(run: SparkRun, opts: dict[str, Any]) -> dict[str, Any]:
    """Return the figures of ``run(spark)``, the session's start apart; ``run`` gives its output directory, format,
    note and its streaming query's checkpoint (``None`` for a batch job), whose commits count the micro-batches (a
    Connect client's query keeps no progress once it has stopped)."""
    spark = session(opts.get("remote"))
    start = time.perf_counter()
    out, fmt, note, checkpoint = run(spark)
    wall = time.perf_counter() - start
    batches = None if checkpoint is None else sum(1 for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    spark.stop()
    if batches is not None:
        note = f"{note}, {batches} micro-batches"
    if opts.get("remote"):
        note = f"{note}, under Spark Connect"
    return {"wall_s": wall, "files_out": files_under(out), "output": [fmt, str(out)], "note": note,
            "micro_batches": batches}


def case_batch(landing: Path, work: Path, opts: dict[str, Any]) -> dict[str, Any]:
    def run(spark: Any) -> tuple[Path, str, str, Path | None]:
        out = work / "spark_batch"
        frame = typed(spark.read.schema(json_schema()).json(_landing_glob(landing)))
        frame.write.partitionBy("tenant_id", "hour").parquet(str(out))
        return out, "parquet", "no dedupe, no Delta commit", None

    return _timed_spark(run, opts)


def _case_stream_parquet(watermark: str) -> Case:
    def case(landing: Path, work: Path, opts: dict[str, Any]) -> dict[str, Any]:
        def run(spark: Any) -> tuple[Path, str, str, Path | None]:
            name = watermark.replace(" ", "")
            out, checkpoint = work / f"stream_parquet_{name}", work / f"ckpt_parquet_{name}"
            query = (_stream(spark, landing, opts).withWatermark("ts", watermark)
                     .dropDuplicatesWithinWatermark(KEY).writeStream.format("parquet")
                     .partitionBy("tenant_id", "hour").option("path", str(out))
                     .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
            query.awaitTermination()
            return out, "parquet", "availableNow", checkpoint

        return _timed_spark(run, opts)

    return case


def case_stream_delta(landing: Path, work: Path, opts: dict[str, Any]) -> dict[str, Any]:
    def run(spark: Any) -> tuple[Path, str, str, Path | None]:
        out, checkpoint = work / "stream_delta", work / "ckpt_delta"
        query = (_stream(spark, landing, opts).withWatermark("ts", "6 hours").dropDuplicatesWithinWatermark(KEY)
                 .writeStream.format("delta").partitionBy("tenant_id", "hour")
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start(str(out)))
        query.awaitTermination()
        return out, "delta", "Delta sink, availableNow", checkpoint

    return _timed_spark(run, opts)


def case_merge(landing: Path, work: Path, opts: dict[str, Any]) -> dict[str, Any]:
    def run(spark: Any) -> tuple[Path, str, str, Path | None]:
        out, checkpoint = work / "merge", work / "ckpt_merge"
        schema = typed(spark.read.schema(json_schema()).json(_landing_glob(landing))).schema
        spark.createDataFrame([], schema).write.format("delta").partitionBy("tenant_id", "hour").save(str(out))
        target = f"delta.`{out}`"
        on = " AND ".join(f"t.{c} = s.{c}" for c in ("tenant_id", "hour", *(c for c in KEY if c != "tenant_id")))

        def merge(batch: Any, batch_id: int) -> None:
            # SQL, not delta-spark's DeltaTable: the same statement runs on a classic session and under Connect
            # (where foreachBatch runs this function on the server, with a session of its own).
            view = f"merge_source_{batch_id}"
            batch.dropDuplicates(KEY).createOrReplaceTempView(view)
            batch.sparkSession.sql(f"MERGE INTO {target} t USING {view} s ON {on} WHEN NOT MATCHED THEN INSERT *")

        query = (_stream(spark, landing, opts).writeStream.foreachBatch(merge)
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination()
        return out, "delta", "MERGE per micro-batch, availableNow", checkpoint

    return _timed_spark(run, opts)


SPARK_CASES: dict[str, Case] = {
    "batch": case_batch,
    "stream-parquet-6h": _case_stream_parquet("6 hours"),
    "stream-parquet-15min": _case_stream_parquet("15 minutes"),
    "stream-delta": case_stream_delta,
    "merge": case_merge,
    "stream-delta-connect": case_stream_delta,
    "merge-connect": case_merge,
}
