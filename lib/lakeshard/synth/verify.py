"""Check a table of events against a generated landing zone's ground truth, exactly, with Spark."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lakeshard.synth.manifest import EVENTS_FILE, TRUTH_DIR, landing_path

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
    truth = spark.read.parquet(f"file://{truth_path.resolve()}").select("tenant_id", "event_id", "ts_ms")
    keys = events.select("tenant_id", "event_id", F.unix_micros("ts").alias("ts_us"))
    keys = keys.withColumn("ts_ms", F.floor(F.col("ts_us") / 1000)).drop("ts_us")
    stats = keys.agg(F.count(F.lit(1)).alias("rows"), F.count_distinct("tenant_id", "event_id", "ts_ms").alias("d"))
    row = stats.first()
    rows, distinct = (int(row["rows"]), int(row["d"])) if row is not None else (0, 0)
    on = ["tenant_id", "event_id", "ts_ms"]
    distinct_keys = keys.distinct()
    missing = truth.join(distinct_keys, on, "left_anti").count()
    unexpected = distinct_keys.join(truth, on, "left_anti").count()
    return TruthCheck(
        truth_events=truth.count(), rows=rows, distinct_keys=distinct, missing=missing,
        unexpected=unexpected, duplicate_rows=rows - distinct,
    )
