"""Small events tables for compaction tests: a few buckets, each written as many small sorted appends."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from lakeshard.compaction import CompactionSettings, LocalityPlanner, SizeTieredPlanner
from lakeshard.compaction.sample import HOURS, SmallFileTable

__all__ = ["HOURS", "AppendEvents", "checksum", "small_settings"]

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakeshard.lake import TableStore

AppendEvents = Callable[..., None]


@pytest.fixture
def events_table(spark: SparkSession, store: TableStore, tmp_path: Any) -> tuple[str, AppendEvents]:
    """Return a fresh events table and ``append(tenant, files, rows_per_file, sort=True)`` adding small files."""
    table = SmallFileTable(spark, store, str(tmp_path / "events"))
    return table.uri, table.append


def checksum(df: DataFrame) -> list[tuple[Any, int]]:
    """Return the multiset of rows: all columns hashed per row (maps as sorted entries), with multiplicity."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import MapType

    cols = [F.array_sort(F.map_entries(F.col(f.name))) if isinstance(f.dataType, MapType) else F.col(f.name)
            for f in df.schema.fields]
    return sorted((r[0], r[1]) for r in df.groupBy(F.xxhash64(*cols).alias("h")).count().collect())


def small_settings(**extra: Any) -> CompactionSettings:
    """Return settings scaled to test tables: tiers of 4 files, 150-row outputs."""
    return CompactionSettings(
        size_tiered=SizeTieredPlanner(min_files=4, target_rows=150, base_rows=16, growth=4, settle_seconds=0,
                                      grace_seconds=0),
        locality=LocalityPlanner(target_rows=150, growth=2, max_level=3),
        max_regex_chars=200, **extra,
    )
