"""Chunk versions on a real Delta table: per-version ADD/DROP, key frames (checkpoints), reads, the CLI."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from _chunk_table import CHUNK_TABLE_SCHEMA, Rows, ids
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakeshard.app.cli import main
from lakeshard.errors import TableStoreError
from lakeshard.lake import TableStore
from lakeshard.versions import Chunk, ChunkVersions, VersionsError, read_chunk

H10, H11 = "2026-01-01T10", "2026-01-01T11"
ACME10 = Chunk("acme", H10)
History = tuple[str, dict[str, int]]


@pytest.fixture(scope="module")
def history(store: TableStore, rows: Rows, tmp_path_factory: pytest.TempPathFactory) -> History:
    """Build once the table every test here reads (read-only); return its URI and named versions.

    v1 append acme/10 + zeta/10, v2 append acme/10 + acme/11, v3 compact acme/10 (dataChange=false),
    checkpoint at v3, v4 append acme/10, v5 replace acme/10 with nothing.
    """
    uri = str(tmp_path_factory.mktemp("history") / "events")
    store.create(uri, CHUNK_TABLE_SCHEMA, partition_by=["tenant_id", "hour"])
    store.append(uri, rows("acme", H10, "a", 3).unionByName(rows("zeta", H10, "z", 2)))
    store.append(uri, rows("acme", H10, "b", 4).unionByName(rows("acme", H11, "c", 5)))
    acme10 = [f.path for f in store.files(uri) if ACME10.holds(f)]
    merged = store.read(uri).where((F.col("tenant_id") == "acme") & (F.col("hour") == H10)).coalesce(1)
    store.replace_files(uri, acme10, merged, data_change=False, metadata={"why": "compaction"})
    checkpoint = store.create_checkpoint(uri)
    store.append(uri, rows("acme", H10, "d", 2))
    live = [f.path for f in store.files(uri) if ACME10.holds(f)]
    store.replace_files(uri, live, None, data_change=True)
    return uri, {"checkpoint": checkpoint, "latest": store.version(uri)}


def test_rolled_forward_file_sets_equal_the_snapshot_at_every_version(store: TableStore, history: History) -> None:
    chunk_table, steps = history
    for chunk in (ACME10, Chunk("acme", H11), Chunk("zeta", H10)):
        versions = ChunkVersions(store, chunk_table, chunk)
        for v in range(steps["latest"] + 1):
            snap = versions.snapshot(v)
            expected = {f.path for f in store.files(chunk_table, version=v) if chunk.holds(f)}
            assert {f.path for f in snap.files} == expected, (chunk, v)
    fresh = ChunkVersions(store, chunk_table, ACME10)
    at5 = fresh.snapshot(5)
    # The newest key frame at or before v5 is the checkpoint at v3: two commits rolled forward, not five.
    assert (at5.key_frame.kind, at5.key_frame.version, at5.rolled_forward) == ("checkpoint", 3, 2)
    assert at5.files == () and at5.rows == 0
    assert fresh.snapshot(4).rows == 9  # 7 compacted + 2 appended


def test_history_survives_log_cleanup_by_rolling_forward_from_the_checkpoint(
    store: TableStore, history: History, tmp_path: Path
) -> None:
    chunk_table, steps = str(tmp_path / "copy"), history[1]
    shutil.copytree(history[0], chunk_table)
    for v in range(steps["checkpoint"]):  # what log retention does: commits before the checkpoint go away
        (Path(chunk_table) / "_delta_log" / f"{v:020d}.json").unlink()
    versions = ChunkVersions(store, chunk_table, ACME10)
    assert versions.snapshot(4).rows == 9
    assert [v.version for v in versions.log()] == [5, 4, 3]  # what the log still holds
    with pytest.raises(TableStoreError, match="holds commits from version 3"):
        store.log_entries(chunk_table, start=1)


def test_log_show_and_diff_of_a_chunk(store: TableStore, history: History) -> None:
    chunk_table, _ = history
    versions = ChunkVersions(store, chunk_table, ACME10)
    log = versions.log()
    assert [v.version for v in log] == [5, 4, 3, 2, 1]
    assert [(len(v.added), len(v.dropped)) for v in log] == [(0, 2), (1, 0), (1, 2), (1, 0), (1, 0)]
    assert [v.data_change for v in log] == [True, True, False, True, True]
    assert (log[2].rows_added, log[2].rows_dropped) == (7, 7)
    assert versions.show().version == 5 and versions.show(3).rows_added == 7
    with pytest.raises(VersionsError, match="did not add or drop files of chunk acme/2026-01-01T10"):
        versions.show(0)
    with pytest.raises(VersionsError, match=r"versions 0\.\.5; version 9 does not exist"):
        versions.snapshot(9)
    d = versions.diff(2, 4)
    assert (len(d.added), len(d.dropped)) == (2, 2)
    assert sum(f.num_records or 0 for f in d.added) == 9 and sum(f.num_records or 0 for f in d.dropped) == 7
    assert versions.diff(4, 4).added == () and versions.diff(4, 4).dropped == ()


def test_read_chunk_sees_exactly_the_chunks_rows_at_each_version(
    spark: SparkSession, store: TableStore, history: History
) -> None:
    chunk_table, _ = history
    for v in (2, 4):  # before the compaction, and after it plus an append
        expected = store.read(chunk_table, version=v).where((F.col("tenant_id") == "acme") & (F.col("hour") == H10))
        assert ids(read_chunk(spark, store, chunk_table, "acme/2026-01-01T10", v)) == ids(expected), v
    assert read_chunk(spark, store, chunk_table, ACME10).count() == 0  # replaced with nothing, no tombstone
    assert read_chunk(spark, store, chunk_table, "acme/2026-01-01T11").count() == 5


def test_chunks_are_checked() -> None:
    assert Chunk.parse("team/acme/2026-01-01T10") == Chunk("team/acme", H10)
    for bad, why in [("acme", "TENANT/YYYY-MM-DDTHH"), ("acme/2026-01-01", "must look like"),
                     ("acme/2026-13-01T10", "must look like"), ("/2026-01-01T10", "non-empty tenant_id")]:
        with pytest.raises(VersionsError, match=why):
            Chunk.parse(bad)


def test_versions_needs_a_table_partitioned_by_tenant_and_hour(store: TableStore, spark: SparkSession,
                                                                tmp_path: Path) -> None:
    uri = str(tmp_path / "flat")
    store.create(uri, spark.range(1).schema)
    with pytest.raises(VersionsError, match="chunks need tenant_id and hour"):
        ChunkVersions(store, uri, ACME10)


def test_cli_prints_log_diff_and_show_like_git(
    history: History, capsys: pytest.CaptureFixture[str]
) -> None:
    chunk_table, _ = history
    assert main(["versions", "log", "--table", chunk_table, "--chunk", "acme/2026-01-01T10"]) == 0
    out = capsys.readouterr().out
    assert out.index("version 5") < out.index("version 4") < out.index("version 1")
    assert "ADD 1 files (+7 rows)   DROP 2 files (-7 rows)" in out and "dataChange=false" in out
    assert main(["versions", "diff", "--table", chunk_table, "--chunk", "acme/2026-01-01T10",
                 "--from", "2", "--to", "4"]) == 0
    out = capsys.readouterr().out
    assert "4 files changed, 2 added (9 rows +), 2 dropped (7 rows -)" in out
    assert out.count("| ") == 4 and "+" * 40 in out
    assert main(["versions", "show", "--table", chunk_table, "--chunk", "acme/2026-01-01T10"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("version 5") and "2 files changed, 0 added (0 rows +), 2 dropped" in out
    with pytest.raises(SystemExit) as bad:
        main(["versions", "log", "--table", chunk_table, "--chunk", "acme-no-hour"])
    assert bad.value.code == 2
    assert "expected a chunk as TENANT/YYYY-MM-DDTHH" in capsys.readouterr().err
    assert main(["versions", "show", "--table", chunk_table, "--chunk", "acme/2026-01-01T10", "--version", "0"]) == 2
    assert "version 0 of" in capsys.readouterr().err
