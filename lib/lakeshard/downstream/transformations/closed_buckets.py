"""lakeshard downstream (Lakeflow Declarative Pipeline): the events feed and one summary row per closed bucket.

Configuration keys (the bundle's ``downstream`` pipeline sets them; locally ``write_local_spec`` does):
``lakeshard.events_table`` and ``lakeshard.buckets_table`` name the sources; on Databricks
``bundle.sourcePath`` is the bundle's ``lib`` folder, put on ``sys.path`` so the library imports.
"""

import sys

from pyspark import pipelines as dp
from pyspark.sql import DataFrame, SparkSession

spark = SparkSession.active()
_source = spark.conf.get("bundle.sourcePath", "") or ""
if _source and _source not in sys.path:
    sys.path.insert(0, _source)

from lakeshard.downstream import (  # noqa: E402 (the library is on sys.path only from here)
    BUCKETS_TABLE_KEY,
    EVENTS_TABLE_KEY,
    closed_bucket_summary,
    closed_buckets,
    configured_table,
    read_source,
    stream_events,
)


@dp.table(comment="lakeshard's events, each exactly once, as a streaming table")
def events_feed() -> DataFrame:
    return stream_events(spark, configured_table(spark, EVENTS_TABLE_KEY))


@dp.materialized_view(comment="per closed (tenant, hour) bucket: events, bytes, late events, time range")
def closed_bucket_events() -> DataFrame:
    return closed_bucket_summary(spark.read.table("events_feed"),
                                 closed_buckets(read_source(spark, configured_table(spark, BUCKETS_TABLE_KEY))))
