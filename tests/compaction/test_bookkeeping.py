"""Compaction of the small bookkeeping tables: many small appends become one file per partition, rows kept."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from lakeshard.compaction.bookkeeping import BOOKKEEPING_TABLES, compact_bookkeeping
from lakeshard.config import LakeshardConfig, MaintenanceConfig
from lakeshard.lake import TableStore
from lakeshard.tables import EVENTS, ID_INDEX, ROUTED

LEDGER = "ledger"
SCHEMA = StructType([StructField("part", StringType(), False), StructField("n", LongType(), False),
                     StructField("shard", IntegerType(), True)])


def _config(tmp_path: Path, test_config: LakeshardConfig, max_files: int = 64) -> LakeshardConfig:
    return replace(test_config, lakehouse=str(tmp_path / "lh"),
                   maintenance=MaintenanceConfig(bookkeeping_max_files=max_files))


def _grow(store: TableStore, uri: str, appends: int, start: int = 0) -> None:
    store.create(uri, SCHEMA, partition_by=("part",))
    for i in range(start, start + appends):
        store.append_arrow(uri, pa.table({"part": [f"p{i % 3}"], "n": [i], "shard": [i % 5]}))


def _rows(store: TableStore, uri: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in store.read_table_arrow(uri).to_pylist())


def test_catalog_bookkeeping_tables_leave_out_the_big_ones() -> None:
    assert not {EVENTS, ROUTED, ID_INDEX} & set(BOOKKEEPING_TABLES)
    assert "pipeline_events" in BOOKKEEPING_TABLES and "landing_batches" in BOOKKEEPING_TABLES


def test_grown_table_is_compacted_to_one_file_per_partition(store: TableStore, test_config: LakeshardConfig,
                                                           tmp_path: Path) -> None:
    cfg = _config(tmp_path, test_config)
    uri = cfg.table_uri(LEDGER)
    _grow(store, uri, 200)
    before = _rows(store, uri)
    assert len(store.files(uri)) == 200
    # delta-rs checkpoints every 100 commits by itself: snapshot loads replay at most ~100 commits.
    assert store.checkpoint_versions(uri)

    report = compact_bookkeeping(store, cfg, tables=(LEDGER,))

    assert len(store.files(uri)) == 3
    assert _rows(store, uri) == before
    (done,) = report.tables
    assert (done.table, done.files_before, done.files_after, done.conflict) == (LEDGER, 200, 3, False)
    assert store.version(uri) - max(store.checkpoint_versions(uri)) < 100

    again = compact_bookkeeping(store, cfg, tables=(LEDGER,))
    version = store.version(uri)
    assert all(t.skipped for t in again.tables)
    assert store.version(uri) == version


def test_small_table_is_left_alone(store: TableStore, test_config: LakeshardConfig, tmp_path: Path) -> None:
    cfg = _config(tmp_path, test_config, max_files=10)
    uri = cfg.table_uri(LEDGER)
    _grow(store, uri, 10)
    version = store.version(uri)
    report = compact_bookkeeping(store, cfg, tables=(LEDGER, "never_created"))
    assert store.version(uri) == version and len(store.files(uri)) == 10
    assert all(t.skipped for t in report.tables)


class _AppendDuringRewrite:
    """The real store, with another writer's append committed between the rewrite's read and its commit."""

    def __init__(self, store: TableStore, uri: str) -> None:
        self._store, self._uri, self.appended = store, uri, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def replace_files(self, table: str, *args: Any, **kwargs: Any) -> Any:
        if not self.appended:
            self._store.append_arrow(self._uri, pa.table({"part": ["p1"], "n": [10_000], "shard": [1]}))
            self.appended = True
        return self._store.replace_files(table, *args, **kwargs)


def test_concurrent_append_during_rewrite_is_kept(store: TableStore, test_config: LakeshardConfig,
                                                  tmp_path: Path) -> None:
    cfg = _config(tmp_path, test_config, max_files=8)
    uri = cfg.table_uri(LEDGER)
    _grow(store, uri, 20)
    expected = sorted([*_rows(store, uri), ("p1", 10_000, 1)])
    racing = _AppendDuringRewrite(store, uri)

    report = compact_bookkeeping(racing, cfg, tables=(LEDGER,))  # type: ignore[arg-type]

    assert racing.appended
    assert _rows(store, uri) == expected
    (done,) = report.tables
    # Either the rewrite committed around the append (3 merged files + the appended one) or it lost the race,
    # committed nothing and is retried next run; the appended row is there either way.
    assert len(store.files(uri)) == (4 if not done.conflict else 21)
    if done.conflict:
        compact_bookkeeping(store, cfg, tables=(LEDGER,))
        assert len(store.files(uri)) == 3 and _rows(store, uri) == expected
