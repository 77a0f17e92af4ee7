"""The public-API swap's plan: which partitions a ``replaceWhere`` rewrites, and when a swap cannot be one."""

from __future__ import annotations

from datetime import UTC, datetime

from lakeshard.lake import FileInfo
from lakeshard.lake.native.public import whole_partitions_predicate
from lakeshard.lake.protocol.log import LogState

_T = datetime(2026, 1, 1, tzinfo=UTC)


def _state(files: dict[str, dict[str, str | None]], columns: list[str]) -> LogState:
    return LogState(version=3, files={p: FileInfo(p, 10, 1, v, _T) for p, v in files.items()},
                    metadata={"partitionColumns": columns})


BUCKETS = {
    "a0-1": {"tenant_id": "a", "hour": "2026-01-01T00"},
    "a0-2": {"tenant_id": "a", "hour": "2026-01-01T00"},
    "a1-1": {"tenant_id": "a", "hour": "2026-01-01T01"},
    "q-1": {"tenant_id": "o'q\\", "hour": None},
}


def test_a_whole_bucket_is_one_clause_and_several_buckets_are_or_ed() -> None:
    state = _state(BUCKETS, ["tenant_id", "hour"])
    assert whole_partitions_predicate(state, ["a0-1", "a0-2"]) == "(`tenant_id` = 'a' AND `hour` = '2026-01-01T00')"
    assert whole_partitions_predicate(state, ["a1-1", "a0-2", "a0-1"]) == (
        "(`tenant_id` = 'a' AND `hour` = '2026-01-01T00') OR (`tenant_id` = 'a' AND `hour` = '2026-01-01T01')")
    # Quotes and backslashes are escaped; a null partition value is IS NULL.
    assert whole_partitions_predicate(state, ["q-1"]) == "(`tenant_id` = 'o\\'q\\\\' AND `hour` IS NULL)"


def test_part_of_a_bucket_or_a_file_not_live_cannot_be_a_replace_where() -> None:
    state = _state(BUCKETS, ["tenant_id", "hour"])
    assert whole_partitions_predicate(state, ["a0-1"]) is None  # a0-2 would be removed too
    assert whole_partitions_predicate(state, ["a1-1", "gone"]) is None
    assert whole_partitions_predicate(state, []) is None


def test_an_unpartitioned_table_is_replaced_whole_or_not_at_all() -> None:
    state = _state({"x": {}, "y": {}}, [])
    assert whole_partitions_predicate(state, ["x", "y"]) == "true"
    assert whole_partitions_predicate(state, ["x"]) is None
