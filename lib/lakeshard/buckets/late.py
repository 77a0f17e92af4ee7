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
from lakeshard.tables import SPARK_HOUR_FORMAT

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame

__all__ = ["assign_buckets", "assign_buckets_arrow", "event_hour"]


def event_hour(ts: str = "ts") -> Column:
    """Return the column of the UTC hour of ``ts`` as ``YYYY-MM-DDTHH`` (the event's own bucket)."""
    from pyspark.sql import functions as F

    return F.date_format(F.col(ts), SPARK_HOUR_FORMAT)


def assign_buckets(events: DataFrame, closed: Collection[Bucket], now: datetime,
                   pairs: Collection[Bucket] | None = None) -> DataFrame:
    """Return ``events`` with ``hour`` = the bucket each row is written to and ``late`` = its own is closed.

    ``closed`` is the set of closed ``(tenant_id, hour)`` buckets (from
    :meth:`~lakeshard.buckets.Completionist.closed`, read once per writer step); ``now`` picks the open
    bucket. Rows of open buckets keep their own hour and ``late = false``. ``pairs``, when given, are the
    ``(tenant_id, own hour)`` pairs the events hold: only the closed ones among them are broadcast, so the
    broadcast grows with the batch, not with every bucket ever closed.

    Example::

        batch = assign_buckets(batch, completionist.closed(), now=datetime.now(UTC))
    """
    from pyspark.sql import functions as F

    spark = events.sparkSession
    # Every event of a closed bucket goes to the same place: its tenant's open bucket (late_target's rule).
    wanted = closed if pairs is None else {b for b in pairs if b in closed}
    targets = [(t, h, open_hour(t, now, closed)) for t, h in sorted(wanted)]
    own = event_hour()
    if not targets:
        return events.withColumn("hour", own).withColumn("late", F.lit(False))
    lookup = spark.createDataFrame(targets, "__t string, __h string, __target string")
    joined = events.withColumn("__own", own).join(
        F.broadcast(lookup), (F.col("tenant_id") == F.col("__t")) & (F.col("__own") == F.col("__h")), "left")
    return (joined.withColumn("late", F.col("__target").isNotNull())
            .withColumn("hour", F.coalesce(F.col("__target"), F.col("__own")))
            .drop("__own", "__t", "__h", "__target"))


def assign_buckets_arrow(tenant_ids: pa.Array | pa.ChunkedArray, own_hours: pa.Array | pa.ChunkedArray,
                         closed: Collection[Bucket], now: datetime) -> tuple[pa.Array, pa.Array]:
    """Return ``(hour, late)`` for events given as Arrow columns: what :func:`assign_buckets` gives in Spark.

    ``own_hours`` is each event's own UTC hour (``YYYY-MM-DDTHH``). Each distinct ``(tenant, own hour)`` pair
    is looked up once, so the cost is one dictionary encoding of the batch, not a lookup per row.

    Example::

        hour, late = assign_buckets_arrow(batch["tenant_id"], own, completionist.closed(), now=datetime.now(UTC))
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    own = own_hours.combine_chunks() if isinstance(own_hours, pa.ChunkedArray) else own_hours
    if not closed or not len(own):
        return pc.cast(own, pa.string()), pa.array(np.zeros(len(own), dtype=bool))
    # The hour is the last 13 characters of the pair: splitting from the right is unambiguous.
    pairs = pc.dictionary_encode(pc.binary_join_element_wise(tenant_ids, own, "\x00"))
    pairs = pairs.combine_chunks() if isinstance(pairs, pa.ChunkedArray) else pairs
    targets, late = [], []
    for pair in pairs.dictionary.to_pylist():
        tenant, hour = pair[:-14], pair[-13:]
        is_late = (tenant, hour) in closed
        targets.append(open_hour(tenant, now, closed) if is_late else hour)
        late.append(is_late)
    indices = pairs.indices
    return (pc.take(pa.array(targets, pa.string()), indices),
            pc.take(pa.array(late, pa.bool_()), indices))
