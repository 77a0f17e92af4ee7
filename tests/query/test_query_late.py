"""Two views of late events: a query over a time range returns every event whose ``ts`` is in it (event time),
while consumers of closed buckets read each event once, in the bucket it landed in (arrival)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyspark.sql.datasource
import pytest
from pyspark.sql import DataFrame, SparkSession

from lakeshard.buckets import Completionist, assign_buckets
from lakeshard.buckets.planner import hour_of
from lakeshard.config import LakeshardConfig, load_config
from lakeshard.lake import TableStore
from lakeshard.query import read_events
from lakeshard.tables import EVENTS_PARTITIONING, parse_hour

QUIET, GRACE = timedelta(minutes=10), timedelta(minutes=15)


@pytest.fixture()
def lakehouse(store: TableStore, tmp_path: Path) -> LakeshardConfig:
    """Return a lakehouse with an empty ``events`` table and no landing backlog."""
    from lakeshard.tables.schemas import EVENTS_SCHEMA

    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": str(tmp_path / "no-landing")},
                      env={})
    store.create(cfg.table_uri("events"), EVENTS_SCHEMA, partition_by=EVENTS_PARTITIONING)
    return cfg


def _events(spark: SparkSession, tenant: str, hour: str, prefix: str, n: int) -> DataFrame:
    from lakeshard.tables.schemas import EVENTS_SCHEMA

    start = parse_hour(hour)
    rows = [{"tenant_id": tenant, "event_id": f"{prefix}-{i}", "ts": start + timedelta(seconds=80 * i + 1),
             "service": "api", "status": "info", "env": "prod", "size_bytes": 100, "shard": 0, "routed_version": 1,
             "hour": hour} for i in range(n)]
    incoming = [f.name for f in EVENTS_SCHEMA.fields if f.name not in ("hour", "late")]
    return spark.createDataFrame(rows, EVENTS_SCHEMA).select(*incoming)


def _write(store: TableStore, cfg: LakeshardConfig, c: Completionist, df: DataFrame, now: datetime) -> None:
    """What the shard writer does: bucket the batch against the closed set, then append it."""
    store.append(cfg.table_uri("events"), assign_buckets(df, c.closed(), now).coalesce(1))


def test_a_late_event_is_in_the_query_over_its_true_hour_and_once_in_the_bucket_it_landed_in(
        spark: SparkSession, store: TableStore, lakehouse: LakeshardConfig) -> None:
    cfg, uri = lakehouse, lakehouse.table_uri("events")
    now = datetime.now(UTC) + QUIET + timedelta(minutes=1)
    c = Completionist(spark, store, cfg, quiet=QUIET, grace=GRACE, clock=lambda: now)
    hour = hour_of(datetime.now(UTC) - timedelta(hours=3))
    start, end = parse_hour(hour), parse_hour(hour) + timedelta(hours=1)
    _write(store, cfg, c, _events(spark, "acme", hour, "on-time", 40), now)
    _write(store, cfg, c, _events(spark, "acme", hour_of(now), "later", 5), now)  # on time in a later hour
    closed = c.run().closed
    assert [(s.tenant_id, s.hour, s.rows) for s in closed] == [("acme", hour, 40)]
    consumer_view = [(s.tenant_id, s.hour, s.checksum, s.rows) for s in c.closed_buckets()]

    _write(store, cfg, c, _events(spark, "acme", hour, "late", 1), now)  # its own hour is closed now

    df, report = read_events(spark, store, uri, tenant="acme", start=start, end=end)
    assert df.count() == 41, report.render()
    assert df.where("late").collect()[0]["event_id"] == "late-0"
    assert report.late_candidates == 1  # the later hour's on-time file is pruned by its time statistics
    assert read_events(spark, store, uri, tenant="acme", start=start, end=end,
                       predicates={"service": "api"})[0].count() == 41
    # The arrival view: the closed bucket is unchanged and the late event is once in the bucket it landed in.
    assert [(s.tenant_id, s.hour, s.checksum, s.rows) for s in c.closed_buckets()] == consumer_view
    events = store.read(uri)
    assert events.where(f"hour = '{hour}'").count() == 40
    assert [r["hour"] for r in events.where("event_id = 'late-0'").collect()] == [hour_of(now)]
    # The landing hour's query by event time does not return it a second time.
    landing = parse_hour(hour_of(now))
    assert read_events(spark, store, uri, tenant="acme", start=landing,
                       end=landing + timedelta(hours=1))[0].where("event_id = 'late-0'").count() == 0


def test_the_data_source_prunes_by_a_ts_range_and_finds_a_late_event_in_a_later_hour(
        spark: SparkSession, store: TableStore, lakehouse: LakeshardConfig, tmp_path: Path) -> None:
    import json

    from lakeshard.query import register_lakeshard_source

    pushdown = hasattr(pyspark.sql.datasource, "Filter")  # the filter classes came with pushdown (Spark 4.1)
    cfg, uri = lakehouse, lakehouse.table_uri("events")
    now = datetime.now(UTC) + QUIET + timedelta(minutes=1)
    c = Completionist(spark, store, cfg, quiet=QUIET, grace=GRACE, clock=lambda: now)
    hour = hour_of(datetime.now(UTC) - timedelta(hours=3))
    start, end = parse_hour(hour), parse_hour(hour) + timedelta(hours=1)
    _write(store, cfg, c, _events(spark, "acme", hour_of(start - timedelta(hours=1)), "before", 3), now)
    _write(store, cfg, c, _events(spark, "acme", hour, "on-time", 40), now)
    _write(store, cfg, c, _events(spark, "acme", hour_of(now), "later", 5), now)  # on time in a later hour
    c.run()
    _write(store, cfg, c, _events(spark, "acme", hour, "late", 1), now)  # lands in the open bucket, hour_of(now)

    register_lakeshard_source(spark)
    report = tmp_path / "report.json"
    source = spark.read.format("lakeshard").option("reportPath", str(report)).load(uri)
    full = store.read(uri)
    for where in (f"ts >= '{start.isoformat()}' AND ts < '{end.isoformat()}'",
                  f"ts > '{(start - timedelta(seconds=1)).isoformat()}' AND ts <= '{end.isoformat()}'",
                  f"tenant_id = 'acme' AND ts BETWEEN '{start.isoformat()}' AND '{end.isoformat()}'"):
        rows = source.where(where).select("event_id", "hour").collect()
        assert sorted(r["event_id"] for r in rows) == sorted(r["event_id"] for r in full.where(where).collect())
        assert len(rows) == 41 and [r["hour"] for r in rows if r["event_id"] == "late-0"] == [hour_of(now)], where
        if not pushdown:  # Spark 4.0 pushes no filters to a Python data source: every file is read
            continue
        pruned = json.loads(report.read_text())
        # the hour before the range by its partition (or, when the range starts in it, its ts statistics), the
        # later hour's on-time file by its ts statistics; the late event's file is read
        assert (pruned["considered"], pruned["pruned_by_partition"] + pruned["pruned_by_min_max"],
                len(pruned["read"]), pruned["late_candidates"]) == (4, 2, 2, 1), (where, pruned)
        assert pruned["pruned_by_partition"] == (1 if where.startswith("ts > '") else 2), (where, pruned)
    only_before = source.where(f"ts < '{start.isoformat()}'")
    assert only_before.count() == 3 and (not pushdown or len(json.loads(report.read_text())["read"]) == 1)
