"""A Lakeflow Declarative Pipeline downstream of lakeshard: ``events`` as a streaming table, and per closed
``(tenant, hour)`` bucket a summary that never sees an incomplete hour.

The pipeline's source (``transformations/closed_buckets.py``, declared with ``pyspark.pipelines``) is a thin
wrapper over the functions here; Databricks runs it as the bundle's ``downstream`` pipeline, and locally
Spark's own ``spark-pipelines`` runner runs it over Delta (:func:`write_local_spec`, :func:`local_command`).

Example::

    from lakeshard.downstream import closed_bucket_summary, closed_buckets

    summary = closed_bucket_summary(spark.read.table("main.lakeshard.events"),
                                    closed_buckets(spark.read.table("main.lakeshard.buckets")))
"""

from __future__ import annotations

from lakeshard.downstream.local import (
    BUCKETS_TABLE_KEY,
    EVENTS_TABLE_KEY,
    TRANSFORMATIONS,
    local_command,
    write_local_spec,
)
from lakeshard.downstream.summary import (
    CLOSED,
    SUMMARY_COLUMNS,
    closed_bucket_summary,
    closed_buckets,
    configured_table,
    read_source,
    stream_events,
)

__all__ = [
    "BUCKETS_TABLE_KEY",
    "CLOSED",
    "EVENTS_TABLE_KEY",
    "SUMMARY_COLUMNS",
    "TRANSFORMATIONS",
    "closed_bucket_summary",
    "closed_buckets",
    "configured_table",
    "local_command",
    "read_source",
    "stream_events",
    "write_local_spec",
]
