"""Fixtures of the load-management tests: a small routed lakehouse (routed once, copied by each test)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from lakeshard.config import LakeshardConfig, load_config
from lakeshard.lake import TableStore
from lakeshard.routing.router import Router
from lakeshard.synth import SynthSpec, generate_landing

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _spec(start: datetime, seed: int) -> SynthSpec:
    # No late events or redeliveries: every event's window follows from its arrival, which the tests rely on.
    return SynthSpec(events=1500, tenants=10, hours=0.2, seed=seed, start=start, late_rate=0.0, bad_rate=0.0,
                     burst_tenants=1, redelivered_files=0.0, gzip_rate=0.0)


def _cfg(lakehouse: Path, **balancing: Any) -> LakeshardConfig:
    return load_config(overrides={"lakehouse": str(lakehouse),
                                  "routing": {"total_shards": 8, "default_shard_count": 1},
                                  "balancing": balancing}, env={})


@pytest.fixture(scope="session")
def traffic_spec() -> Callable[[datetime, int], SynthSpec]:
    """Return the function that gives the small synthetic traffic of these tests (start, seed)."""
    return _spec


@pytest.fixture(scope="session")
def lakehouse_config() -> Callable[..., LakeshardConfig]:
    """Return the function that gives a config for a lakehouse: 8 shards, one shard per new tenant."""
    return _cfg


@pytest.fixture(scope="session")
def routed(spark: SparkSession, store: TableStore, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Return a lakehouse with 12 minutes of routed traffic from 2026-01-01T00:00Z; tests copy it, never change it."""
    base = tmp_path_factory.mktemp("balancing")
    generate_landing(base / "landing", _spec(T0, 5))
    Router(spark, store, _cfg(base / "lh"), max_batch_files=1000).run(str(base / "landing"))
    return base / "lh"
