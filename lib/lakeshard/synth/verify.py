"""Check a table of events against a generated landing zone's ground truth, exactly, with Spark."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lakeshard.synth.manifest import EVENTS_FILE, TRUTH_DIR, landing_path
from lakeshard.tables import EVENT_KEY

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["TruthCheck", "check_against_truth"]


@dataclass(frozen=True)
class TruthCheck:
    """How a table's events compare with the ground truth, by key ``(tenant_id, event_id, ts)``."""

    truth_events: int  # unique valid events the generator wrote
    rows: int  # rows in the checked table
    distinct_keys: int
    missing: int  # truth keys absent from the table (lost events)
    unexpected: int  # table keys the truth does not know (invented or corrupted events)
    duplicate_rows: int  # rows beyond the first of each key

    @property
    def exactly_once(self) -> bool:
        """Return whether every true event is present exactly once and nothing else is."""
        return self.missing == 0 and self.unexpected == 0 and self.duplicate_rows == 0


def check_against_truth(spark: SparkSession, events: DataFrame, landing: str | Path) -> TruthCheck:
    """Return how ``events`` (with ``tenant_id``, ``event_id``, ``ts``) matches the landing zone's truth.

    Example::

        check = check_against_truth(spark, store.read(uri), "/tmp/landing")
        assert check.exactly_once
    """
    from pyspark.sql import functions as F

    truth_path = landing_path(landing) / TRUTH_DIR / EVENTS_FILE
    tenant, event, when = EVENT_KEY
    on = [tenant, event, "ts_ms"]  # the truth holds each key with its event time in milliseconds
    truth = (spark.read.parquet(f"file://{truth_path.resolve()}")
             .groupBy(*on).agg(F.count(F.lit(1)).alias("t")))
    keys = events.select(tenant, event, F.floor(F.unix_micros(when) / 1000).alias("ts_ms"))
    # One pass: each key's count on both sides, joined outer. A key only the truth has is missing, one only the
    # table has is unexpected; rows beyond a key's first are duplicates.
    n = keys.groupBy(*on).agg(F.count(F.lit(1)).alias("n"))
    both = truth.join(n, on, "full_outer")
    row = both.agg(
        F.sum("t").alias("truth"), F.sum("n").alias("rows"), F.count("n").alias("distinct"),
        F.count(F.when(F.col("n").isNull(), 1)).alias("missing"),
        F.count(F.when(F.col("t").isNull(), 1)).alias("unexpected"),
    ).first()
    got = {k: int(v or 0) for k, v in row.asDict().items()} if row is not None else {}  # a global aggregate: one row
    rows, distinct = got.get("rows", 0), got.get("distinct", 0)
    return TruthCheck(
        truth_events=got.get("truth", 0), rows=rows, distinct_keys=distinct, missing=got.get("missing", 0),
        unexpected=got.get("unexpected", 0), duplicate_rows=rows - distinct,
    )
