"""lakeshard.sortorder: Spark's ascending order (nulls first, stable) on whichever pyarrow is installed."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeshard.sortorder import sort_indices

texts = st.none() | st.text(max_size=3)
numbers = st.none() | st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=150)
@given(st.lists(st.tuples(texts, numbers, texts), max_size=60), st.permutations(["a", "n", "b"]),
       st.integers(1, 3))
def test_rows_come_in_spark_order_nulls_first_and_ties_in_input_order(rows: list[tuple[object, ...]],
                                                                      columns: list[str], used: int) -> None:
    table = pa.table({"a": pa.array([r[0] for r in rows], pa.string()),
                      "n": pa.array([r[1] for r in rows], pa.int64()),
                      "b": pa.array([r[2] for r in rows], pa.string())})
    keys = columns[:used]
    position = {"a": 0, "n": 1, "b": 2}

    def spark_key(i: int) -> tuple[object, ...]:
        # (False, None) sorts before (True, value): a null before every value; Python's sort is stable.
        return tuple((rows[i][position[c]] is not None, rows[i][position[c]] or 0
                      if position[c] == 1 else rows[i][position[c]] or "") for c in keys)

    expected = sorted(range(len(rows)), key=spark_key)
    assert sort_indices(table, keys).to_pylist() == expected
