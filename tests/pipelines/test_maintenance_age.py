"""What an hourly maintenance run costs must not grow with the lakehouse's age: the ``buckets`` table gains a row
per (tenant, hour) decision for as long as the lakehouse lives (12,000 a day at 500 tenants), and the ``events``
table a bucket per (tenant, hour); a run's Python work stays with the buckets still open."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from lakeshard.buckets import Completionist
from lakeshard.compaction.planner import SizeTieredPlanner
from lakeshard.compaction.scope import compaction_scope, record_compacted
from lakeshard.config import LakeshardConfig
from lakeshard.lake import FileInfo, TableStore
from lakeshard.pipelines import run_pipeline
from lakeshard.synth import SynthSpec, generate_landing
from lakeshard.tables import BUCKETS, hour_of

_QUIET = {"bad_rate": 0.0, "late_rate": 0.0, "burst_tenants": 0, "hours": 0.1}


def _old_closed_buckets(store: TableStore, cfg: LakeshardConfig, start: datetime, tenants: int, hours: int) -> int:
    """Append ``tenants`` x ``hours`` closed buckets of tenants with no events before ``start``; return how many."""
    Completionist(None, store, cfg).ensure_table()  # type: ignore[arg-type]
    uri = cfg.table_uri(BUCKETS)
    decided = start - timedelta(hours=1)
    rows = [{"tenant_id": f"old{t}", "hour": hour_of(start - timedelta(hours=h)), "state": state,
             "decided_at": decided, "reason": "test"}
            for t in range(tenants) for h in range(1, hours + 1) for state in ("closing", "closed")]
    store.append_arrow(uri, pa.Table.from_pylist(rows, schema=store.arrow_schema(uri)))
    return tenants * hours


def test_a_maintenance_run_turns_only_the_open_buckets_into_python_objects(
    spark: SparkSession, store: TableStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    pipeline_config: Callable[[Path, Path], LakeshardConfig], bucket_conversions: Callable[[], list[str]],
) -> None:
    """``close_buckets`` needs the recorded buckets to tell a new one from a known one, and the closed ones to skip;
    ``compact`` needs the closed ones to merge them at once. Neither needs a Python object per row ever written:
    turning all of them into ``BucketState`` made every run dearer the older the lakehouse."""
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    landing = tmp_path / "landing"
    manifest = generate_landing(landing / "a", SynthSpec(events=300, tenants=3, seed=5, start=start, **_QUIET))  # type: ignore[arg-type]
    cfg = pipeline_config(tmp_path / "lh", landing)
    assert run_pipeline(spark, store, cfg, flows=["route", "ingest"]).ok
    old = _old_closed_buckets(store, cfg, start, tenants=60, hours=30)

    converted = bucket_conversions()
    later = datetime.now(UTC) + timedelta(hours=1)  # the ingested files' quiet period is over
    report = run_pipeline(spark, store, cfg, flows=["close_buckets", "compact"], clock=lambda: later)
    assert report.ok, [f.error for f in report.flows]
    assert len(converted) < old / 10, f"{len(converted)} bucket rows turned into Python objects by one run"

    monkeypatch.undo()
    run = report.flow("close_buckets").result
    assert run is not None
    own = {(t, h[:13]) for t, by_hour in manifest.events_by_tenant_hour.items() for h in by_hour}
    closed = {(s.tenant_id, s.hour) for s in Completionist(spark, store, cfg).states().values()
              if s.state == "closed"}
    assert own <= closed, f"buckets of the ingested hours not closed: {sorted(own - closed)}"
    assert run.rows_out == len(own)
    assert Completionist(spark, store, cfg).closed() == closed | {(f"old{t}", hour_of(start - timedelta(hours=h)))
                                                                  for t in range(60) for h in range(1, 31)}


def test_the_compaction_scope_decides_openness_once_per_hour_not_once_per_bucket(
    store: TableStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every compaction run puts the still-open buckets in its scope; whether a bucket is open depends on its hour
    alone, and the live buckets grow by a tenant count every hour the lakehouse lives."""
    from lakeshard.tables import EVENTS_PARTITIONING, EVENTS_SCHEMA

    uri = str(tmp_path / "events")
    store.create(uri, EVENTS_SCHEMA, partition_by=EVENTS_PARTITIONING)
    assert record_compacted(store, uri, store.version(uri))
    now = datetime.now(UTC).replace(minute=30, second=0, microsecond=0)
    hours = [hour_of(now - timedelta(hours=h)) for h in range(48)]
    files = [FileInfo(f"tenant_id=t{t}/hour={h}/part-0.parquet", 1000, 10, {"tenant_id": f"t{t}", "hour": h}, now)
             for t in range(50) for h in hours]

    asked: list[str] = []
    real = SizeTieredPlanner.is_open

    def counted(self: SizeTieredPlanner, bucket: tuple[str, str], when: datetime) -> bool:
        asked.append(bucket[1])
        return real(self, bucket, when)

    monkeypatch.setattr(SizeTieredPlanner, "is_open", counted)
    planner = SizeTieredPlanner(grace_seconds=3600.0)
    scope = compaction_scope(store, uri, files, store.version(uri), now=now, size_tiered=planner)
    assert len(asked) <= len(hours), f"openness decided {len(asked)} times for {len(hours)} hours"
    monkeypatch.undo()
    assert scope.buckets == {(f"t{t}", h) for t in range(50) for h in hours if planner.is_open(("", h), now)}
    assert scope.buckets and len(scope.buckets) < len(files)


def test_a_lock_state_read_skips_the_files_of_other_hours(
    store: TableStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``chunk_locks`` gains a file per lock change set (two per compaction round) for as long as the lakehouse
    lives; the chunks a compaction locks are recent, so files whose ``hour`` statistics miss every wanted hour are
    not read."""
    from lakeshard.versions.chunks import Chunk
    from lakeshard.versions.locks import ChunkLocks

    uri = str(tmp_path / "chunk_locks")
    locks = ChunkLocks(store, uri)
    locks.ensure_table()
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    schema = store.arrow_schema(uri)
    for h in range(30, 0, -1):  # one commit per hour, oldest first, as compaction rounds leave them
        hour = hour_of(now - timedelta(hours=h))
        rows = [{"tenant_id": f"t{t}", "hour": hour, "generation": g, "holder": "old", "state": state,
                 "acquired_at": now, "expires_at": now, "recorded_at": now}
                for t in range(20) for g, state in ((1, "held"), (2, "released"))]
        store.append_arrow(uri, pa.Table.from_pylist(rows, schema=schema))
    recent = hour_of(now - timedelta(hours=1))
    taken = locks.acquire_all([Chunk("t3", recent), Chunk("new", recent)])
    assert [lease.state.generation for lease in taken] == [1, 3]  # sorted: "new" first, never locked; t3 after two rows

    read: list[int] = []
    for name in ("read", "read_files", "read_arrow"):
        real = getattr(store, name)

        def counted(table: str, *args, _real=real, _name=name, **kwargs):  # type: ignore[no-untyped-def]
            if table == uri:
                read.append(len(store.files(uri)) if _name == "read" else len(args[0]))
            return _real(table, *args, **kwargs)

        monkeypatch.setattr(store, name, counted)
    states = locks.states([Chunk("t3", recent), Chunk("t7", recent), Chunk("never", recent)])
    files = len(store.files(uri))
    assert sum(read) <= 3, f"{sum(read)} of {files} chunk_locks files read for one hour's chunks"
    monkeypatch.undo()
    assert states[Chunk("t3", recent)].generation == 3 and states[Chunk("t3", recent)].state == "held"
    assert states[Chunk("t7", recent)].generation == 2 and states[Chunk("t7", recent)].state == "released"
    assert Chunk("never", recent) not in states
    locks.release_all(taken)
    assert locks.state(Chunk("t3", recent)).state == "released"  # type: ignore[union-attr]


def test_the_autosharder_reads_count_changes_without_a_spark_job(
    store: TableStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    pipeline_config: Callable[[Path, Path], LakeshardConfig],
) -> None:
    """``tenant_settings`` holds one row per change, read whole on every hourly autoshard run: a Spark job over it
    (with a predicate of every tenant with metrics) cost more than the rows, and more with every change kept."""
    from lakeshard.balancing.executor import last_count_changes
    from lakeshard.routing.tables import RoutingTables, TenantSetting

    cfg = pipeline_config(tmp_path / "lh", tmp_path / "landing")
    tables = RoutingTables(store, cfg)
    base = cfg.routing.default_shard_count
    tables.set_tenant_settings([TenantSetting("up", base + 1, 0), TenantSetting("salted", base, 3),
                                TenantSetting("back", base + 2, 0)], reason="first")
    tables.set_tenant_settings([TenantSetting("up", base + 1, 5), TenantSetting("back", base, 0)], reason="second")

    spark_reads: list[str] = []
    real = store.read

    def counted(table: str, *args, **kwargs):  # type: ignore[no-untyped-def]
        spark_reads.append(table)
        return real(table, *args, **kwargs)

    monkeypatch.setattr(store, "read", counted)
    changes = last_count_changes(store, cfg, ["up", "salted", "back", "never"])
    assert spark_reads == [], f"Spark reads of {spark_reads}"
    monkeypatch.undo()
    rows = store.read_table_arrow(tables.settings_uri, ["tenant_id", "shard_count", "updated_at"]).to_pylist()
    at: dict[tuple[str, int], datetime] = {}
    for r in sorted(rows, key=lambda r: r["updated_at"]):  # the first row with each count is its change
        at.setdefault((r["tenant_id"], r["shard_count"]), r["updated_at"])
    # A salt-only change is not a count change; a count set back to the default is one.
    assert set(changes) == {"up", "back"}
    assert changes["up"] == at[("up", base + 1)].replace(tzinfo=UTC)
    assert changes["back"] == at[("back", base)].replace(tzinfo=UTC)
