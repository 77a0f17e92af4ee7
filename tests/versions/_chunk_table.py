"""The small ``(tenant_id, hour)``-partitioned table shape the versions tests use (like ``events``)."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

CHUNK_TABLE_SCHEMA = StructType([
    StructField("tenant_id", StringType(), False),
    StructField("event_id", StringType(), False),
    StructField("ts", TimestampType(), False),
    StructField("value", LongType(), True),
    StructField("hour", StringType(), False),
])

Rows = Callable[..., DataFrame]


def ids(df: DataFrame) -> list[str]:
    """Return the sorted event ids of a frame."""
    return sorted(r.event_id for r in df.select("event_id").collect())
