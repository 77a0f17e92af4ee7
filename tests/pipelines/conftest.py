"""Fixtures of the pipeline tests: one small landing zone, and lakehouses the tests copy, never change."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakeshard.config import LakeshardConfig, load_config
from lakeshard.lake import TableStore
from lakeshard.pipelines import RunReport, lakeshard_pipeline, run_pipeline
from lakeshard.synth import Manifest, SynthSpec, generate_landing


def _config(lakehouse: Path, landing: Path) -> LakeshardConfig:
    """Return the config of a test lakehouse: 4 shards, one per new tenant."""
    return load_config(overrides={"lakehouse": str(lakehouse), "landing": str(landing),
                                  "routing": {"total_shards": 4, "default_shard_count": 1}}, env={})


@pytest.fixture(scope="session")
def pipeline_config() -> Callable[[Path, Path], LakeshardConfig]:
    """Return the function that gives a test lakehouse's config (lakehouse, landing): 4 shards, one per tenant."""
    return _config


@pytest.fixture(scope="session")
def landing(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Manifest]:
    """Return a small landing zone (retries, redeliveries, bad and late records) and its manifest."""
    path = tmp_path_factory.mktemp("pipelines") / "landing"
    manifest = generate_landing(path, SynthSpec(events=1200, tenants=8, hours=0.15, seed=11, burst_tenants=1))
    return path, manifest


@pytest.fixture(scope="session")
def first_run(spark: SparkSession, store: TableStore, landing: tuple[Path, Manifest],
              tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunReport]:
    """Return a lakehouse after one run of the whole lakeshard pipeline, and that run's report."""
    lh = tmp_path_factory.mktemp("first-run") / "lh"
    # The landing zone's hours are long over and it is complete: buckets may close without a quiet period.
    report = run_pipeline(spark, store, _config(lh, landing[0]), lakeshard_pipeline(),
                          params={"close_buckets": {"quiet_minutes": 0}})
    return lh, report


@pytest.fixture(scope="session")
def routed_only(spark: SparkSession, store: TableStore, landing: tuple[Path, Manifest],
                tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Return a lakehouse where only the route flow has run."""
    lh = tmp_path_factory.mktemp("routed-only") / "lh"
    run_pipeline(spark, store, _config(lh, landing[0]), lakeshard_pipeline(), flows=["route"])
    return lh


@pytest.fixture
def copy_lakehouse(tmp_path: Path) -> Callable[[Path], Path]:
    """Return a function that copies a fixture lakehouse into this test's directory (Delta paths are relative)."""
    def copy(source: Path) -> Path:
        return Path(shutil.copytree(source, tmp_path / "lh"))
    return copy


@pytest.fixture
def bucket_conversions(monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[str]]:
    """Return the function that starts counting: from its call on, the list it returns gets the tenant of every
    ``buckets`` row turned into a Python ``BucketState`` (the per-row conversion a run must not do for every
    bucket ever closed); the test's ``monkeypatch.undo()`` stops it."""
    from lakeshard.buckets import completionist

    def start() -> list[str]:
        converted: list[str] = []
        real = completionist._state_from_row

        def counted(row):  # type: ignore[no-untyped-def]
            converted.append(str(row["tenant_id"]))
            return real(row)

        monkeypatch.setattr(completionist, "_state_from_row", counted)
        return converted

    return start
