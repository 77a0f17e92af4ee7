"""Streaming k-way merge: sorted disjoint outputs, the same rows, and Arrow memory under the budget (measured)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeshard.compaction import EVENTS_SORT_SCHEMA
from lakeshard.compaction.merge import MergeError, batch_rows_for, merge_sorted_files
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
