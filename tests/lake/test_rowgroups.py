"""A filtered Arrow read of the embedded store decodes only the row groups whose statistics admit the filter."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.types import LongType, StringType, StructField, StructType

from lakeshard.lake import TableStore

SCHEMA = StructType([StructField("key", StringType(), False), StructField("n", LongType(), False)])


def _sorted_table(store: TableStore, uri: str, rows: int, group_rows: int, key: str = "k{i:04d}") -> None:
    store.create(uri, SCHEMA)
    keys = pa.table({"key": [key.format(i=i, odd=i % 2) for i in range(rows)], "n": pa.array(range(rows), pa.int64())})

    def write(target: str) -> None:
        Path(target).mkdir(parents=True, exist_ok=True)
        pq.write_table(keys, f"{target}/part-00000.parquet", row_group_size=group_rows)

    store.append(uri, None, write=write)


def test_a_filter_on_the_sorted_column_decodes_only_its_row_groups(store: TableStore, tmp_path: Path,
                                                                    decoded: list[int]) -> None:
    uri = str(tmp_path / "sorted")
    _sorted_table(store, uri, rows=1000, group_rows=50)
    files = store.files(uri)
    got = store.read_arrow(uri, files, ["n"], where=pc.field("key").isin(["k0007", "k0012", "k0951"]))
    assert sorted(got.column("n").to_pylist()) == [7, 12, 951]
    assert decoded == [100], "two row groups of 50 hold the three keys"
    assert store.read_arrow(uri, files, where=pc.field("key") == "zzz").num_rows == 0
    assert decoded[-1] == 0


def test_a_filter_the_statistics_cannot_bound_still_gives_exactly_the_matching_rows(
        store: TableStore, tmp_path: Path, decoded: list[int]) -> None:
    uri = str(tmp_path / "unsorted")
    _sorted_table(store, uri, rows=300, group_rows=50, key="odd={odd}")
    got = store.read_arrow(uri, store.files(uri), ["n"], where=pc.field("key") == "odd=1")
    assert got.column("n").to_pylist() == list(range(1, 300, 2))
    assert decoded == [300]
