"""The embedded store's add actions for files a write function reports (:func:`written_adds`) against the add
actions read back from the same files' footers (:func:`collect_adds`): same paths, sizes, partition values, rows
and Delta statistics, whatever the data."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

import lakeshard.lake.embedded.write as embedded_write
from lakeshard.lake import check_data_file
from lakeshard.lake.embedded import EmbeddedTableStore
from lakeshard.lake.embedded.write import TableShape, collect_adds, written_adds
from lakeshard.lake.protocol.datafiles import NUM_INDEXED_COLS, STATS_COLUMNS
from lakeshard.lake.protocol.partitions import write_partitioned

SCHEMA = pa.schema([
    ("tenant_id", pa.string()), ("hour", pa.string()), ("event_id", pa.string()),
    ("ts", pa.timestamp("us", tz="UTC")), ("message", pa.string()), ("attributes", pa.map_(pa.string(), pa.string())),
    ("size_bytes", pa.int32()), ("score", pa.float64()), ("late", pa.bool_()),
])
PARTS = ["tenant_id", "hour"]

# Unicode of every plane (no lone surrogates: not UTF-8), strings around Delta's 32-character statistics bound,
# and values past the Parquet writer's 4 KiB statistics bound (no min/max in the footer then).
text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)
strings = text | st.sampled_from(["", "a" * 32, "a" * 33, "é" * 32, "\U0010ffff" * 33, "z" * 5000])
tenants = (st.sampled_from(["a", "b/c", "d=e", "%", "ü", "x" * 128, "🦆" * 128])
           | st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=8))
instants = st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC))
row = st.fixed_dictionaries({
    "tenant_id": tenants,
    "hour": st.sampled_from(["2026-11-26T10", "2026-11-26T11"]),
    "event_id": strings,
    "ts": instants,
    "message": st.none() | strings,
    "attributes": st.none() | st.dictionaries(text, st.none() | text, max_size=3).map(lambda d: list(d.items())),
    "size_bytes": st.none() | st.integers(-(2**31), 2**31 - 1),
    "score": st.none() | st.floats(allow_nan=True, allow_infinity=True),
    "late": st.none() | st.booleans(),
})
# Which columns a table's statistics cover: Delta's default (the first 32), the first few, none, named ones.
configurations = st.sampled_from([{}, {NUM_INDEXED_COLS: "3"}, {NUM_INDEXED_COLS: "0"}, {NUM_INDEXED_COLS: "-1"},
                                  {STATS_COLUMNS: "message,ts,score"}])


def _shape(uri: str, configuration: dict[str, str]) -> TableShape:
    fields = [{"name": f.name, "type": "string", "nullable": True, "metadata": {}} for f in SCHEMA]
    return TableShape(uri, tuple(PARTS), configuration, {"type": "struct", "fields": fields})


def _comparable(adds: list[Any]) -> list[tuple[Any, ...]]:
    """The add actions as comparable values (modification times aside: a write's clock against a file's mtime)."""
    return sorted((a.path, a.size, dict(a.partition_values), a.data_change, _stats(json.loads(a.stats)))
                  for a in adds)


def _stats(stats: dict[str, Any]) -> str:
    """Statistics as text, a NaN equal to a NaN."""
    return json.dumps(stats, sort_keys=True, default=str).replace("NaN", "nan")


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(row, min_size=1, max_size=40), configurations)
def test_the_files_a_write_reports_commit_as_their_footers_read_back(tmp_path: Path, rows: list[dict[str, Any]],
                                                                     configuration: dict[str, str]) -> None:
    """Stats from the footers the writer kept equal the stats read from the files: nulls, unicode, strings past 32
    characters and past the writer's statistics bound, NaN and infinities, timestamps to the microsecond, values
    too long for a directory name (held in the footer), every choice of indexed columns."""
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    target = tmp_path / f"w{len(list(tmp_path.iterdir()))}"
    written = write_partitioned(table, str(target), SCHEMA, PARTS, ["ts"])
    shape = _shape(str(tmp_path), configuration)

    reported, reported_rows, _ = written_adds(shape, "w", str(target), written, True)
    read_back, read_rows, _ = collect_adds(shape, "w", str(target), True)

    assert reported_rows == read_rows == table.num_rows
    assert len(reported) == len({(r["tenant_id"], r["hour"]) for r in rows})
    assert _comparable(reported) == _comparable(read_back)


def test_a_written_file_without_its_partition_values_is_refused(tmp_path: Path) -> None:
    table = pa.Table.from_pylist([{"tenant_id": "a", "hour": "h", "event_id": "e", "ts": datetime(2026, 1, 1)}],
                                 schema=SCHEMA)
    written = write_partitioned(table, str(tmp_path / "w"), SCHEMA, PARTS)
    lacking = [type(f)(f.path, f.size_bytes, {"tenant_id": "a"}, f.footer) for f in written]
    with pytest.raises(embedded_write.TableStoreError, match=r"no partition values for \['hour'\]"):
        written_adds(_shape(str(tmp_path), {}), "w", str(tmp_path / "w"), lacking, True)


def test_an_arrow_append_opens_none_of_the_files_it_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``append_arrow`` commits from the footers its write kept; the log's statistics then agree with the files."""
    store = EmbeddedTableStore(None)
    uri = str(tmp_path / "events")
    store.create(uri, StructType([StructField("tenant_id", StringType(), False),
                                  StructField("event_id", StringType(), False),
                                  StructField("ts", TimestampType(), False)]), partition_by=["tenant_id"])
    start = datetime(2026, 11, 26, tzinfo=UTC)
    rows = pa.table({"tenant_id": ["a", "b", "a", "ü" * 100], "event_id": ["1", "2", "3" * 40, "4"],
                     "ts": [start + timedelta(microseconds=n) for n in (1, 2, 1001, 0)]})

    def no_read(*args: object, **kwargs: object) -> None:
        raise AssertionError("a file the append wrote was opened again")

    monkeypatch.setattr(embedded_write, "footer_stats_and_values", no_read)
    result = store.append_arrow(uri, rows)

    assert result.rows_added == 4 and result.files_added == 3
    files = store.files(uri)
    assert sorted(f.partition_values["tenant_id"] for f in files) == ["a", "b", "ü" * 100]
    assert [check_data_file(uri, f) for f in files] == [None, None, None]
    by_tenant = {f.partition_values["tenant_id"]: f for f in files}
    assert by_tenant["a"].num_records == 2
    # A max of 40 characters is past Delta's bound for strings: no min/max of event_id for that file.
    assert "event_id" not in by_tenant["a"].min_values and "event_id" not in by_tenant["a"].max_values
    assert by_tenant["b"].min_values["event_id"] == by_tenant["b"].max_values["event_id"] == "2"
    assert by_tenant["a"].time_range("ts") == (start, start + timedelta(microseconds=2999))  # ms, max rounded up
    assert by_tenant["b"].null_counts == {"event_id": 0, "ts": 0}
