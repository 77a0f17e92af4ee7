"""Shared helpers for the versions tests: a small ``(tenant_id, hour)``-partitioned table like ``events``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from _chunk_table import CHUNK_TABLE_SCHEMA, Rows
from pyspark.sql import DataFrame, SparkSession

from lakeshard.lake import TableStore


@pytest.fixture(scope="session")
def rows(spark: SparkSession) -> Rows:
    """Return a maker of ``n`` rows of one chunk: ids ``<prefix>-<i>``, one file per chunk when written."""

    def make(tenant: str, hour: str, prefix: str, n: int) -> DataFrame:
        start = datetime.strptime(hour, "%Y-%m-%dT%H").replace(tzinfo=UTC)
        data = [(tenant, f"{prefix}-{i}", start + timedelta(seconds=i), i, hour) for i in range(n)]
        return spark.createDataFrame(data, CHUNK_TABLE_SCHEMA).coalesce(1)

    return make


@pytest.fixture()
def chunk_table(store: TableStore, tmp_path: Path) -> str:
    """Return the URI of a new, empty table partitioned by tenant_id and hour."""
    uri = str(tmp_path / "events")
    store.create(uri, CHUNK_TABLE_SCHEMA, partition_by=["tenant_id", "hour"])
    return uri

