"""Late events into open buckets: the column expression a writer applies before committing to ``events``.

A closed bucket never changes (its checksum is recorded when it closes). An event whose own hour is
closed for its tenant is written to the tenant's open bucket instead — the ``hour`` partition it lands
in — with its true ``ts`` untouched and ``late = true``, so hourly jobs that read only closed buckets
see it exactly once, in the hour it *arrived*, and anyone can still group by its event time.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import TYPE_CHECKING

from lakeshard.buckets.planner import Bucket, open_hour

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["assign_buckets", "event_hour"]


def event_hour(ts: str = "ts") -> Column:
    """Return the column of the UTC hour of ``ts`` as ``YYYY-MM-DDTHH`` (the event's own bucket)."""
    from pyspark.sql import functions as F

    return F.date_format(F.col(ts), "yyyy-MM-dd'T'HH")


def assign_buckets(events: DataFrame, closed: Collection[Bucket], now: datetime) -> DataFrame:
    """Return ``events`` with ``hour`` = the bucket each row is written to and ``late`` = its own is closed.

    ``closed`` is the set of closed ``(tenant_id, hour)`` buckets (from
    :meth:`~lakeshard.buckets.Completionist.closed`, read once per writer step); ``now`` picks the open
    bucket. Rows of open buckets keep their own hour and ``late = false``. Only the closed buckets of
    tenants present are broadcast, so the cost is one small broadcast join.

    Example::

        batch = assign_buckets(batch, completionist.closed(), now=datetime.now(UTC))
    """
    from pyspark.sql import functions as F

    spark = events.sparkSession
    # Every event of a closed bucket goes to the same place: its tenant's open bucket (late_target's rule).
    targets = [(t, h, open_hour(t, now, closed)) for t, h in sorted(closed)]
    own = event_hour()
    if not targets:
        return events.withColumn("hour", own).withColumn("late", F.lit(False))
    lookup = spark.createDataFrame(targets, "__t string, __h string, __target string")
    joined = events.withColumn("__own", own).join(
        F.broadcast(lookup), (F.col("tenant_id") == F.col("__t")) & (F.col("__own") == F.col("__h")), "left")
    return (joined.withColumn("late", F.col("__target").isNotNull())
            .withColumn("hour", F.coalesce(F.col("__target"), F.col("__own")))
            .drop("__own", "__t", "__h", "__target"))

