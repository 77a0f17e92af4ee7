"""Compaction plans only the buckets that changed since its last finished run, not every bucket ever."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from lakeshard.compaction import compact_events
from lakeshard.compaction.sample import SmallFileTable
from lakeshard.config import load_config
from lakeshard.lake import TableStore


def _planned_buckets(report: object) -> set[tuple[str, str]]:
    """Return the buckets whose files a run's first plan looked at (merged or left untouched)."""
    plan = report.plan  # type: ignore[attr-defined]
    paths = [p for t in plan.tasks for p in t.inputs] + list(plan.untouched)
    return {(p.split("tenant_id=")[1].split("/")[0], p.split("hour=")[1].split("/")[0]) for p in paths}


def test_a_run_plans_only_the_buckets_changed_since_the_last_finished_run(
    spark: SparkSession, store: TableStore, tmp_path: Path
) -> None:
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh")}, env={})
    events = SmallFileTable(spark, store, cfg.table_uri("events"))
    for tenant in ("t1", "t2", "t3"):
        events.append(tenant, files=4, rows=10)  # 4 small files in each of the tenant's two hours
    first = compact_events(store, cfg, min_files=4, target_rows=150)
    assert len(first.plan.tasks) == 6 and _planned_buckets(first) == {
        (t, h) for t in ("t1", "t2", "t3") for h in ("2026-01-01T10", "2026-01-01T11")}

    idle = compact_events(store, cfg, min_files=4, target_rows=150)
    assert idle.plan.tasks == () and _planned_buckets(idle) == set()  # nothing changed: nothing looked at

    events.append("t2", files=4, rows=10)
    again = compact_events(store, cfg, min_files=4, target_rows=150)
    assert _planned_buckets(again) == {("t2", "2026-01-01T10"), ("t2", "2026-01-01T11")}
    assert len(again.plan.tasks) == 2
    rows = store.read(cfg.table_uri("events")).count()
    assert rows == 4 * 10 * 2 * 4  # every appended row, once

    from lakeshard.tables import COMPACTOR_APP_ID

    assert store.transaction_version(cfg.table_uri("events"), COMPACTOR_APP_ID) is not None  # the watermark


def test_a_bucket_closed_after_the_last_run_is_merged_though_its_files_did_not_change(
    spark: SparkSession, store: TableStore, tmp_path: Path
) -> None:
    from datetime import UTC, datetime, timedelta

    from lakeshard.buckets import Completionist

    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": str(tmp_path / "no-landing"),
                                 "routing": {"total_shards": 2}}, env={})
    events = SmallFileTable(spark, store, cfg.table_uri("events"))
    events.append("t1", files=3, rows=5)
    waiting = compact_events(store, cfg, min_files=32, target_rows=150)  # open by tier: 3 files wait for 32
    assert waiting.plan.tasks == ()

    later = datetime.now(UTC) + timedelta(hours=1)  # past the quiet period of the files just written
    closer = Completionist(spark, store, cfg, clock=lambda: later)
    assert len(closer.run().closed) == 2  # both hours close behind a fence commit to events
    sealed = closer.closed()
    merged = compact_events(store, cfg, sealed=sealed, min_files=32, target_rows=150)
    assert {t.bucket for t in merged.plan.tasks} == sealed
    assert len(store.files(cfg.table_uri("events"))) == 2 and closer.verify() == []
