"""Closed buckets never change: late events go to the open bucket, flagged, with their true time.

These tests drive :func:`assign_buckets` through a small simulated writer (many rounds, cheaply); the real
shard writer's wiring is tested in ``tests/dedupe/test_writer.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, StringType, StructField, StructType, TimestampType

from lakeshard.buckets import Completionist, assign_buckets, assign_buckets_arrow, late_target
from lakeshard.buckets.planner import hour_of
from lakeshard.config import LakeshardConfig, load_config
from lakeshard.lake import TableStore

QUIET, GRACE = timedelta(minutes=10), timedelta(minutes=15)
EVENTS_WITH_LATE = StructType([
    StructField("tenant_id", StringType(), False),
    StructField("event_id", StringType(), False),
    StructField("ts", TimestampType(), False),
    StructField("message", StringType(), True),
    StructField("hour", StringType(), False),
    StructField("late", BooleanType(), True),
])
INCOMING = "tenant_id string, event_id string, ts timestamp, message string"


class Clock:
    """A movable UTC clock, starting just past the quiet period of anything written now."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC) + QUIET + timedelta(minutes=1)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture()
def simulated(store: TableStore, tmp_path: Path) -> LakeshardConfig:
    """Return a lakehouse with an empty events table (with ``late``) and no landing backlog."""
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": str(tmp_path / "no-landing")},
                      env={})
    store.create(cfg.table_uri("events"), EVENTS_WITH_LATE, partition_by=["tenant_id", "hour"])
    return cfg


def _incoming(spark: SparkSession, tenant: str, hour: str, prefix: str, n: int) -> DataFrame:
    start = datetime.strptime(hour, "%Y-%m-%dT%H").replace(tzinfo=UTC)
    rows = [(tenant, f"{prefix}-{i}", start + timedelta(minutes=7 * i), f"m{i}") for i in range(n)]
    return spark.createDataFrame(rows, INCOMING)


def _write(store: TableStore, cfg: LakeshardConfig, c: Completionist, df: DataFrame, now: datetime) -> DataFrame:
    """What the wired writer does: bucket the batch against the closed set, then append it."""
    assigned = assign_buckets(df, c.closed(), now).coalesce(1)
    store.append(cfg.table_uri("events"), assigned)
    return assigned


def test_checksums_of_closed_buckets_never_change_while_late_events_keep_arriving(
    spark: SparkSession, store: TableStore, simulated: LakeshardConfig
) -> None:
    cfg, clock = simulated, Clock()
    c = Completionist(spark, store, cfg, quiet=QUIET, grace=GRACE, clock=clock)
    hour = hour_of(datetime.now(UTC) - timedelta(hours=3))
    on_time = _incoming(spark, "acme", hour, "on-time", 6).unionByName(_incoming(spark, "zeta", hour, "z", 4))
    _write(store, cfg, c, on_time, clock.now)
    first = c.run()
    assert {(s.tenant_id, s.hour) for s in first.closed} == {("acme", hour), ("zeta", hour)}
    recorded = {(s.tenant_id, s.hour): (s.checksum, s.rows) for s in first.closed}
    assert recorded[("acme", hour)][1] == 6

    for n in range(2):  # rounds of skewed events of the closed hour, 40 minutes apart
        clock.now += timedelta(minutes=40)
        late = _incoming(spark, "acme", hour, f"late{n}", 3)
        rows = _write(store, cfg, c, late, clock.now).collect()
        for r in rows:
            assert r["late"] and (r["hour"], True) == late_target("acme", r["ts"], c.closed(), clock.now)
            assert hour_of(r["ts"]) == hour  # the true event time is kept
        c.run()  # may close the hours the late events went to, once they are quiet and past
        assert c.verify() == []
        now_states = {k: (s.checksum, s.rows) for k, s in c.states().items() if k in recorded}
        assert now_states == recorded

    events = store.read(cfg.table_uri("events"))
    assert events.where("late").count() == 6 and events.where(f"hour = '{hour}'").count() == 10
    assert events.where(f"late AND hour = '{hour}'").count() == 0

    # The check can fail: a writer that ignored the closure and wrote into the closed hour is caught.
    rogue = _incoming(spark, "acme", hour, "rogue", 1).withColumn("hour", F.lit(hour)).withColumn("late", F.lit(False))
    store.append(cfg.table_uri("events"), rogue)
    broken = c.verify()
    assert [(s.tenant_id, s.hour) for s, _ in broken] == [("acme", hour)] and broken[0][1].rows == 7


def test_two_completionists_deciding_from_the_same_state_close_each_bucket_once(
    spark: SparkSession, store: TableStore, simulated: LakeshardConfig
) -> None:
    cfg, clock = simulated, Clock()
    a = Completionist(spark, store, cfg, quiet=QUIET, grace=GRACE, clock=clock)
    hour = hour_of(datetime.now(UTC) - timedelta(hours=2))
    _write(store, cfg, a, _incoming(spark, "acme", hour, "e", 3), clock.now)
    a.ensure_table()
    read_version = store.version(a.uri)
    report = a.run()
    # A close is two commits: "closing" (read_version + 1), then "closed" after the fence (read_version + 2).
    assert report.committed_version == read_version + 2 and len(report.closed) == 1
    # A second completionist that read the same buckets version carries the same app transaction: it loses.
    b = Completionist(spark, store, cfg, quiet=QUIET, grace=GRACE, clock=clock)
    assert b._commit(report.closed, read_version) is None
    assert store.read(a.uri).where("state = 'closed'").count() == 1



_HOURS = [f"2026-01-01T{h:02d}" for h in range(6)]


@settings(max_examples=60)
@given(rows=st.lists(st.tuples(st.sampled_from(["a", "b", "c\x00d", "é"]), st.sampled_from(_HOURS)), max_size=40),
       closed=st.sets(st.tuples(st.sampled_from(["a", "b", "c\x00d", "é"]), st.sampled_from(_HOURS)), max_size=12))
def test_arrow_bucket_assignment_equals_late_target_row_by_row(rows: list[tuple[str, str]],
                                                              closed: set[tuple[str, str]]) -> None:
    """The writer's driver path assigns buckets with :func:`assign_buckets_arrow`: the same rule per row."""
    import pyarrow as pa

    now = datetime(2026, 1, 1, 3, 30, tzinfo=UTC)
    hour, late = assign_buckets_arrow(pa.array([t for t, _ in rows], pa.string()),
                                      pa.array([h for _, h in rows], pa.string()), closed, now)
    expected = [late_target(t, datetime.strptime(h, "%Y-%m-%dT%H").replace(tzinfo=UTC), closed, now)
                for t, h in rows]
    assert list(zip(hour.to_pylist(), late.to_pylist(), strict=True)) == expected
