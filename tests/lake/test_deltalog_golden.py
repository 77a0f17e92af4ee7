"""The Delta project's golden tables (written by delta-spark) replayed by lakeshard's log reader.

Each table's live files, version and app transaction versions must be what delta-rs reads from the same log
and what the golden table was written to hold; tables whose features make a plain replay wrong (deletion
vectors, column mapping, V2 checkpoints) are refused with an error naming the feature. Both the pure replay
(:mod:`lakeshard.lake.protocol.log`) and the native adapter's log reads run on them. The tables are in
``tests/data/delta-golden`` (logs only; see its README for the source and licence).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import unquote

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from lakeshard.errors import UnsupportedByAdapter
from lakeshard.lake.native import NativeTableStore
from lakeshard.lake.protocol.log import (
    LogState,
    checkpoint_parts,
    commit_versions,
    parse_commit,
    replay,
    state_from_checkpoint_rows,
    unsupported_features,
)

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "delta-golden"

# What each table was written to hold at its latest version (Delta's GoldenTables.scala), checked against
# delta-rs below as well: (version, number of live files, app transaction versions).
EXPECTED = {
    "checkpoint": (14, 1, {}),
    "multi-part-checkpoint": (1, 10, {}),
    "only-checkpoint-files": (2, 7, {}),
    "deltalog-getChanges": (2, 0, {"fakeAppId": 3}),
}
REFUSED = {
    "v2-checkpoint-json": "v2Checkpoint",
    "table-with-columnmapping-mode-name": "columnMapping",
    "dv-partitioned-with-checkpoint": "deletionVectors",
}


def _copy(name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(GOLDEN / name, tmp_path / name))


def _replay(root: Path) -> LogState:
    """Replay a table's log from disk: the newest complete classic checkpoint, then the commits after it."""
    log = root / "_delta_log"
    names = [p.name for p in log.iterdir()]
    parts = checkpoint_parts((n, str(log / n)) for n in names)
    complete = [v for v, p in parts.items() if p]
    latest = max([*commit_versions(names), *complete])
    base = None
    if complete:
        cp = max(complete)
        base = state_from_checkpoint_rows(cp, [r for part in parts[cp] for r in pq.read_table(part).to_pylist()])
    start = 0 if base is None else base.version + 1
    commits = [(v, parse_commit((log / f"{v:020d}.json").read_text(), v, table=str(root))[1])
               for v in range(start, latest + 1)]
    return replay(commits, base=base)


def _delta_rs(root: Path) -> tuple[int, set[str], dict[str, int | None]]:
    table = DeltaTable(str(root))
    prefix = str(root).lstrip("/") + "/"
    files = {unquote(uri).split("://")[-1].lstrip("/").removeprefix(prefix) for uri in table.file_uris()}
    return table.version(), files, {app: table.transaction_version(app) for app in ("fakeAppId",)}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_replay_of_golden_tables_matches_delta_rs_and_the_expectations(name: str, tmp_path: Path) -> None:
    root = _copy(name, tmp_path)
    version, count, apps = EXPECTED[name]
    state = _replay(root)
    rs_version, rs_files, rs_apps = _delta_rs(root)
    assert state.version == rs_version == version
    assert {unquote(p) for p in state.files} == rs_files and len(rs_files) == count
    assert state.app_versions == apps == {a: v for a, v in rs_apps.items() if v is not None}
    assert unsupported_features(state) == []


def test_only_checkpoint_files_replay_from_the_checkpoint_alone(tmp_path: Path) -> None:
    root = _copy("only-checkpoint-files", tmp_path)
    expected = _replay(root)
    for v in range(3):
        (root / "_delta_log" / f"{v:020d}.json").unlink()
    state = _replay(root)
    assert state.version == 2 and state.files == expected.files


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_features_a_replay_gets_wrong_are_named(name: str, tmp_path: Path) -> None:
    assert REFUSED[name] in unsupported_features(_replay(_copy(name, tmp_path)))


@pytest.fixture(scope="module")
def reader(spark: SparkSession) -> NativeTableStore:
    return NativeTableStore.for_log_reads(spark)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_native_log_reads_of_golden_tables(reader: NativeTableStore, name: str, tmp_path: Path) -> None:
    root = _copy(name, tmp_path)
    version, count, apps = EXPECTED[name]
    assert reader.version(str(root)) == version
    assert {unquote(f.path) for f in reader.files(str(root))} == _delta_rs(root)[1]
    assert reader.transaction_versions(str(root), ["fakeAppId"]) == {"fakeAppId": apps.get("fakeAppId")}
    if name == "multi-part-checkpoint":
        assert reader.checkpoint_versions(str(root)) == [1] and len(reader.checkpoint_files(str(root), 1)) == count


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_native_log_reads_refuse_golden_tables_naming_the_feature(reader: NativeTableStore, name: str,
                                                                  tmp_path: Path) -> None:
    root = _copy(name, tmp_path)
    with pytest.raises(UnsupportedByAdapter, match=REFUSED[name]):
        reader.files(str(root))


def test_a_v2_checkpoint_without_the_commits_it_covers_is_refused_naming_it(reader: NativeTableStore,
                                                                            tmp_path: Path) -> None:
    root = _copy("v2-checkpoint-json", tmp_path)
    for v in range(3):
        (root / "_delta_log" / f"{v:020d}.json").unlink()
    with pytest.raises(UnsupportedByAdapter, match="v2Checkpoint"):
        reader.files(str(root))
