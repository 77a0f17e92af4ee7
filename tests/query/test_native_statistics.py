"""Delta's engine keeps only a 32-character prefix of a string's statistics (the max followed by a character at
least as high as any it cut); min/max pruning must still read every file that holds the value asked for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakeshard.lake import AppTransaction, TableStore
from lakeshard.query.read import choose_files

pytestmark = pytest.mark.delta_jvm

HOUR = datetime(2026, 1, 1, 10, tzinfo=UTC)
PREFIX = "evt-" + "0" * 28  # 32 characters: every id below differs from the others only after the prefix
IDS = [PREFIX + tail for tail in ("a", "b" * 9, "z", "\U0001f600", "\uffff\U0001f600", "\u00e9t\u00e9", "~")]


def test_min_max_pruning_keeps_every_file_holding_an_id_longer_than_the_statistics_prefix(
        spark: SparkSession, native_store: TableStore, tmp_path: Path) -> None:
    uri = str(tmp_path / "events")
    schema = "tenant_id string, hour string, event_id string, ts timestamp"
    native_store.create(uri, spark.createDataFrame([], schema).schema, partition_by=["tenant_id", "hour"])
    # One file per id (and a neighbour far below the prefix, so a file's range is not the whole prefix's).
    for n, event_id in enumerate(IDS):
        rows = [("t", "2026-01-01T10", event_id, HOUR + timedelta(seconds=n)),
                ("t", "2026-01-01T10", "a" * 40, HOUR + timedelta(seconds=n))]
        native_store.append(uri, spark.createDataFrame(rows, schema).coalesce(1),
                            app_transactions=[AppTransaction("writer/0", n + 1)])
    files = native_store.files(uri)
    assert len(files) == len(IDS)
    # The statistics are Delta's truncated ones, or this test would not test them.
    assert all(len(f.max_values["event_id"]) <= 33 for f in files), [f.max_values for f in files]

    holding = {path: set(r.event_id for r in spark.read.parquet(f"{uri}/{path}").select("event_id").collect())
               for path in (f.path for f in files)}
    for event_id in [*IDS, "a" * 40]:
        chosen, report = choose_files(files, lambda candidates: {}, tenant="t", start=HOUR,
                                      end=HOUR + timedelta(hours=1), predicates={"event_id": event_id},
                                      use_regex=False)
        needed = {p for p, ids in holding.items() if event_id in ids}
        assert needed <= {f.path for f in chosen}, (event_id, report.render())
    # And pruning still prunes: an id above every file's range reads nothing.
    chosen, report = choose_files(files, lambda candidates: {}, tenant="t", start=HOUR,
                                  end=HOUR + timedelta(hours=1), predicates={"event_id": "zzz"}, use_regex=False)
    assert chosen == [] and report.pruned_by_min_max == len(IDS), report.render()
