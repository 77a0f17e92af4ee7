"""The hourly maintenance job's upkeep of bookkeeping tables on Delta's own engine: the rewrite goes through Delta's
public writer (whole partitions, ``replaceWhere``, ``dataChange=false``) and a missing checkpoint is written without
py4j, so the same code runs on a classic session and under Spark Connect (``tests/runtime/test_connect.py`` runs
this module there too).

The tables are created under a bookkeeping table's name with a small schema of their own: the rewrite does not
depend on a table's columns (only ``routing_metrics``, ``fragments`` and the sorted layouts add a step).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from lakeshard.config import LakeshardConfig, MaintenanceConfig
from lakeshard.lake import TableStore
from lakeshard.lake.native import public
from lakeshard.maintenance import bookkeeping, compact_bookkeeping
from lakeshard.pipelines import run_pipeline
from lakeshard.tables import LANDING_BATCHES, QUARANTINE

pytestmark = pytest.mark.delta_jvm

SCHEMA = StructType([StructField("part", StringType(), False), StructField("n", LongType(), False),
                     StructField("shard", IntegerType(), True)])
# Delta checkpoints a table every this many commits by itself; set far away so that only the job writes one.
NO_AUTOMATIC_CHECKPOINT = {"delta.checkpointInterval": "1000"}


def _config(tmp_path: Path, test_config: LakeshardConfig) -> LakeshardConfig:
    return replace(test_config, lakehouse=str(tmp_path / "lh"), spark=replace(test_config.spark, adapter="native"),
                   maintenance=MaintenanceConfig(bookkeeping_max_files=2))


def _grow(store: TableStore, uri: str, appends: int, start: int = 0) -> None:
    store.create(uri, SCHEMA, partition_by=("part",), properties=NO_AUTOMATIC_CHECKPOINT)
    for i in range(start, start + appends):
        _append(store, uri, i)


def _append(store: TableStore, uri: str, i: int) -> None:
    store.append_arrow(uri, pa.table({"part": [f"p{i % 2}"], "n": [i], "shard": [i % 5]},
                                     schema=pa.schema([("part", pa.string()), ("n", pa.int64()),
                                                       ("shard", pa.int32())])))


def _rows(store: TableStore, uri: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in store.read(uri).select("part", "n", "shard").collect())


def _rows_by_delta_rs(uri: str) -> list[tuple[Any, ...]]:
    from deltalake import DeltaTable

    return sorted((r["part"], r["n"], r["shard"]) for r in DeltaTable(uri).to_pyarrow_table().to_pylist())


def test_the_hourly_upkeep_rewrites_a_grown_table_and_writes_a_missing_checkpoint(
        spark: Any, native_store: TableStore, test_config: LakeshardConfig, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _config(tmp_path, test_config)
    uri = cfg.table_uri(QUARANTINE)
    _grow(native_store, uri, 6)
    before = _rows(native_store, uri)
    assert len(native_store.files(uri)) == 6 and not native_store.checkpoint_versions(uri)
    monkeypatch.setattr(bookkeeping, "CHECKPOINT_INTERVAL", 4)  # the table's 7 commits are past it

    report = run_pipeline(spark, native_store, cfg, flows=["compact_books"],
                          params={"compact_books": {"max_files": 2}})
    assert report.ok, report.render()
    result = report.flow("compact_books").result
    assert result is not None
    assert QUARANTINE in str(result.details["tables"]) and QUARANTINE in str(result.details["checkpoints"])
    files = native_store.files(uri)
    assert len(files) == 2 and {f.partition_values["part"] for f in files} == {"p0", "p1"}
    assert _rows(native_store, uri) == before == _rows_by_delta_rs(uri)
    assert native_store.checkpoint_versions(uri)
    from deltalake import DeltaTable

    assert DeltaTable(uri).metadata().configuration.get("delta.checkpointInterval") == "1000"


def test_an_append_racing_the_rewrite_keeps_its_row_and_the_rewrite_retries(
        native_store: TableStore, test_config: LakeshardConfig, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The append lands after the rewrite read the table and before Delta's write starts: ``replaceWhere`` would
    drop its file; the rewrite's in-write check fails it instead, and the next run rewrites every row."""
    cfg = _config(tmp_path, test_config)
    uri = cfg.table_uri(LANDING_BATCHES)
    _grow(native_store, uri, 5)
    before = _rows(native_store, uri)
    real = public.PublicCommits.replace_partitions
    appended: list[int] = []

    def append_first(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not appended:
            _append(native_store, uri, 100)
            appended.append(native_store.version(uri))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(public.PublicCommits, "replace_partitions", append_first)
    first = compact_bookkeeping(native_store, cfg, tables=[LANDING_BATCHES])
    assert appended and first.tables[0].conflict and first.tables[0].version is None
    assert native_store.version(uri) == appended[0]
    assert _rows(native_store, uri) == sorted([*before, ("p0", 100, 0)])

    second = compact_bookkeeping(native_store, cfg, tables=[LANDING_BATCHES])
    assert second.tables[0].version is not None and len(native_store.files(uri)) == 2
    assert _rows(native_store, uri) == sorted([*before, ("p0", 100, 0)]) == _rows_by_delta_rs(uri)


def test_a_replayed_rewrite_of_files_already_rewritten_commits_nothing(
        native_store: TableStore, test_config: LakeshardConfig, tmp_path: Path) -> None:
    cfg = _config(tmp_path, test_config)
    uri = cfg.table_uri(QUARANTINE)
    _grow(native_store, uri, 4)
    version = native_store.version(uri)
    live = native_store.files(uri, version=version)
    done = bookkeeping._rewrite(native_store, uri, QUARANTINE, version, live, live)
    assert done.version is not None
    rows, at = _rows(native_store, uri), native_store.version(uri)

    again = bookkeeping._rewrite(native_store, uri, QUARANTINE, version, live, live)
    assert again.conflict and again.version is None
    assert native_store.version(uri) == at and _rows(native_store, uri) == rows


class _Died(BaseException):
    """The process ending at a statement: not an ``Exception``, so no ``except Exception`` on the way handles it."""


def _die_at_alter(spark: Any, monkeypatch: pytest.MonkeyPatch, at: int = 2) -> list[bool]:
    """Make the session's ``at``-th ``ALTER TABLE`` from now on end the process instead of running; return the switch
    that disarms it (set its first item False)."""
    real = spark.sql
    armed, seen = [True], []

    def sql(text: str, *args: Any, **kwargs: Any) -> Any:
        if armed[0] and text.lstrip().upper().startswith("ALTER TABLE"):
            seen.append(text)
            if len(seen) == at:
                raise _Died(text)
        return real(text, *args, **kwargs)

    monkeypatch.setattr(spark, "sql", sql)
    return armed


def _properties(uri: str) -> dict[str, str]:
    from deltalake import DeltaTable

    return dict(DeltaTable(uri).metadata().configuration)


@pytest.mark.parametrize("own", [None, "50"], ids=["no-interval-of-its-own", "an-interval-of-its-own"])
def test_an_interval_a_checkpoint_that_died_left_at_1_is_given_back_by_the_next_hourly_run(
        spark: Any, native_store: TableStore, test_config: LakeshardConfig, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, own: str | None) -> None:
    """The checkpoint through Delta's public SQL (the path under Spark Connect) sets ``delta.checkpointInterval`` to
    1 for one commit and then back; the process dies between the two changes. The next hourly run puts the table's
    own value back (or none), and the table stops writing a checkpoint at every commit."""
    from lakeshard.lake.native.jvm import CommitPath

    cfg = _config(tmp_path, test_config)
    uri = cfg.table_uri(QUARANTINE)
    native_store.create(uri, SCHEMA, partition_by=("part",),
                        properties={} if own is None else {"delta.checkpointInterval": own})
    for i in range(3):
        _append(native_store, uri, i)
    monkeypatch.setattr(native_store, "_commit_path", CommitPath(False, "Delta's public SQL, as under Spark Connect"))
    armed = _die_at_alter(native_store._log.spark, monkeypatch)
    with pytest.raises(_Died):
        native_store.create_checkpoint(uri)
    armed[0] = False
    assert _properties(uri).get("delta.checkpointInterval") == "1"  # left by the process that died

    report = run_pipeline(spark, native_store, cfg, flows=["compact_books"],
                          params={"compact_books": {"max_files": 100}})
    assert report.ok, report.render()
    left = _properties(uri)
    assert left.get("delta.checkpointInterval") == own
    assert not any(k.startswith("lakeshard.checkpoint") for k in left), left
    result = report.flow("compact_books").result
    assert result is not None and QUARANTINE in str(result.details["intervals_restored"])
    checkpoints = native_store.checkpoint_versions(uri)
    for i in range(3, 6):
        _append(native_store, uri, i)
    # No checkpoint per commit any more: only at multiples of the table's interval (Delta's default 10). The hourly
    # run's own commits (more of them when it runs in the daily vacuum's UTC hour) may bring a multiple in reach.
    interval = int(own or 10)
    new = sorted(set(native_store.checkpoint_versions(uri)) - set(checkpoints))
    assert len(new) < 3 and all(v % interval == 0 for v in new), (new, checkpoints)
    assert _rows(native_store, uri) == _rows_by_delta_rs(uri) and len(_rows(native_store, uri)) == 6

    again = compact_bookkeeping(native_store, cfg, tables=[QUARANTINE], max_files=100)
    assert not again.tables[0].interval_restored and _properties(uri) == left


def test_an_interval_its_user_set_after_a_checkpoint_died_is_kept(
        native_store: TableStore, test_config: LakeshardConfig, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from lakeshard.lake.native.jvm import CommitPath
    from lakeshard.lake.native.public import delta_table_name

    cfg = _config(tmp_path, test_config)
    uri = cfg.table_uri(QUARANTINE)
    _grow(native_store, uri, 2)
    monkeypatch.setattr(native_store, "_commit_path", CommitPath(False, "Delta's public SQL, as under Spark Connect"))
    armed = _die_at_alter(native_store._log.spark, monkeypatch)
    with pytest.raises(_Died):
        native_store.create_checkpoint(uri)
    armed[0] = False
    native_store.spark.sql(f"ALTER TABLE {delta_table_name(uri)} SET TBLPROPERTIES ('delta.checkpointInterval' = '7')")

    report = compact_bookkeeping(native_store, cfg, tables=[QUARANTINE], max_files=100)
    assert not report.tables[0].interval_restored
    left = _properties(uri)
    assert left.get("delta.checkpointInterval") == "7"
    assert not any(k.startswith("lakeshard.checkpoint") for k in left), left


def test_a_restore_that_died_before_removing_its_record_is_finished_without_a_change_of_interval(
        native_store: TableStore, test_config: LakeshardConfig, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint's third statement (removing the record after the interval went back) never runs: the next run
    removes the record and leaves the interval as it is."""
    from lakeshard.lake.native.jvm import CommitPath

    cfg = _config(tmp_path, test_config)
    uri = cfg.table_uri(QUARANTINE)
    _grow(native_store, uri, 2)
    monkeypatch.setattr(native_store, "_commit_path", CommitPath(False, "Delta's public SQL, as under Spark Connect"))
    armed = _die_at_alter(native_store._log.spark, monkeypatch, at=3)
    with pytest.raises(_Died):
        native_store.create_checkpoint(uri)
    armed[0] = False
    assert _properties(uri).get("delta.checkpointInterval") == "1000"
    assert _properties(uri).get("lakeshard.checkpoint_interval_before") == "1000"

    report = compact_bookkeeping(native_store, cfg, tables=[QUARANTINE], max_files=100)
    assert not report.tables[0].interval_restored  # it was back already
    left = _properties(uri)
    assert left.get("delta.checkpointInterval") == "1000" and "lakeshard.checkpoint_interval_before" not in left
