"""Streaming k-way merge: sorted disjoint outputs, the same rows, and Arrow memory under the budget (measured)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeshard.compaction import EVENTS_SORT_SCHEMA
from lakeshard.compaction.merge import MergeError, OverBudget, batch_rows_for, merge_sorted_files
from lakeshard.compaction.outliers import OutlierSplit
from lakeshard.compaction.sort_schema import key_of

_COLS = list(EVENTS_SORT_SCHEMA.columns)


def _write_input(path: Path, rng: random.Random, rows: int, message_bytes: int) -> None:
    base = datetime(2026, 1, 1, 10, tzinfo=UTC)
    data = [{"service": rng.choice(["api", "auth", "db", None]), "status": rng.choice(["info", "warn"]),
             "env": rng.choice(["prod", "dev"]), "ts": base + timedelta(microseconds=rng.randrange(10**9)),
             "event_id": f"{path.stem}-{i}", "message": rng.randbytes(message_bytes // 2).hex()} for i in range(rows)]
    data.sort(key=lambda r: key_of([r[c] for c in _COLS]))
    # Small row groups, as a writer flushing often leaves them: the merge reads one row group at a time.
    pq.write_table(pa.Table.from_pylist(data), path, row_group_size=50)


@pytest.fixture
def arrow_peak() -> Iterator[pa.MemoryPool]:
    """Route Arrow allocations through a proxy pool for the test, so its high-water mark is this test's."""
    previous = pa.default_memory_pool()
    proxy = pa.proxy_memory_pool(previous)
    pa.set_memory_pool(proxy)
    try:
        yield proxy
    finally:
        pa.set_memory_pool(previous)


def test_merge_of_inputs_larger_than_the_budget_stays_under_it(tmp_path: Path, arrow_peak: pa.MemoryPool) -> None:
    """12 inputs of 1.2 MB each (14 MB) merge under a 4 MB budget; outputs sorted, disjoint, same rows."""
    rng = random.Random(5)
    inputs = []
    for i in range(12):
        path = tmp_path / f"in{i}.parquet"
        _write_input(path, rng, 300, 4_000)
        inputs.append(str(path))
    total = sum(pq.ParquetFile(p).metadata.num_rows for p in inputs)
    uncompressed = total * 4_000  # the message column alone
    budget = 4 * 1024 * 1024
    assert uncompressed > 3 * budget
    batch = batch_rows_for(inputs, budget)
    stats = merge_sorted_files(inputs, EVENTS_SORT_SCHEMA, lambda n: str(tmp_path / f"out{n}.parquet"),
                               target_rows=1_000, memory_budget_bytes=budget, batch_rows=batch)
    print(f"merged {uncompressed} bytes, batch {batch} rows: Arrow peak {arrow_peak.max_memory()}, budget {budget}")
    assert arrow_peak.max_memory() <= budget, f"Arrow peak {arrow_peak.max_memory()} > budget {budget}"
    assert stats.peak_pending_bytes <= budget
    assert stats.rows == total and len(stats.outputs) >= 3
    # Output row groups gather about one batch per input, not one tiny group per merge step.
    assert pq.ParquetFile(stats.outputs[0]).metadata.row_group(0).num_rows >= batch * len(inputs)
    ids_in = sorted(pq.read_table(inputs[0]).column("event_id").to_pylist()
                    + [e for p in inputs[1:] for e in pq.read_table(p).column("event_id").to_pylist()])
    ids_out = sorted(e for p in stats.outputs for e in pq.read_table(p).column("event_id").to_pylist())
    assert ids_out == ids_in
    previous_last = None
    for p in stats.outputs:
        keys = [key_of([r[c] for c in _COLS]) for r in pq.read_table(p, columns=_COLS).to_pylist()]
        assert keys == sorted(keys)
        if previous_last is not None:
            assert previous_last < keys[0], "outputs overlap"
        previous_last = keys[-1]


def test_merge_rejects_unsorted_input_and_impossible_budget(tmp_path: Path) -> None:
    """An input out of order and a budget below one row per input raise MergeError naming the problem."""
    path = tmp_path / "bad.parquet"
    rows = [{"service": s, "status": "info", "env": "prod", "ts": datetime(2026, 1, 1, tzinfo=UTC)}
            for s in ["b", "a"] * 60]
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=50)
    with pytest.raises(MergeError, match="is not sorted"):
        merge_sorted_files([str(path)], EVENTS_SORT_SCHEMA, lambda n: str(tmp_path / f"o{n}.parquet"),
                           target_rows=10, memory_budget_bytes=2**20, batch_rows=50, strategy="stream")
    with pytest.raises(MergeError, match="cannot hold one row"):
        batch_rows_for([str(path)], 1)


def _write_skewed(path: Path, rng: random.Random, rows: int, *, sort: bool = True) -> None:
    """An input where status "critical" (~1%) and a null env (~1%) are rare in every service."""
    base = datetime(2026, 1, 1, 10, tzinfo=UTC)
    data = [{"service": rng.choice(["api", "auth", "db", None]),
             "status": "critical" if rng.random() < 0.01 else rng.choice(["info", "warn"]),
             "env": None if rng.random() < 0.01 else rng.choice(["prod", "dev"]),
             "ts": base + timedelta(microseconds=rng.randrange(10**6)),  # ties in the key on purpose
             "event_id": f"{path.stem}-{i}"} for i in range(rows)]
    if sort:
        data.sort(key=lambda r: key_of([r[c] for c in _COLS]))
    pq.write_table(pa.Table.from_pylist(data), path, row_group_size=100)


def _keys(path: str) -> list[tuple[object, ...]]:
    return [key_of([r[c] for c in _COLS]) for r in pq.read_table(path, columns=_COLS).to_pylist()]


def _skewed_inputs(tmp_path: Path, n: int = 6, rows: int = 400, *, sort: bool = True) -> list[str]:
    rng = random.Random(11)
    inputs = []
    for i in range(n):
        path = tmp_path / f"in{i}.parquet"
        _write_skewed(path, rng, rows, sort=sort)
        inputs.append(str(path))
    return inputs


@pytest.mark.parametrize("strategy", ["memory", "stream"])
def test_outlier_split_keeps_every_row_sorts_both_lanes_and_isolates_rare_values(tmp_path: Path,
                                                                                  strategy: str) -> None:
    """Rows with a rare status/env land in the outlier lane only; each file is sorted, each lane disjoint;
    the multiset of rows is unchanged; each output's recorded description is what the file holds."""
    inputs = _skewed_inputs(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    stats = merge_sorted_files(inputs, EVENTS_SORT_SCHEMA, lambda n: str(out / f"{n}.parquet"), target_rows=300,
                               memory_budget_bytes=64 * 2**20, batch_rows=70, outliers=OutlierSplit(),
                               strategy=strategy)  # type: ignore[arg-type]
    assert stats.in_memory == (strategy == "memory")
    assert stats.rare == {"status": frozenset({"critical"}), "env": frozenset({None})}
    ids_in = sorted(e for p in inputs for e in pq.read_table(p).column("event_id").to_pylist())
    ids_out = sorted(e for p in stats.outputs for e in pq.read_table(p).column("event_id").to_pylist())
    assert ids_out == ids_in and stats.rows == len(ids_in)
    lanes: dict[bool, list[tuple[object, object]]] = {False: [], True: []}
    for f in stats.files:
        rows = pq.read_table(f.path, columns=_COLS).to_pylist()
        keys = _keys(f.path)
        assert keys == sorted(keys), f"{f.path} is not sorted"
        rare_rows = [r for r in rows if r["status"] == "critical" or r["env"] is None]
        assert len(rare_rows) == (len(rows) if f.outlier else 0)
        assert (f.rows, key_of(f.first), key_of(f.last)) == (len(rows), keys[0], keys[-1])
        assert f.distinct == {c: frozenset(r[c] for r in rows) for c in EVENTS_SORT_SCHEMA.string_columns}
        lanes[f.outlier].append((keys[0], keys[-1]))
    assert lanes[True] and len(lanes[False]) >= 3
    for spans in lanes.values():
        spans.sort()
        assert all(a[1] < b[0] for a, b in itertools.pairwise(spans)), "a lane's outputs overlap"


def test_in_memory_and_streaming_merges_write_the_same_files(tmp_path: Path) -> None:
    """Both strategies give the same outputs: same lanes, same keys in the same order, same rows per file
    (file numbers may differ: the outlier lane opens its file when its first row comes)."""
    inputs = _skewed_inputs(tmp_path)
    results = {}
    for strategy in ("memory", "stream"):
        out = tmp_path / strategy
        out.mkdir()
        stats = merge_sorted_files(inputs, EVENTS_SORT_SCHEMA, lambda n, o=out: str(o / f"{n}.parquet"),
                                   target_rows=250, memory_budget_bytes=64 * 2**20, batch_rows=40,
                                   outliers=OutlierSplit(), strategy=strategy)  # type: ignore[arg-type]
        results[strategy] = [(f.outlier, _keys(f.path),
                              sorted(pq.read_table(f.path).column("event_id").to_pylist())) for f in stats.files]
    assert results["memory"] == results["stream"]


def test_in_memory_merge_sorts_unsorted_inputs_within_the_budget_and_bigger_ones_stream(
        tmp_path: Path, arrow_peak: pa.MemoryPool) -> None:
    """Unsorted inputs that fit merge in memory under the budget (measured); inputs past a third of the budget
    stream instead, and strategy="memory" refuses them with OverBudget."""
    inputs = _skewed_inputs(tmp_path, sort=False)
    decoded = sum(pq.read_table(p).nbytes for p in inputs)
    budget = 4 * decoded
    stats = merge_sorted_files(inputs, EVENTS_SORT_SCHEMA, lambda n: str(tmp_path / f"m{n}.parquet"),
                               target_rows=300, memory_budget_bytes=budget, outliers=OutlierSplit())
    assert stats.in_memory
    assert arrow_peak.max_memory() <= budget, f"Arrow peak {arrow_peak.max_memory()} > budget {budget}"
    for p in stats.outputs:
        assert _keys(p) == sorted(_keys(p))
    with pytest.raises(OverBudget, match="do not fit the in-memory merge"):
        merge_sorted_files(inputs, EVENTS_SORT_SCHEMA, lambda n: str(tmp_path / f"x{n}.parquet"),
                           target_rows=300, memory_budget_bytes=decoded, strategy="memory")
    (tmp_path / "sorted").mkdir()
    sorted_inputs = _skewed_inputs(tmp_path / "sorted")
    stats = merge_sorted_files(sorted_inputs, EVENTS_SORT_SCHEMA, lambda n: str(tmp_path / f"s{n}.parquet"),
                               target_rows=300, memory_budget_bytes=decoded)
    assert not stats.in_memory and stats.batch_rows > 0
    assert not list(tmp_path.glob("x*.parquet")), "a refused in-memory merge wrote files"
