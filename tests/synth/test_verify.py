"""The ground-truth check counts lost, invented and repeated events exactly, whatever else the table holds."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from lakeshard.synth.manifest import EVENTS_FILE, TRUTH_DIR
from lakeshard.synth.verify import check_against_truth

HOUR_MS = 3_600_000
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _truth(landing: Path, n: int) -> list[tuple[str, str, int]]:
    keys = [(f"t{i % 3}", f"e{i}", BASE_MS + i * 1_001) for i in range(n)]
    (landing / TRUTH_DIR).mkdir(parents=True)
    pq.write_table(pa.table({"tenant_id": [k[0] for k in keys], "event_id": [k[1] for k in keys],
                             "ts_ms": pa.array([k[2] for k in keys], pa.int64())}), landing / TRUTH_DIR / EVENTS_FILE)
    return keys


@pytest.mark.parametrize(("lose", "invent", "repeat"), [(0, 0, 0), (1, 0, 0), (0, 2, 0), (0, 0, 3), (4, 1, 2)])
def test_lost_invented_and_repeated_events_are_each_counted(
    spark: SparkSession, tmp_path: Path, lose: int, invent: int, repeat: int
) -> None:
    keys = _truth(tmp_path, 40)
    kept = keys[lose:]
    # An invented event reuses a true event id under another tenant or another millisecond: only the whole key
    # (tenant, event id, ts to the millisecond) makes an event.
    invented = [("t9", keys[-1][1], keys[-1][2]), (keys[-1][0], keys[-1][1], keys[-1][2] + 1)][:invent]
    repeated = [kept[i % len(kept)] for i in range(repeat)]
    rows = kept + invented + repeated
    # Microseconds below the millisecond are truncated: the truth keeps milliseconds.
    events = spark.createDataFrame([(t, e, ts * 1000 + 999) for t, e, ts in rows], "tenant_id string, event_id string, "
                                   "ts_us long").selectExpr("tenant_id", "event_id", "timestamp_micros(ts_us) AS ts")
    check = check_against_truth(spark, events, tmp_path)
    assert (check.truth_events, check.rows, check.missing, check.unexpected, check.duplicate_rows) == (
        40, len(rows), lose, invent, repeat)
    assert check.distinct_keys == len(set(rows))
    assert check.exactly_once == (lose == invent == repeat == 0)


def test_an_empty_table_misses_every_event(spark: SparkSession, tmp_path: Path) -> None:
    _truth(tmp_path, 5)
    empty = spark.createDataFrame([], "tenant_id string, event_id string, ts timestamp")
    check = check_against_truth(spark, empty, tmp_path)
    assert (check.truth_events, check.rows, check.distinct_keys, check.missing, check.unexpected,
            check.duplicate_rows) == (5, 0, 0, 5, 0, 0)
