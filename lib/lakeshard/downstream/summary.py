"""Return the downstream pipeline's datasets as DataFrames: the events feed and the closed buckets' summary."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["CLOSED", "SUMMARY_COLUMNS", "closed_bucket_summary", "closed_buckets", "configured_table",
           "read_source", "stream_events"]

CLOSED = "closed"  # the buckets table's final state (lakeshard.buckets.completionist): the hour is complete
SUMMARY_COLUMNS = ("tenant_id", "hour", "events", "bytes", "late_events", "first_ts", "last_ts")


def configured_table(spark: SparkSession, key: str) -> str:
    """Return the source the pipeline's configuration gives under ``key``: a table name, or a Delta table's path.

    Raises:
        ConfigError: the pipeline configuration does not set ``key``.
    """
    from lakeshard.errors import ConfigError

    name = spark.conf.get(key, "") or ""
    if not name:
        raise ConfigError(f"pipeline configuration {key}: expected the name of a lakeshard table, found nothing "
                          "(the bundle's downstream pipeline and write_local_spec set it)")
    return name


def _is_path(source: str) -> bool:
    return "/" in source  # a URI or a file path; catalog names never hold a slash


def read_source(spark: SparkSession, source: str) -> DataFrame:
    """Return the Delta table ``source`` names (a catalog table, or a path as a local run gives it)."""
    return spark.read.format("delta").load(source) if _is_path(source) else spark.read.table(source)


def stream_events(spark: SparkSession, source: str) -> DataFrame:
    """Return ``source`` (lakeshard's ``events``, by name or path) as a stream of the events each commit appends.

    Compaction rewrites files without changing rows; ``skipChangeCommits`` lets the stream pass over those
    commits instead of failing on them, and since lakeshard never updates or deletes an event, no row is lost.
    """
    reader = spark.readStream.format("delta").option("skipChangeCommits", "true")
    return reader.load(source) if _is_path(source) else reader.table(source)


def closed_buckets(buckets: DataFrame) -> DataFrame:
    """Return the ``(tenant_id, hour)`` pairs of ``buckets`` (lakeshard's bucket state table) that are closed."""
    from pyspark.sql import functions as F

    return buckets.where(F.col("state") == CLOSED).select("tenant_id", "hour").distinct()


def closed_bucket_summary(events: DataFrame, closed: DataFrame) -> DataFrame:
    """Return one row per closed bucket: its events, bytes, late events and time range (:data:`SUMMARY_COLUMNS`).

    Only events of the buckets in ``closed`` count, so a row describes a complete hour and never changes; an
    open hour appears once the completionist has closed it.
    """
    from pyspark.sql import functions as F

    return (events.join(closed, ["tenant_id", "hour"], "left_semi")
            .groupBy("tenant_id", "hour")
            .agg(F.count(F.lit(1)).alias("events"),
                 F.sum(F.col("size_bytes").cast("long")).alias("bytes"),
                 F.sum(F.when(F.col("late"), 1).otherwise(0)).cast("long").alias("late_events"),
                 F.min("ts").alias("first_ts"),
                 F.max("ts").alias("last_ts"))
            .select(*SUMMARY_COLUMNS))
