"""The Delta log parsed and replayed by the protocol (no Spark): what the native adapter's reads rest on.

Checked two ways: against delta-rs on tables it wrote (its live files and app transaction versions must be
what the replay gives), and on commits shaped as delta-spark writes them (userMetadata, operationMetrics,
in-commit timestamps, table features).
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from lakeshard.errors import TableStoreError
from lakeshard.lake import BYTES_ADDED, ROWS_ADDED, AppTransaction, FileInfo
from lakeshard.lake.protocol.log import (
    COMMIT_ID,
    LogState,
    add_action,
    checkpoint_parts,
    commit_id_of,
    commit_versions,
    decode_user_metadata,
    encode_user_metadata,
    parse_commit,
    remove_action,
    replay,
    state_from_checkpoint_rows,
    table_id,
    txn_action,
    typed_stats,
    unsupported_features,
)


def _replay_table(root: Path) -> LogState:
    """Replay a table's log from disk the way the native adapter does (newest checkpoint, then commits)."""
    log = root / "_delta_log"
    names = [p.name for p in log.iterdir()]
    parts = checkpoint_parts((n, str(log / n)) for n in names)
    latest = max(commit_versions(names))
    base = None
    if any(parts.values()):
        cp = max(v for v, p in parts.items() if p)
        rows = [r for part in parts[cp] for r in pq.read_table(part).to_pylist()]
        base = state_from_checkpoint_rows(cp, rows)
    start = 0 if base is None else base.version + 1
    commits = [(v, parse_commit((log / f"{v:020d}.json").read_text(), v, table=str(root))[1])
               for v in range(start, latest + 1)]
    return replay(commits, base=base)


def _append(root: Path, tenant: str, n: int, app: tuple[str, int] | None = None, mode: str = "append") -> None:
    data = pa.table({"tenant_id": [tenant] * n, "v": list(range(n))})
    props = CommitProperties(app_transactions=[Transaction(*app)] if app else None,
                             custom_metadata={"step": tenant})
    write_deltalake(str(root), data, mode=mode, partition_by=["tenant_id"], commit_properties=props)


@pytest.mark.parametrize("checkpoint", [False, True])
def test_replay_matches_delta_rs_live_files_and_app_transactions(tmp_path: Path, checkpoint: bool) -> None:
    root = tmp_path / "t"
    _append(root, "a", 3, ("writer/0", 1))
    _append(root, "b c", 2, ("writer/1", 7))
    if checkpoint:
        DeltaTable(str(root)).create_checkpoint()
    _append(root, "a", 1, ("writer/0", 2))
    DeltaTable(str(root)).delete("tenant_id = 'b c'")  # removes the files of tenant "b c"
    _append(root, "d", 4)

    state = _replay_table(root)
    theirs = DeltaTable(str(root))
    actions = pa.table(theirs.get_add_actions(flatten=True)).to_pylist()
    assert state.version == theirs.version() == 4
    assert {(f.path, f.size_bytes, f.num_records) for f in state.files.values()} == {
        (a["path"], a["size_bytes"], a["num_records"]) for a in actions}
    assert state.app_versions == {"writer/0": 2, "writer/1": 7}
    assert state.app_versions["writer/0"] == theirs.transaction_version("writer/0")
    assert state.partition_columns == ["tenant_id"]
    assert [f["name"] for f in state.schema_json["fields"]] == ["tenant_id", "v"]
    assert {f.partition_values["tenant_id"] for f in state.files.values()} == {"a", "d"}


def test_replay_refuses_a_gap_in_the_commits() -> None:
    with pytest.raises(TableStoreError, match="version 2 follows version 0"):
        replay([(0, []), (2, [])])


def test_log_entries_of_a_delta_rs_table_carry_changes_txns_and_metadata(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _append(root, "a", 3, ("writer/0", 1))
    entry, _ = parse_commit((root / "_delta_log" / f"{0:020d}.json").read_text(), 0, table=str(root))
    assert entry.app_transactions == (AppTransaction("writer/0", 1),)
    assert [(c.action, c.file.num_records, c.data_change) for c in entry.changes] == [("add", 3, True)]
    assert entry.custom_metadata["step"] == "a"


# A commit as delta-spark's DataFrame writer leaves it (the fields PROTOCOL.md documents; values made up).
SPARK_APPEND = [
    {"commitInfo": {"timestamp": 1767225600123, "inCommitTimestamp": 1767225600100, "operation": "WRITE",
                    "operationParameters": {"mode": "Append", "partitionBy": "[\"tenant_id\"]"},
                    "readVersion": 4, "isolationLevel": "Serializable", "isBlindAppend": True,
                    "operationMetrics": {"numFiles": "1", "numOutputRows": "12", "numOutputBytes": "2048"},
                    "userMetadata": json.dumps({"flow": "ingest", COMMIT_ID: "abc"}),
                    "engineInfo": "Apache-Spark/4.0.0 Delta-Lake/4.0.0", "txnId": "6a1b"}},
    {"txn": {"appId": "writer/3", "version": 17, "lastUpdated": 1767225600000}},
    {"add": {"path": "tenant_id=a%253Ab/part-00000-1.c000.snappy.parquet", "partitionValues": {"tenant_id": "a:b"},
             "size": 2048, "modificationTime": 1767225600000, "dataChange": True,
             "stats": json.dumps({"numRecords": 12, "minValues": {"ts": "2026-01-01T00:00:00.000Z", "day": "2026-01-01",
                                                                   "n": 1},
                                  "maxValues": {"ts": "2026-01-01T01:00:00.001Z", "day": "2026-01-02", "n": 9},
                                  "nullCount": {"ts": 0, "n": 0}})}},
]


def test_a_delta_spark_commit_parses_with_user_metadata_and_operation_metrics() -> None:
    entry, actions = parse_commit("\n".join(json.dumps(a) for a in SPARK_APPEND), 5, table="spark_table")
    assert entry.version == 5 and entry.operation == "WRITE"
    assert entry.timestamp == datetime.fromtimestamp(1767225600.1, tz=UTC)  # the in-commit timestamp wins
    # lakeshard's keys come out of userMetadata; rows and bytes from Delta's own metrics; the commit id stays hidden.
    assert entry.custom_metadata == {"flow": "ingest", ROWS_ADDED: "12", BYTES_ADDED: "2048"}
    assert commit_id_of(actions[0]["commitInfo"]) == "abc"
    assert entry.app_transactions == (AppTransaction("writer/3", 17),)
    (change,) = entry.changes
    assert change.file.path == "tenant_id=a%253Ab/part-00000-1.c000.snappy.parquet"
    assert change.file.partition_values == {"tenant_id": "a:b"} and change.file.num_records == 12


def test_typed_stats_follow_the_schema() -> None:
    schema = {"type": "struct", "fields": [{"name": "ts", "type": "timestamp"}, {"name": "day", "type": "date"},
                                           {"name": "n", "type": "long"}, {"name": "m", "type": {"type": "map"}}]}
    typed = typed_stats({"ts": "2026-01-01T01:00:00.001Z", "day": "2026-01-02", "n": 9, "m": "x"}, schema)
    assert typed == {"ts": datetime(2026, 1, 1, 1, 0, 0, 1000, tzinfo=UTC), "day": date(2026, 1, 2), "n": 9, "m": "x"}


def test_built_actions_parse_back_to_the_same_files() -> None:
    file = FileInfo(path="w-1/tenant_id=x%20y/part-0.parquet", size_bytes=10, num_records=3,
                    partition_values={"tenant_id": "x y"}, modification_time=datetime(2026, 1, 1, tzinfo=UTC))
    stats = {"numRecords": 3, "minValues": {"v": 1}, "maxValues": {"v": 5}, "nullCount": {"v": 0}}
    lines = [add_action(file, data_change=False, stats=stats), remove_action(file, data_change=False,
                                                                              deletion_millis=1767225600000),
             txn_action(AppTransaction("lock/acme/1", 4), millis=1)]
    entry, _ = parse_commit("\n".join(json.dumps(a) for a in lines), 9, table="spark_table")
    add, rem = entry.changes
    assert (add.action, add.data_change, add.file.path, add.file.num_records) == ("add", False, file.path, 3)
    assert add.file.partition_values == file.partition_values and add.file.max_values == {"v": 5}
    assert (rem.action, rem.data_change, rem.file.size_bytes) == ("remove", False, 10)
    assert entry.app_transactions == (AppTransaction("lock/acme/1", 4),)


def test_user_metadata_round_trips_and_foreign_text_is_kept() -> None:
    encoded = encode_user_metadata({"op": "compact", "n": 3, "nested": {"a": [1]}})
    assert decode_user_metadata(encoded) == {"n": "3", "nested": '{"a": [1]}', "op": "compact"}
    assert decode_user_metadata("nightly backfill") == {"userMetadata": "nightly backfill"}
    assert decode_user_metadata("[1, 2]") == {"userMetadata": "[1, 2]"}
    assert decode_user_metadata(None) == {}


def test_unsupported_features_are_named() -> None:
    plain = LogState(protocol={"minReaderVersion": 1, "minWriterVersion": 2},
                     metadata={"configuration": {"delta.enableDeletionVectors": "false"}})
    assert unsupported_features(plain) == []
    dv = LogState(protocol={"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
                            "writerFeatures": ["deletionVectors", "v2Checkpoint"]})
    assert unsupported_features(dv) == ["deletionVectors", "v2Checkpoint"]
    mapped = LogState(metadata={"configuration": {"delta.columnMapping.mode": "name"}})
    assert unsupported_features(mapped) == ["columnMapping"]


def test_checkpoint_parts_need_every_part() -> None:
    names = ["00000000000000000010.checkpoint.parquet",
             "00000000000000000020.checkpoint.0000000001.0000000002.parquet",
             "00000000000000000020.checkpoint.0000000002.0000000002.parquet",
             "00000000000000000030.checkpoint.0000000001.0000000002.parquet",
             "00000000000000000040.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.json",
             "00000000000000000041.json", "_last_checkpoint", "00000000000000000041.crc"]
    parts = checkpoint_parts((n, f"/log/{n}") for n in names)
    assert sorted(parts) == [10, 20, 30] and parts[30] == []
    assert parts[20] == [f"/log/{names[1]}", f"/log/{names[2]}"]
    assert commit_versions(names) == {41}


def test_the_table_id_comes_from_the_first_commits_metadata() -> None:
    first = "\n".join(json.dumps(a) for a in (
        {"commitInfo": {"operation": "CREATE TABLE"}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": {"id": "4f0c-table", "format": {"provider": "parquet"}, "schemaString": "{}",
                      "partitionColumns": [], "configuration": {}}},
    ))
    assert table_id(first) == "4f0c-table"
    assert table_id(json.dumps({"add": {"path": "a.parquet"}})) is None  # a later commit sets no metadata


# Delta's golden tables canonicalized-paths-{normal,special}-{a,b} (delta-io/delta, connectors/golden-tables): a file
# added by a scheme-less absolute path and removed by its qualified form is no longer live.
_CANONICAL_PATH_TABLES = [
    ("/some/unqualified/absolute/path", "file:/some/unqualified/absolute/path"),
    ("/some/unqualified/absolute/path", "file:///some/unqualified/absolute/path"),
    ("/some/unqualified/with%20space/p@%23h", "file:/some/unqualified/with%20space/p@%23h"),
    ("/some/unqualified/with%20space/p@%23h", "file:///some/unqualified/with%20space/p@%23h"),
]


@pytest.mark.parametrize(("added", "removed"), _CANONICAL_PATH_TABLES)
def test_a_file_removed_by_its_canonical_path_is_no_longer_live(added: str, removed: str) -> None:
    from lakeshard.lake.protocol.log import replay

    protocol = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
    metadata = {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}}, "partitionColumns": [],
                             "configuration": {}, "schemaString": '{"type":"struct","fields":[]}'}}
    add = {"add": {"path": added, "partitionValues": {}, "size": 100, "modificationTime": 10, "dataChange": True}}
    kept = {"add": {"path": "part-0.parquet", "partitionValues": {}, "size": 1, "modificationTime": 10,
                    "dataChange": True}}
    remove = {"remove": {"path": removed, "deletionTimestamp": 200, "dataChange": False}}
    assert list(replay([(0, [protocol, metadata, add, kept])]).files) == [added, "part-0.parquet"]
    assert list(replay([(0, [protocol, metadata, add, kept]), (1, [remove])]).files) == ["part-0.parquet"]


@pytest.mark.parametrize(("path", "canonical"), [
    ("/x/y", "file:/x/y"), ("file:/x/y", "file:/x/y"), ("file:///x/y", "file:/x/y"),
    ("file://localhost/x/y", "file:/x/y"), ("file://host/x/y", "file://host/x/y"), ("a/b", "a/b"),
    ("s3://bucket/x", "s3://bucket/x"), ("dbfs:/x", "dbfs:/x"),
])
def test_canonical_paths(path: str, canonical: str) -> None:
    from lakeshard.lake.protocol.log import canonical_path

    assert canonical_path(path) == canonical


def test_a_file_re_added_under_another_form_of_its_path_is_live_once() -> None:
    from lakeshard.lake.protocol.log import replay

    add = {"path": "/data/part-0.parquet", "partitionValues": {}, "size": 1, "modificationTime": 1,
           "dataChange": True}
    qualified = {**add, "path": "file:/data/part-0.parquet", "modificationTime": 2}
    state = replay([(0, [{"add": add}]), (1, [{"add": qualified}])])
    assert list(state.files) == ["file:/data/part-0.parquet"]
    state = replay([(2, [{"remove": {"path": "file:///data/part-0.parquet", "dataChange": True}}])], base=state)
    assert state.files == {}
