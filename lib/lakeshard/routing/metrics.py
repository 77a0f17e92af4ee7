"""``routing_metrics`` rows of a routed batch: events and bytes per window, tenant and shard (autosharder input).

One function per engine, side by side, giving the same rows for the same batch.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["arrow_metrics", "spark_metrics"]


def arrow_metrics(routed: pa.Table, batch: int) -> pa.Table:
    """Return the metrics rows of batch ``batch`` from its routed rows as Arrow."""
    metrics = (routed.group_by(["window_start", "tenant_id", "shard"], use_threads=False)
               .aggregate([([], "count_all"), ("size_bytes", "sum")])
               .rename_columns(["window_start", "tenant_id", "shard", "events", "bytes"]))
    return (metrics.append_column("batch", pa.array([batch] * metrics.num_rows, pa.int64()))
            .append_column("routed_at", pa.array([datetime.now(UTC)] * metrics.num_rows,
                                                 pa.timestamp("us", tz="UTC"))))


def spark_metrics(routed: DataFrame, batch: int) -> DataFrame:
    """Return the metrics rows of batch ``batch`` from its routed rows as a Spark DataFrame (one partition)."""
    from pyspark.sql import functions as F

    return (routed.groupBy("window_start", "tenant_id", "shard")
            .agg(F.count(F.lit(1)).alias("events"), F.sum("size_bytes").cast("long").alias("bytes"))
            .withColumn("batch", F.lit(batch).cast("long"))
            .withColumn("routed_at", F.lit(datetime.now(UTC)))
            .coalesce(1))
