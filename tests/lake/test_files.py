"""Partitioned Parquet writes from Arrow (``lakeshard.lake.protocol.partitions.write_partitioned``), and file URIs."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lakeshard.lake.protocol.partitions as files
from lakeshard.lake.protocol.filesystem import normalise_uri

SCHEMA = pa.schema([("tenant_id", pa.string()), ("hour", pa.int32()), ("event_id", pa.string()),
                    ("ts", pa.int64())])
tenants = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=12)
rows = st.lists(st.tuples(st.sampled_from(["a", "b/c", "d=e", "%", "ü"]) | tenants, st.integers(0, 5),
                          st.text(max_size=5), st.integers(-5, 5)), min_size=1, max_size=60)


def _written(table: pa.Table, root: Path, *, presorted: bool = False) -> dict[tuple[str, str], list[dict[str, object]]]:
    """Return every file written, by (partition values its footer carries, file number), with its rows; every
    file sits directly in ``root``."""
    files.write_partitioned(table, str(root), SCHEMA, ["tenant_id", "hour"], ["ts"], presorted=presorted)
    out = {}
    for path in root.iterdir():
        assert path.is_file() and path.suffix == ".parquet", path
        number = re.match(r"part-(\d+)-", path.name)
        assert number is not None
        content = pq.read_table(path)
        values = (content.schema.metadata or {})[files.PARTITION_VALUES_KEY].decode()
        out[(values, number.group(1))] = content.to_pylist()
    return out


@settings(max_examples=60)
@given(rows)
def test_files_written_side_by_side_are_the_files_written_one_by_one(data: list[tuple[str, int, str, int]]) -> None:
    """Each partition's file, its partition values, its rows and their order do not depend on how many threads
    write."""
    table = pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in data], schema=SCHEMA)
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        patch.setattr(files, "driver_threads", lambda: 1)
        alone = _written(table, Path(tmp) / "alone")
        patch.setattr(files, "driver_threads", lambda: 4)
        patch.setattr(files, "_FILES_PER_THREAD", 1)
        together = _written(table, Path(tmp) / "together")
        patch.setattr(files, "driver_threads", lambda: 1)
        # Rows handed over in the order partition_order gives are written without a gather of their own.
        ordered = _written(table.take(files.partition_order(table, ["tenant_id", "hour"], ["ts"])),
                           Path(tmp) / "ordered")
    assert together == alone
    assert ordered == alone
    partitions = {(r[0], r[1]) for r in data}
    assert {tuple(json.loads(v).values()) for v, _ in alone} == {(t, str(h)) for t, h in partitions}
    assert len(alone) == len(partitions)  # one file per partition
    assert sum(len(v) for v in alone.values()) == len(data)
    for content in alone.values():
        assert [r["ts"] for r in content] == sorted(r["ts"] for r in content)


@pytest.mark.parametrize(("given", "expected"), [
    ("dbfs:/Volumes/main/lake/vol/events/", "dbfs:/Volumes/main/lake/vol/events"),
    ("dbfs:/mnt/lake/events", "dbfs:/mnt/lake/events"),
    ("s3://bucket/lake/events/", "s3://bucket/lake/events"),
    ("file:///tmp/lake/odd%20name", "/tmp/lake/odd name"),
    ("/Volumes/main/lake/vol/events", "/Volumes/main/lake/vol/events"),
])
def test_normalise_uri_keeps_single_slash_uris_as_uris(given: str, expected: str) -> None:
    assert normalise_uri(given) == expected


@pytest.mark.parametrize("reported", [
    "dbfs:/Volumes/main/lake/vol/events/tenant_id=a/part-0.parquet",  # a Databricks runtime's qualification
    "file:/Volumes/main/lake/vol/events/tenant_id=a/part-0.parquet",
    "file:///Volumes/main/lake/vol/events/tenant_id=a/part-0.parquet",
    "/Volumes/main/lake/vol/events/tenant_id=a/part-0.parquet",
])
@pytest.mark.parametrize("configured", ["/Volumes/main/lake/vol/events", "dbfs:/Volumes/main/lake/vol/events",
                                        "file:/Volumes/main/lake/vol/events"])
def test_a_volume_file_has_one_identity_however_the_runtime_qualifies_it(reported: str, configured: str) -> None:
    from lakeshard.lake.protocol.datafiles import file_key, spark_file_uri

    ours = spark_file_uri(f"{configured}/tenant_id=a/part-0.parquet")
    assert file_key(reported) == file_key(ours) == "/Volumes/main/lake/vol/events/tenant_id=a/part-0.parquet"
    assert file_key("s3://bucket/x/part-0.parquet") == "s3://bucket/x/part-0.parquet"


@pytest.mark.parametrize(("location", "local"), [
    ("dbfs:/Volumes/main/lake/vol/events", "/Volumes/main/lake/vol/events"),  # a volume's FUSE mount
    ("dbfs:/mnt/lake/events", "/dbfs/mnt/lake/events"),  # the DBFS FUSE mount
    ("/Volumes/main/lake/vol/events", "/Volumes/main/lake/vol/events"),
])
def test_python_reads_a_dbfs_location_where_a_databricks_runtime_mounts_it(location: str, local: str) -> None:
    from pyarrow.fs import LocalFileSystem

    from lakeshard.lake.protocol.filesystem import filesystem

    fs, path = filesystem(location)
    assert isinstance(fs, LocalFileSystem) and path == local


longs = st.integers(-(2**63), 2**63 - 1)
keys = st.none() | st.sampled_from(["", "a", "A", "é", "e\u0301", "z", "🦆", "a" * 40]) | st.text(max_size=3)


@settings(max_examples=120)
@given(st.lists(st.tuples(keys, keys, st.none() | st.integers(-3, 3), keys, st.none() | longs), max_size=80),
       st.permutations(["p", "q", "n", "s", "w"]), st.integers(0, 5))
def test_partition_order_is_the_stable_sort_of_the_key_columns(data: list[tuple[object, ...]], columns: list[str],
                                                               split: int) -> None:
    """Strings and integers ranked among their distinct values (and folded into one) sort as the values themselves,
    in any order of the keys: nulls first, code point order, rows equal on every key in their original order."""
    types = {"p": pa.string(), "q": pa.string(), "n": pa.int64(), "s": pa.string(), "w": pa.int64()}
    table = pa.table({c: pa.array([r[i] for r in data], t) for i, (c, t) in enumerate(types.items())})
    expected = pc.sort_indices(table, options=files.ascending_nulls_first(columns))
    got = files.partition_order(table, columns[:split], columns[split:])
    assert got.to_pylist() == expected.to_pylist()


@settings(max_examples=60)
@given(rows, st.booleans())
def test_rows_said_to_be_presorted_are_written_as_sorted_rows_are(data: list[tuple[str, int, str, int]],
                                                                  shuffle: bool) -> None:
    """A caller's promise that its rows are in partition order is checked for what makes the files: rows of one
    partition value in more than one run are sorted first. Each file then holds the rows the unsorted table's
    file holds (in the same order when the rows really were in order)."""
    table = pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in data], schema=SCHEMA)
    in_order = table.take(files.partition_order(table, ["tenant_id", "hour"], ["ts"]))
    handed = in_order.take(pa.array(np.random.default_rng(len(data)).permutation(len(data)))) if shuffle else in_order
    with tempfile.TemporaryDirectory() as tmp:
        expected = _written(table, Path(tmp) / "plain")
        got = _written(handed, Path(tmp) / "presorted", presorted=True)
    def by_partition(written: dict[tuple[str, str], list[dict[str, object]]]) -> dict[str, list[str]]:
        return {values: sorted(map(repr, content)) for (values, _), content in written.items()}

    assert len(got) == len(expected) and by_partition(got) == by_partition(expected)  # one file a partition
    if not shuffle:
        assert got == expected


def test_columns_said_to_be_distinct_are_written_without_a_dictionary_and_read_back_the_same(tmp_path: Path) -> None:
    """``plain`` columns (a map's leaves included) carry no dictionary page; every other column keeps one, and the
    rows read back are the rows written."""
    schema = pa.schema([("tenant_id", pa.string()), ("event_id", pa.string()), ("service", pa.string()),
                        ("attributes", pa.map_(pa.string(), pa.string())), ("tags", pa.list_(pa.string())),
                        ("where", pa.struct([("city", pa.string())]))])
    n = 300
    table = pa.table({"tenant_id": ["t"] * n, "event_id": [f"e{i}" for i in range(n)],
                      "service": [f"s{i % 3}" for i in range(n)],
                      "attributes": pa.array([[("k", f"v{i % 2}")] for i in range(n)], schema.field("attributes").type),
                      "tags": [["a", "b"]] * n, "where": [{"city": "Zürich"}] * n}, schema=schema)
    for plain in (("event_id",), ("event_id", "attributes", "tags", "where")):
        written = files.write_partitioned(table, str(tmp_path / "-".join(plain)), schema, ["tenant_id"], plain=plain)
        (only,) = written
        path = tmp_path / "-".join(plain) / only.path
        chunks = pq.ParquetFile(path).metadata.row_group(0)
        encoded = {chunks.column(i).path_in_schema.split(".")[0]: chunks.column(i).has_dictionary_page
                   for i in range(chunks.num_columns)}
        assert encoded == {c: c not in plain for c in schema.names if c != "tenant_id"}
        assert pq.read_table(path).to_pylist() == table.drop_columns(["tenant_id"]).to_pylist()
