"""The Delta project's golden tables (written by delta-spark) replayed by lakeshard's log reader.

Each table's live files, version and app transaction versions must be what the golden table was written to
hold, what delta-rs reads from the same log (where it reads it: delta-rs refuses a ``metaData`` without a
schema, which some golden logs have) and what Delta's own reader reports (``DeltaTable.forPath`` and the files
a ``format("delta")`` read would scan, on Delta's JVM); a ``_last_checkpoint`` that is empty, torn, or names a
checkpoint that is not there changes none of it. Tables whose features make a plain replay wrong (deletion
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

from lakeshard.errors import TableStoreError, UnsupportedByAdapter
from lakeshard.lake import TableStore
from lakeshard.lake.embedded.probed_log import probed_state
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
# delta-rs and Delta's reader below as well: (version, number of live files, app transaction versions).
EXPECTED = {
    "checkpoint": (14, 1, {}),
    "multi-part-checkpoint": (1, 10, {}),
    "only-checkpoint-files": (2, 7, {}),
    "deltalog-getChanges": (2, 0, {"fakeAppId": 3}),
    # an add of `/some/...` removed as `file:/some/...` or `file:///some/...`, plain and with `%20`, `@`, `%23`
    "canonicalized-paths-normal-a": (1, 0, {}),
    "canonicalized-paths-normal-b": (1, 0, {}),
    "canonicalized-paths-special-a": (1, 0, {}),
    "canonicalized-paths-special-b": (1, 0, {}),
    # `foo` added, removed, added again in three commits: live
    "delete-re-add-same-file-different-transactions": (3, 2, {}),
    # `special p@#h` (in the log `special%20p@%23h`) added then removed; added only
    "log-replay-special-characters-a": (1, 0, {}),
    "log-replay-special-characters-b": (0, 1, {}),
    # a checkpoint at 10 after commits of files `0`..`10`; the tests below corrupt `_last_checkpoint`
    "corrupted-last-checkpoint": (10, 11, {}),
    # appends, a checkpoint at 10, an overwrite at 11; its `_last_checkpoint` is empty
    "corrupted-last-checkpoint-kernel": (11, 2, {}),
}
# Their first metaData has no schemaString, which delta-rs (its kernel) refuses to load.
WITHOUT_SCHEMA = {
    "canonicalized-paths-normal-a", "canonicalized-paths-normal-b", "canonicalized-paths-special-a",
    "canonicalized-paths-special-b", "corrupted-last-checkpoint",
}
# `_last_checkpoint` as a crash, a bad copy or a stale hint leaves it: Delta lists the log instead.
BAD_LAST_CHECKPOINT = {
    "empty": "",
    "torn": '{"version":10,"si',
    "not JSON": "\x00\x01garbage",
    "a version without a checkpoint": '{"version":7,"size":8}',
    "a version past the table's": '{"version":20,"size":3}',
    "missing parts": '{"version":10,"size":13,"parts":3}',
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
    assert state.version == version and len(state.files) == count and state.app_versions == apps
    assert unsupported_features(state) == []
    if name not in WITHOUT_SCHEMA:
        rs_version, rs_files, rs_apps = _delta_rs(root)
        assert state.version == rs_version and {unquote(p) for p in state.files} == rs_files
        assert state.app_versions == {a: v for a, v in rs_apps.items() if v is not None}


def _name(path: str) -> str:
    return unquote(path).rsplit("/", 1)[-1]


def _deltas_reader(spark: SparkSession, root: Path) -> tuple[int, int, set[str] | None]:
    """Return what Delta's own reader says of the table: its version, its number of live files, and the names
    of the files a ``format("delta")`` read scans (None where the table has no schema to read with)."""
    from delta.tables import DeltaTable as JvmDeltaTable

    table = JvmDeltaTable.forPath(spark, str(root))
    detail = table.detail().first()
    last = table.history(1).first()
    assert detail is not None and last is not None
    scanned = None
    if len(table.toDF().columns):
        scanned = {_name(p) for p in spark.read.format("delta").load(str(root)).inputFiles()}
    return int(last["version"]), int(detail["numFiles"]), scanned


# delta-spark qualifies a scheme-less absolute path with the session's default filesystem, and Hadoop 3.4 spells
# `file:///` qualified as `file:///x`: in the canonicalized-paths tables an add of `/x` is then a different file
# from a remove of `file:/x`. Whether Delta's state reconstruction still pairs them depends on how it spreads the
# two spellings over `spark.databricks.delta.snapshotPartitions`: at Delta's default of 50 the add can stay live
# (where the golden expectation, and lakeshard, have none); at the session's setting (the shuffle partitions,
# lakeshard.runtime.session) Delta agrees with the expectation, and that is what is asserted here.
@pytest.mark.delta_jvm
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_replay_of_golden_tables_matches_deltas_own_reader(native_store: NativeTableStore, name: str,
                                                          tmp_path: Path) -> None:
    root = _copy(name, tmp_path)
    state = _replay(root)
    version, count, scanned = _deltas_reader(native_store.spark, root)
    assert (state.version, len(state.files)) == (version, count)
    if scanned is not None:
        assert {_name(p) for p in state.files} == scanned


@pytest.mark.parametrize("damage", sorted(BAD_LAST_CHECKPOINT))
@pytest.mark.parametrize("name", ["corrupted-last-checkpoint", "corrupted-last-checkpoint-kernel"])
def test_a_corrupted_last_checkpoint_changes_no_reader_s_answer(
    store: TableStore, reader: NativeTableStore, name: str, damage: str, tmp_path: Path
) -> None:
    root = _copy(name, tmp_path)
    expected = _replay(root)
    (root / "_delta_log" / "_last_checkpoint").write_text(BAD_LAST_CHECKPOINT[damage])
    uri = str(root)
    assert _replay(root).files == expected.files
    assert probed_state(uri) is None  # the embedded adapter's own reader trusts no bad hint: delta-rs answers
    assert {f.path for f in reader.files(uri)} == set(expected.files)
    if name in WITHOUT_SCHEMA:  # the embedded store falls back to delta-rs, which cannot load these
        return
    if damage == "a version past the table's":  # delta-rs refuses the table; the embedded store says why
        with pytest.raises(TableStoreError, match="_last_checkpoint"):
            store.files(uri)
    else:
        assert store.version(uri) == expected.version
        assert {unquote(f.path) for f in store.files(uri)} == {unquote(p) for p in expected.files}


@pytest.mark.delta_jvm
def test_deltas_reader_reads_past_a_last_checkpoint_beyond_the_table(native_store: NativeTableStore,
                                                                     tmp_path: Path) -> None:
    """Delta lists the log when the hint names a version past the table's (the one damage delta-rs refuses;
    the empty hint is the golden table's own, compared above)."""
    root = _copy("corrupted-last-checkpoint-kernel", tmp_path)
    (root / "_delta_log" / "_last_checkpoint").write_text(BAD_LAST_CHECKPOINT["a version past the table's"])
    state = _replay(root)
    assert _deltas_reader(native_store.spark, root) == (state.version, len(state.files),
                                                        {_name(p) for p in state.files})



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
    expected = {unquote(p) for p in _replay(root).files} if name in WITHOUT_SCHEMA else _delta_rs(root)[1]
    assert {unquote(f.path) for f in reader.files(str(root))} == expected and len(expected) == count
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
