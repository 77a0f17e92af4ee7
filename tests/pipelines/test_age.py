"""What a job run costs must not grow with the lakehouse's age: runs after the first reuse what the store knows."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakeshard.config import LakeshardConfig
from lakeshard.lake import TableStore
from lakeshard.pipelines import run_pipeline
from lakeshard.synth import SynthSpec, generate_landing
from lakeshard.synth.verify import check_against_truth
from lakeshard.tables import EVENTS


def test_an_ingest_run_loads_no_table_afresh_that_an_earlier_run_loaded(
    spark: SparkSession, store: TableStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    pipeline_config: Callable[[Path, Path], LakeshardConfig],
) -> None:
    """A fresh snapshot load replays the newest checkpoint and the commits after it: its cost grows with the
    table's files (``events``: thousands a day). Each run of the ingest job builds its router, writer and event log
    anew, and each ensures its tables; doing so must not throw away the snapshots the store keeps."""
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    landing = tmp_path / "landing"
    spec = SynthSpec(events=300, tenants=3, seed=5, start=start, hours=0.1, bad_rate=0.0, late_rate=0.0,
                     burst_tenants=0)
    first = generate_landing(landing / "a", spec)
    cfg = pipeline_config(tmp_path / "lh", landing)
    assert run_pipeline(spark, store, cfg, flows=["route", "ingest"]).ok

    log = store._log  # type: ignore[attr-defined]
    loads: list[str] = []
    real = log.table

    def table(uri: str, version: int | None = None):  # type: ignore[no-untyped-def]
        loads.append(uri.rstrip("/").rsplit("/", 1)[-1])
        return real(uri, version)

    monkeypatch.setattr(log, "table", table)
    second = generate_landing(landing / "b", SynthSpec(events=300, tenants=3, seed=6, start=start + timedelta(
        minutes=6), hours=0.1, bad_rate=0.0, late_rate=0.0, burst_tenants=0))
    for _ in range(2):  # the second run finds nothing new: it still ensures its tables
        assert run_pipeline(spark, store, cfg, flows=["route", "ingest"]).ok

    assert loads == [], f"tables loaded afresh by later runs: {sorted(set(loads))} ({len(loads)} loads)"
    monkeypatch.undo()
    rows = store.read(cfg.table_uri(EVENTS))
    assert rows.count() == first.unique_events + second.unique_events
    assert check_against_truth(spark, rows, landing / "a").missing == 0


def test_an_ingest_step_reads_only_the_closed_buckets_of_the_hours_it_meets(
    spark: SparkSession, store: TableStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    pipeline_config: Callable[[Path, Path], LakeshardConfig], bucket_conversions: Callable[[], list[str]],
) -> None:
    """Buckets close by the thousand a day (tenants x hours). A writer step needs the closed ones among its
    events' own hours (late events) and from the current hour on (where a late event goes): turning every bucket
    ever closed into Python objects made each step dearer the older the lakehouse."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from lakeshard.buckets import Completionist
    from lakeshard.tables import BUCKETS, hour_of

    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    landing = tmp_path / "landing"
    quiet = {"bad_rate": 0.0, "late_rate": 0.0, "burst_tenants": 0, "hours": 0.1}
    generate_landing(landing / "a", SynthSpec(events=300, tenants=3, seed=5, start=start, **quiet))  # type: ignore[arg-type]
    cfg = pipeline_config(tmp_path / "lh", landing)
    assert run_pipeline(spark, store, cfg, flows=["route", "ingest"]).ok

    second = generate_landing(landing / "b", SynthSpec(events=300, tenants=3, seed=6, start=start + timedelta(
        minutes=6), **quiet))  # type: ignore[arg-type]
    tenant, by_hour = sorted(second.events_by_tenant_hour.items())[0]
    own = sorted(by_hour)[0][:13]  # the manifest names an hour by its start time
    Completionist(spark, store, cfg).ensure_table()
    uri = cfg.table_uri(BUCKETS)
    decided = datetime.now(UTC)
    past = [hour_of(start - timedelta(hours=h)) for h in range(1, 31)]
    rows = [{"tenant_id": f"x{t}", "hour": h, "state": "closed", "decided_at": decided, "reason": "test"}
            for t in range(100) for h in past] + [{"tenant_id": tenant, "hour": own, "state": "closed",
                                                   "decided_at": decided, "reason": "test"}]
    store.append_arrow(uri, pa.Table.from_pylist(rows, schema=store.arrow_schema(uri)))

    converted = bucket_conversions()
    assert run_pipeline(spark, store, cfg, flows=["route", "ingest"]).ok
    assert len(converted) < 100, f"{len(converted)} bucket rows turned into Python objects by one ingest run"

    monkeypatch.undo()
    events = store.read_arrow(cfg.table_uri(EVENTS), store.files(cfg.table_uri(EVENTS)),
                              ["tenant_id", "hour", "late"])
    mine = events.filter(pc.equal(events.column("tenant_id"), tenant))
    late = mine.filter(mine.column("late"))
    assert late.num_rows > 0, f"no late event of {tenant} whose own hour {own} is closed"
    assert set(late.column("hour").to_pylist()) == {hour_of(datetime.now(UTC))}


def test_an_ingest_run_after_buckets_closed_starts_no_spark(
    spark: SparkSession, store: TableStore, landing: tuple[Path, object], first_run: tuple[Path, object],
    copy_lakehouse: Callable[[Path], Path], pipeline_config: Callable[[Path, Path], LakeshardConfig],
    tmp_path: Path,
) -> None:
    """A writer step reads the closed buckets (late events go to their tenant's open one) with Arrow: a lakehouse
    whose buckets have closed must not make every ingest job start a JVM to read them (a Databricks-style job
    process starts per run)."""
    import shutil

    from lakeshard.lake.embedded import EmbeddedTableStore
    from lakeshard.tables import BUCKETS

    lh = copy_lakehouse(first_run[0])
    assert store.read(pipeline_config(lh, landing[0]).table_uri(BUCKETS)).where("state = 'closed'").count() > 0
    again = Path(shutil.copytree(landing[0], tmp_path / "delivered-again"))  # routed again: every event a duplicate
    cfg = pipeline_config(lh, again)
    before = store.read(cfg.table_uri(EVENTS)).count()
    lazy = EmbeddedTableStore(None, start_spark=lambda: spark)
    report = run_pipeline(None, lazy, cfg, flows=["route", "ingest"])
    assert report.ok, report.render()
    assert not lazy.spark_started, "an ingest run started Spark to read the closed buckets"
    assert store.read(cfg.table_uri(EVENTS)).count() == before
