"""Shared fixtures: one local Spark session for the whole test session, and a TableStore over it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from lakeshard.config import LakeshardConfig, load_config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakeshard.lake import TableStore


@pytest.fixture(scope="session")
def test_config() -> LakeshardConfig:
    """Return a config for tests: two local cores, few partitions, a small driver."""
    return load_config(
        overrides={"spark": {"master": "local[2]", "shuffle_partitions": 2, "driver_memory": "2g",
                             "app_name": "lakeshard-tests", "adapter": "embedded"}},
    )


@pytest.fixture(scope="session")
def spark(test_config: LakeshardConfig) -> Iterator[SparkSession]:
    """Return the one local Spark session shared by every test (started once, stopped at the end)."""
    from lakeshard.runtime import get_spark

    session = get_spark(test_config)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def store(spark: SparkSession, test_config: LakeshardConfig) -> TableStore:
    """Return the embedded TableStore over the shared session."""
    from lakeshard.lake import open_store

    return open_store(spark, test_config)
