"""The log side of the TableStore port on a real Delta table: per-version actions and checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakeshard.errors import TableStoreError
from lakeshard.lake import TableStore


def test_log_entries_and_checkpoints_match_the_snapshots(table_store: TableStore, spark: SparkSession,
                                                         tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table_store.create(uri, spark.range(1).selectExpr("id", "CAST(id % 2 AS STRING) AS part").schema,
                 partition_by=["part"])
    table_store.append(uri, spark.range(6).selectExpr("id", "CAST(id % 2 AS STRING) AS part").coalesce(1),
                 metadata={"step": "load"})
    merged = table_store.read(uri).where("part = '0'").coalesce(1)
    first = [f.path for f in table_store.files(uri) if f.partition_values["part"] == "0"]
    table_store.replace_files(uri, first, merged, data_change=False)
    assert table_store.checkpoint_versions(uri) == []
    assert table_store.create_checkpoint(uri) == 2
    table_store.replace_files(uri, [f.path for f in table_store.files(uri) if f.partition_values["part"] == "1"], None,
                        data_change=True)

    entries = table_store.log_entries(uri)
    assert [e.version for e in entries] == [0, 1, 2, 3]
    assert sorted((c.action, c.file.partition_values["part"], c.file.num_records) for c in entries[1].changes) == [
        ("add", "0", 3), ("add", "1", 3)]
    assert entries[1].custom_metadata["step"] == "load"
    assert {(c.action, c.data_change) for c in entries[2].changes} == {("add", False), ("remove", False)}
    assert [(c.action, c.data_change) for c in entries[3].changes] == [("remove", True)]
    # Replaying the log's adds and removes gives every version's snapshot, paths spelled the same way.
    live: set[str] = set()
    for e in entries:
        for c in e.changes:
            (live.add if c.action == "add" else live.discard)(c.file.path)
        assert live == {f.path for f in table_store.files(uri, version=e.version)}, e.version
    assert {f.path for f in table_store.checkpoint_files(uri, 2)} == {f.path for f in table_store.files(uri, version=2)}
    assert [e.version for e in table_store.log_entries(uri, start=2, end=2)] == [2]
    with pytest.raises(TableStoreError, match="no complete checkpoint at version 1"):
        table_store.checkpoint_files(uri, 1)
    (Path(uri) / "_delta_log" / f"{0:020d}.json").unlink()  # log cleanup after the checkpoint
    with pytest.raises(TableStoreError, match="holds commits from version 1"):
        table_store.log_entries(uri, start=0)
