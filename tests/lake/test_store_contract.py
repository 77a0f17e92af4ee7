"""The TableStore contract on real Delta tables, for every adapter (``table_store``: embedded, native).

Commits, time travel, typed partition values, statistics, swaps, conflicts, idempotent app transactions,
and interoperability (delta-rs reads what each adapter wrote).
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable  # the independent reader these tests check against
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    DateType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from lakeshard.errors import CommitConflict, TableExists, TableNotFound, TableStoreError, UnsupportedByAdapter
from lakeshard.lake import AppTransaction, TableSpec, TableStore, check_data_file

EVENTS = StructType([
    StructField("tenant_id", StringType(), False),
    StructField("hour", IntegerType(), True),
    StructField("event_id", StringType(), False),
    StructField("ts", TimestampType(), True),
    StructField("attributes", MapType(StringType(), StringType()), True),
])


def _rows(spark: SparkSession, tenant: str, hour: int, n: int, start: int = 0):
    rows = [(tenant, hour, f"{tenant}-{start + i}", None, {"k": str(i)}) for i in range(n)]
    return spark.createDataFrame(rows, EVENTS).coalesce(1)


def _shape(schema: StructType) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]


def _ids(df) -> list[str]:
    return sorted(r.event_id for r in df.select("event_id").collect())


def test_two_appends_then_time_travel_to_each_version(
    table_store: TableStore, spark: SparkSession, tmp_path: Path
) -> None:
    uri = str(tmp_path / "events")
    v0 = table_store.create(uri, EVENTS, partition_by=["tenant_id", "hour"])
    first = table_store.append(uri, _rows(spark, "acme", 1, 3))
    second = table_store.append(uri, _rows(spark, "zeta:co/x y", 2, 2))

    assert (v0, first.version, second.version) == (0, 1, 2)
    assert first.rows_added == 3 and second.rows_added == 2
    assert table_store.read(uri, version=0).count() == 0
    assert _ids(table_store.read(uri, version=1)) == ["acme-0", "acme-1", "acme-2"]
    latest = table_store.read(uri)
    assert _shape(latest.schema) == _shape(EVENTS)  # the table's column order and types, partitions included
    got = {(r.tenant_id, r.hour, r.event_id) for r in latest.collect()}
    odd = "zeta:co/x y"  # characters that need escaping in paths and URIs
    assert got == {("acme", 1, f"acme-{i}") for i in range(3)} | {(odd, 2, f"{odd}-{i}") for i in range(2)}
    assert table_store.read(uri, timestamp=table_store.history(uri)[-1].timestamp).count() == 0
    assert table_store.version(uri) == 2


def test_empty_table_reads_as_empty_frame_with_schema(table_store: TableStore, tmp_path: Path) -> None:
    uri = str(tmp_path / "empty")
    table_store.create(uri, EVENTS, partition_by=["tenant_id"])
    df = table_store.read(uri)
    assert df.count() == 0 and _shape(df.schema) == _shape(EVENTS)


def test_partition_values_restore_with_their_types(
    table_store: TableStore, spark: SparkSession, tmp_path: Path
) -> None:
    schema = StructType([StructField("day", DateType()), StructField("shard", LongType()),
                         StructField("v", StringType())])
    uri = str(tmp_path / "typed")
    table_store.create(uri, schema, partition_by=["day", "shard"])
    table_store.append(uri, spark.createDataFrame([(date(2026, 1, 2), 7, "a"), (None, 8, "b")], schema))
    rows = sorted(table_store.read(uri).collect(), key=lambda r: r.v)
    assert [(r.day, r.shard, r.v) for r in rows] == [(date(2026, 1, 2), 7, "a"), (None, 8, "b")]
    parts = {(f.partition_values["day"], f.partition_values["shard"]) for f in table_store.files(uri)}
    assert parts == {(None, "8"), ("2026-01-02", "7")}


def test_partition_values_with_any_characters_read_back(
    table_store: TableStore, spark: SparkSession, tmp_path: Path
) -> None:
    names = ["a:b", "c d", "e%f", "g+h", "é漢", "i#j", "k?l", "m[n]", "o{p}", "q\\r", "s|t", "u^v", "w`x",
             'y"z', "<>", "a'b", "~!@$&*()=,;", "tab\tx", "/lead", "%2F"]
    uri = str(tmp_path / "odd names")
    table_store.create(uri, EVENTS, partition_by=["tenant_id"])
    # One write spreads over many partition directories: Spark repeats file names across them.
    df = spark.createDataFrame([(n, i, f"e{i}", None, None) for i, n in enumerate(names)], EVENTS).coalesce(1)
    table_store.append(uri, df)
    got = {(r.tenant_id, r.hour) for r in table_store.read(uri).collect()}
    assert got == {(n, i) for i, n in enumerate(names)}


def test_files_report_size_rows_partitions_and_stats(
    table_store: TableStore, spark: SparkSession, tmp_path: Path
) -> None:
    uri = str(tmp_path / "stats")
    table_store.create(uri, EVENTS, partition_by=["tenant_id"])
    df = spark.sql("select 'acme' tenant_id, cast(id % 3 as int) hour, concat('e', id) event_id, "
                   "timestamp_micros(1767225600000000 + id * 1500) ts, map('a','b') attributes from range(10)")
    table_store.append(uri, df.coalesce(1))
    (f,) = table_store.files(uri)
    assert f.num_records == 10 and f.size_bytes > 0 and f.partition_values == {"tenant_id": "acme"}
    assert f.min_values["hour"] == 0 and f.max_values["hour"] == 2
    # Timestamp stats are kept at millisecond precision (delta-rs rounds the max up, delta-spark truncates it):
    # the file's time range is still a bound of its rows.
    assert str(f.min_values["ts"]).startswith("2026-01-01 00:00:00")
    span = f.time_range("ts")
    assert span is not None and span[1] >= datetime(2026, 1, 1, 0, 0, 0, 13500, tzinfo=UTC)


def test_every_file_an_adapter_commits_agrees_with_its_log_statistics(
    table_store: TableStore, spark: SparkSession, tmp_path: Path
) -> None:
    """``check_data_file`` (fsck) compares a footer's min/max with the log's as each adapter writes them: strings
    longer than Delta's statistics prefix, timestamps between milliseconds, negative numbers and nulls."""
    uri = str(tmp_path / "agree")
    table_store.create(uri, EVENTS, partition_by=["tenant_id"])
    df = spark.sql("select concat('t', id % 2) tenant_id, cast(id * 7 - 40 as int) hour, "
                   "concat(repeat('x', 40), id) event_id, "
                   "if(id = 3, null, timestamp_micros(1767225600000000 + id * 1234567 + 321)) ts, "
                   "map('a', 'b') attributes from range(12)")
    table_store.append(uri, df.repartition(2))
    files = table_store.files(uri)
    assert files and all(f.min_values for f in files)
    assert [d for f in files if (d := check_data_file(uri, f)) is not None] == []


@pytest.mark.parametrize(("properties", "with_stats"), [
    ({}, {"hour", "event_id", "ts"}),
    ({"delta.dataSkippingNumIndexedCols": "0"}, set()),
    # The first 3 columns: delta-rs counts the partition column among them, delta-spark counts data columns only.
    ({"delta.dataSkippingNumIndexedCols": "3"},
     {"embedded": {"hour", "event_id"}, "native": {"hour", "event_id", "ts"}}),
    ({"delta.dataSkippingStatsColumns": "ts,hour"}, {"hour", "ts"}),
])
def test_a_tables_stats_properties_choose_the_columns_its_files_keep_stats_for(
    table_store: TableStore, spark: SparkSession, tmp_path: Path, properties: dict[str, str],
    with_stats: set[str] | dict[str, set[str]], request: pytest.FixtureRequest,
) -> None:
    if isinstance(with_stats, dict):
        with_stats = with_stats[request.node.callspec.params["table_store"]]
    uri = str(tmp_path / "stats")
    table_store.create(uri, EVENTS, partition_by=["tenant_id"], properties=properties)
    df = spark.sql("select 'acme' tenant_id, cast(id % 3 as int) hour, concat('e', id) event_id, "
                   "timestamp_micros(1767225600000000 + id * 1500) ts, map('a','b') attributes from range(10)")
    table_store.append(uri, df.coalesce(1))
    (f,) = table_store.files(uri)
    assert f.num_records == 10  # the row count is always there
    assert set(f.min_values) == set(f.max_values) == with_stats
    (add,) = pa.table(DeltaTable(uri).get_add_actions(flatten=True)).to_pylist()  # what another reader sees
    assert {k[len("min."):] for k, v in add.items() if k.startswith("min.") and v is not None} == with_stats


def test_a_malformed_stats_property_is_named_in_the_error() -> None:
    from lakeshard.lake.protocol.datafiles import stats_columns

    with pytest.raises(TableStoreError, match="dataSkippingNumIndexedCols = 'many'"):
        stats_columns({"delta.dataSkippingNumIndexedCols": "many"}, ["a", "b"])
    assert stats_columns({"delta.dataSkippingNumIndexedCols": "-1"}, ["a", "b"]) is None
    assert stats_columns({}, ["a", "b"]) is None  # fewer columns than the default 32: all of them


def test_an_arrow_append_writes_its_files_flat_and_any_partition_value_reads_back(
    table_store: TableStore, tmp_path: Path
) -> None:
    """``append_arrow`` puts every file directly in its write's directory (no ``col=value`` directories: a
    directory is a file system's dearest creation); partition values live in the add actions and the footers,
    and every reader (the store, delta-rs, fsck's footer check) gets them back exactly. A store that cannot commit
    files this process wrote (Delta's engine under Spark Connect) hands the rows to Delta's writer instead, whose
    ``col=value`` directories cannot hold a value longer than a file name (docs/lake.md)."""
    flat = table_store.writes_in_process
    names = ["acme", "a/b", "x=y", "%2F", "tab\tx", "..", "é漢", *(["🦆" * 128] if flat else [])]
    uri = str(tmp_path / "flat")
    table_store.create(uri, EVENTS, partition_by=["tenant_id", "hour"])
    rows = pa.Table.from_pylist([{"tenant_id": n, "hour": h, "event_id": f"{n}-{h}", "ts": None, "attributes": None}
                                 for n in names for h in (1, 2)], schema=table_store.arrow_schema(uri))
    table_store.append_arrow(uri, rows)
    files = table_store.files(uri)
    assert {(f.partition_values["tenant_id"], f.partition_values["hour"]) for f in files} == {
        (n, str(h)) for n in names for h in (1, 2)}
    if flat:
        write_dirs = {f.path.split("/")[0] for f in files}
        assert len(write_dirs) == 1 and all(f.path.count("/") == 1 for f in files)
        (written,) = [p for p in Path(uri).iterdir() if not p.name.startswith("_delta_log")]
        assert [p for p in written.iterdir() if p.is_dir()] == []
    expected = sorted(zip(rows.column("tenant_id").to_pylist(), rows.column("hour").to_pylist(),
                          rows.column("event_id").to_pylist(), strict=True))
    got = sorted((r.tenant_id, r.hour, r.event_id) for r in table_store.read(uri).collect())
    assert got == expected
    independent = DeltaTable(uri).to_pyarrow_table(columns=["tenant_id", "hour", "event_id"]).to_pylist()
    assert sorted((r["tenant_id"], r["hour"], r["event_id"]) for r in independent) == expected
    assert [d for f in files if (d := check_data_file(uri, f)) is not None] == []


def test_arrow_reads_of_file_groups_give_each_group_its_rows_with_partition_values(
    table_store: TableStore, spark: SparkSession, tmp_path: Path
) -> None:
    uri = str(tmp_path / "groups")
    table_store.create(uri, EVENTS, partition_by=["tenant_id", "hour"])
    table_store.append(uri, _rows(spark, "acme", 1, 3))
    table_store.append(uri, _rows(spark, "acme", 1, 2, start=3))
    table_store.append(uri, _rows(spark, "zeta", 2, 4))
    files = table_store.files(uri)
    groups = {t: [f for f in files if f.partition_values["tenant_id"] == t] for t in ("acme", "zeta")}
    groups["none"] = []
    read = table_store.read_arrow_groups(uri, groups, columns=["event_id", "hour", "ts"])
    assert set(read) == {"acme", "zeta", "none"} and read["none"].num_rows == 0
    assert sorted(read["acme"].column("event_id").to_pylist()) == [f"acme-{i}" for i in range(5)]
    assert set(read["zeta"].column("hour").to_pylist()) == {2}  # a partition column, typed as the table's
    assert read["zeta"].schema == table_store.read_arrow(uri, groups["zeta"], columns=["event_id", "hour", "ts"]).schema
    assert read["zeta"].column("ts").null_count == 4


def test_an_arrow_read_with_a_filter_gives_only_the_matching_rows(
    table_store: TableStore, spark: SparkSession, tmp_path: Path
) -> None:
    import pyarrow.compute as pc

    uri = str(tmp_path / "where")
    table_store.create(uri, EVENTS, partition_by=["tenant_id"])
    table_store.append(uri, _rows(spark, "acme", 1, 3))
    table_store.append(uri, _rows(spark, "zeta", 2, 4))
    files = table_store.files(uri)
    on_data = table_store.read_arrow(uri, files, ["event_id"], where=pc.field("event_id").isin(["acme-1", "zeta-3"]))
    assert sorted(on_data.column("event_id").to_pylist()) == ["acme-1", "zeta-3"]
    assert on_data.schema.names == ["event_id"]
    on_partition = table_store.read_arrow(uri, files, ["event_id", "hour"],
                                          where=(pc.field("tenant_id") == "zeta") & (pc.field("hour") == 2))
    assert sorted(on_partition.column("event_id").to_pylist()) == [f"zeta-{i}" for i in range(4)]
    assert table_store.read_arrow(uri, files, where=pc.field("hour") == 9).num_rows == 0


def test_replace_swaps_files_atomically(table_store: TableStore, spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "swap")
    table_store.create(uri, EVENTS, partition_by=["tenant_id"])
    for i in range(3):
        table_store.append(uri, _rows(spark, "acme", 1, 2, start=10 * i))
    before = table_store.files(uri)
    old_version = table_store.version(uri)
    merged = table_store.read(uri).coalesce(1)
    result = table_store.replace_files(uri, [f.path for f in before], merged, metadata={"op": "compact"})

    assert (result.files_removed, result.files_added, result.version) == (3, 1, old_version + 1)
    after = table_store.files(uri)
    assert len(after) == 1 and {f.path for f in after}.isdisjoint({f.path for f in before})
    assert _ids(table_store.read(uri)) == _ids(table_store.read(uri, version=old_version))
    # A reader pinned to the old version still sees the old file set, and it is still readable.
    assert {f.path for f in table_store.files(uri, version=old_version)} == {f.path for f in before}
    assert table_store.read(uri, version=old_version).count() == 6
    assert table_store.history(uri)[0].custom_metadata["op"] == "compact"


def test_replace_of_a_file_no_longer_live_is_a_conflict(
    table_store: TableStore, spark: SparkSession, tmp_path: Path
) -> None:
    uri = str(tmp_path / "swap2")
    table_store.create(uri, EVENTS)
    table_store.append(uri, _rows(spark, "acme", 1, 2))
    (f,) = table_store.files(uri)
    table_store.replace_files(uri, [f.path], table_store.read(uri))
    version = table_store.version(uri)
    with pytest.raises(CommitConflict, match="not live"):
        table_store.replace_files(uri, [f.path], _rows(spark, "acme", 1, 2))
    assert table_store.version(uri) == version and table_store.read(uri).count() == 2


def test_replace_with_nothing_removes_rows(table_store: TableStore, spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "drop")
    table_store.create(uri, EVENTS, partition_by=["tenant_id"])
    table_store.append(uri, _rows(spark, "a", 1, 2))
    table_store.append(uri, _rows(spark, "b", 1, 2))
    drop = [f.path for f in table_store.files(uri) if f.partition_values["tenant_id"] == "a"]
    table_store.replace_files(uri, drop, None, data_change=True)
    assert _ids(table_store.read(uri)) == ["b-0", "b-1"]


def test_recommitting_an_app_transaction_is_a_noop(
    table_store: TableStore, spark: SparkSession, tmp_path: Path
) -> None:
    uri = str(tmp_path / "idem")
    table_store.create(uri, EVENTS)
    txn = [AppTransaction("writer/3", 5)]
    first = table_store.append(uri, _rows(spark, "acme", 1, 4), app_transactions=txn)
    again = table_store.append(uri, _rows(spark, "acme", 1, 4), app_transactions=txn)
    older = table_store.append(uri, _rows(spark, "acme", 1, 4), app_transactions=[AppTransaction("writer/3", 4)])

    assert not first.skipped and again.skipped and older.skipped
    assert again.version == first.version and "already committed" in again.reason
    assert table_store.read(uri).count() == 4
    assert table_store.transaction_version(uri, "writer/3") == 5
    assert table_store.transaction_version(uri, "writer/9") is None
    nxt = table_store.append(uri, _rows(spark, "acme", 1, 1, start=100),
        app_transactions=[AppTransaction("writer/3", 6)])
    assert not nxt.skipped and table_store.transaction_version(uri, "writer/3") == 6
    with pytest.raises(CommitConflict, match="all new or all replayed"):
        table_store.append(uri, _rows(spark, "acme", 1, 1),
                     app_transactions=[AppTransaction("writer/3", 6), AppTransaction("writer/4", 1)])


def test_an_append_overtaken_mid_commit_by_its_own_progress_marks_adds_nothing(
    table_store: TableStore, tmp_path: Path
) -> None:
    """A writer whose commit is under way when another process commits the same progress marks (a stale writer and
    the one that took its shards over) does not add its rows a second time: the other commit lands between this
    one's look at the log and its commit, which Delta's conflict check (the app ids the transaction read) or the
    embedded store's own check must catch."""
    import lakeshard.lake

    uri = str(tmp_path / "overtaken")
    table_store.create(uri, EVENTS, partition_by=["tenant_id"])
    schema, parts = table_store.arrow_schema(uri), table_store.partition_columns(uri)
    marks = [AppTransaction("writer/1", 1), AppTransaction("writer/2", 1)]

    def rows(prefix: str) -> pa.Table:
        return pa.Table.from_pylist([{"tenant_id": "acme", "hour": 1, "event_id": f"{prefix}-{i}", "ts": None,
                                      "attributes": None} for i in range(3)], schema=schema)

    def overtaken(target: str) -> None:
        table_store.append_arrow(uri, rows("theirs"), app_transactions=marks)  # the other writer, first
        lakeshard.lake.write_partitioned(rows("ours"), target, schema, parts)

    if not table_store.writes_in_process:  # Delta's engine under Spark Connect runs no write function of ours
        with pytest.raises(UnsupportedByAdapter):
            table_store.append(uri, None, app_transactions=marks, write=overtaken)
        return
    try:
        result = table_store.append(uri, None, app_transactions=marks, write=overtaken)
    except CommitConflict:
        pass
    else:
        assert result.skipped and result.rows_added == 0, result
    assert _ids(table_store.read(uri)) == [f"theirs-{i}" for i in range(3)]
    assert {t.app_id: table_store.transaction_version(uri, t.app_id) for t in marks} == {
        "writer/1": 1, "writer/2": 1}
    # Recorded as what it is, an append (on Delta's engine a WRITE lets Delta derive the commit's checksum from
    # the previous one instead of recomputing the table's state).
    assert table_store.history(uri, limit=1)[0].operation == "WRITE"


def test_empty_batch_still_commits_progress(table_store: TableStore, spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "progress")
    table_store.create(uri, EVENTS, partition_by=["tenant_id"])
    result = table_store.append(uri, spark.createDataFrame([], EVENTS), app_transactions=[AppTransaction("w/0", 9)])
    assert result.files_added == 0 and result.version == 1
    assert table_store.transaction_version(uri, "w/0") == 9 and table_store.read(uri).count() == 0


def test_delta_rs_reads_what_the_store_wrote(table_store: TableStore, spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "interop")
    table_store.create(uri, EVENTS, partition_by=["tenant_id", "hour"])
    table_store.append(uri, _rows(spark, "acme", 1, 5))
    table_store.append(uri, _rows(spark, "b%c d", 2, 3))
    theirs = pa.table(DeltaTable(uri).to_pyarrow_table())
    assert theirs.num_rows == table_store.read(uri).count() == 8
    assert sorted(theirs.column("event_id").to_pylist()) == _ids(table_store.read(uri))
    assert set(theirs.column("tenant_id").to_pylist()) == {"acme", "b%c d"}


_TEMPORARY = "00000000000000000000.json.d38dffd7-b8f8-4e56-9b02-c68d65a3b81e.tmp"


@pytest.mark.parametrize("leftover", [
    ["_delta_log/"], ["_delta_log/_staged_commits/"],
    # Killed between writing the first commit to its temporary name and renaming it into place.
    ["_delta_log/_staged_commits/", f"_delta_log/.{_TEMPORARY}", f"_delta_log/..{_TEMPORARY}.crc"],
], ids=["log folder", "staged commits folder", "temporary commit"])
def test_a_table_whose_creation_was_killed_before_its_first_commit_is_created_by_the_next_run(
    table_store: TableStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, leftover: list[str]
) -> None:
    """What a process killed inside Delta's creation of a table leaves (Delta's engine makes the folders, then
    writes the first commit; tests/lake/test_native.py kills a creation at that moment)."""
    monkeypatch.setattr(table_store, "creation_wait_s", 0.2, raising=False)  # no other creator to wait for
    uri = str(tmp_path / "t")
    for name in leftover:
        if name.endswith("/"):
            Path(uri, name).mkdir(parents=True)
        else:
            Path(uri, name).write_text('{"commitInfo":{}}\n')
    assert not table_store.exists(uri)
    assert table_store.create(uri, EVENTS, partition_by=["tenant_id", "hour"]) == 0
    # The declared shape, NOT NULL kept: created by CREATE TABLE, not by a first write (which makes columns nullable).
    assert table_store.schema(uri) == EVENTS and table_store.partition_columns(uri) == ["tenant_id", "hour"]


def test_create_checks_shape_and_append_checks_columns(
    table_store: TableStore, spark: SparkSession, tmp_path: Path
) -> None:
    uri = str(tmp_path / "shape")
    table_store.create(uri, EVENTS, partition_by=["tenant_id"])
    assert table_store.create(uri, EVENTS, partition_by=["tenant_id"]) == 0  # same shape: fine
    with pytest.raises(TableExists):
        table_store.create(uri, EVENTS, partition_by=["tenant_id"], exist_ok=False)
    other = StructType([*EVENTS.fields, StructField("extra", StringType())])
    with pytest.raises(TableStoreError, match="different shape"):
        table_store.create(uri, other, partition_by=["tenant_id"])
    bad = _rows(spark, "a", 1, 1).withColumnRenamed("event_id", "evt")
    expected = r"unexpected columns \['evt'\].*missing non-nullable columns \['event_id'\]"
    with pytest.raises(TableStoreError, match=expected):
        table_store.append(uri, bad)
    with pytest.raises(TableNotFound):
        table_store.read(str(tmp_path / "nope"))


def test_create_or_grow_gives_an_older_table_the_nullable_columns_its_schema_gained(
    table_store: TableStore, spark: SparkSession, tmp_path: Path
) -> None:
    uri = str(tmp_path / "older")
    table_store.create(uri, EVENTS, partition_by=["tenant_id"])
    table_store.append(uri, _rows(spark, "acme", 1, 2))
    grown = StructType([*EVENTS.fields, StructField("start_byte", LongType(), True),
                        StructField("end_byte", LongType(), True)])
    version = table_store.create_or_grow(uri, grown, partition_by=["tenant_id"])
    assert version == table_store.version(uri) == 2 and _shape(table_store.schema(uri)) == _shape(grown)
    assert table_store.create_or_grow(uri, grown, partition_by=["tenant_id"]) == 2  # grown once
    assert {r.start_byte for r in table_store.read(uri).collect()} == {None}
    fresh = str(tmp_path / "fresh")
    assert table_store.create_or_grow(fresh, grown, partition_by=["tenant_id"]) == 0
    required = StructType([*grown.fields, StructField("needed", LongType(), False)])
    with pytest.raises(TableStoreError, match="different shape"):
        table_store.create_or_grow(uri, required, partition_by=["tenant_id"])


def test_added_columns_read_as_null_in_older_rows_and_take_values_after(
    table_store: TableStore, spark: SparkSession, tmp_path: Path
) -> None:
    uri = str(tmp_path / "grows")
    table_store.create(uri, EVENTS, partition_by=["tenant_id"])
    table_store.append(uri, _rows(spark, "acme", 1, 2))
    added = StructField("version", IntegerType(), True)
    version = table_store.add_columns(uri, [added])
    assert version == table_store.version(uri) == 2
    grown = StructType([*EVENTS.fields, added])
    assert _shape(table_store.schema(uri)) == _shape(grown)
    assert table_store.create(uri, grown, partition_by=["tenant_id"]) == 2  # the new shape is now the table's
    newer = spark.createDataFrame([("acme", 1, "acme-new", None, {}, 7)], grown)
    table_store.append(uri, newer)
    got = {r.event_id: r.version for r in table_store.read(uri).collect()}
    assert got == {"acme-0": None, "acme-1": None, "acme-new": 7}
    arrow = table_store.read_table_arrow(uri, ["event_id", "version"]).to_pylist()
    assert {r["event_id"]: r["version"] for r in arrow} == got  # the in-process read agrees
    with pytest.raises(TableStoreError, match=r"cannot add the columns \['version'\]: the table has them"):
        table_store.add_columns(uri, [added])
    with pytest.raises(TableStoreError, match=r"as NOT NULL"):
        table_store.add_columns(uri, [StructField("must", StringType(), False)])
    assert table_store.version(uri) == 3  # the refused changes committed nothing


def test_create_all_makes_each_missing_table_once_grows_the_older_and_names_a_misshapen_one(
    table_store: TableStore, spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One call makes a job's tables ready, on Delta's engine side by side: each missing table created once with its
    shape, partitioning, properties and description; an existing table of the same shape left as it is; an older one
    given the nullable columns its spec gained; a second call changes nothing and reads nothing (a job's parts each
    ask for the tables the job made ready); a table of another shape named."""
    older = str(tmp_path / "older")
    table_store.create(older, EVENTS, partition_by=["tenant_id"])
    same = str(tmp_path / "same")
    table_store.create(same, EVENTS)
    grown = StructType([*EVENTS.fields, StructField("start_byte", LongType(), True)])
    fresh = [str(tmp_path / f"fresh{i}") for i in range(5)]
    specs = [TableSpec(older, grown, ("tenant_id",), grow=True), TableSpec(same, EVENTS),
             *(TableSpec(uri, EVENTS, ("tenant_id", "hour")[: i % 3], {"delta.appendOnly": "true"} if i == 2 else None,
                         f"table {i}") for i, uri in enumerate(fresh))]
    table_store.create_all(specs)
    looks: list[str] = []
    for name in ("exists", "schema", "partition_columns", "version", "create", "create_or_grow", "add_columns"):
        real = getattr(table_store, name)
        monkeypatch.setattr(table_store, name, lambda *a, _real=real, _name=name, **k: (looks.append(_name),
                                                                                       _real(*a, **k))[1])
    table_store.create_all(specs)
    assert looks == []  # made ready once in this process: not looked at again
    table_store.create_all([TableSpec(same, EVENTS, description="another description")])
    assert "create" in looks  # another spec of the same table is checked as any other
    monkeypatch.undo()

    assert DeltaTable(older).version() == 1 and _shape(table_store.schema(older)) == _shape(grown)
    assert DeltaTable(same).version() == 0
    for i, uri in enumerate(fresh):
        table = DeltaTable(uri)  # read by delta-rs: what each adapter committed
        assert table.version() == 0, uri
        assert table.metadata().partition_columns == list(("tenant_id", "hour")[: i % 3])
        assert table.metadata().description == f"table {i}"
        assert _shape(table_store.schema(uri)) == _shape(EVENTS)
    assert DeltaTable(fresh[2]).metadata().configuration.get("delta.appendOnly") == "true"

    other = StructType([*EVENTS.fields, StructField("needed", LongType(), False)])
    with pytest.raises(TableStoreError, match=f"{tmp_path / 'same'}.*different shape"):
        table_store.create_all([TableSpec(str(tmp_path / "fresh9"), EVENTS), TableSpec(same, other)])
