"""Routing's pure parts: hashing, the consistent first shard, placement shard lists, windows."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import pairwise

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeshard.routing.errors import RoutingError
from lakeshard.routing.hashing import HASH_MMH3, HASH_XXHASH64, event_hash, jump_hash
from lakeshard.routing.placement import first_shard, placement_shards, window_of


@pytest.mark.parametrize(
    ("first", "count", "total", "excluded", "expected"),
    [
        # The Husky post's examples: 8 shards, then 10 shards, then 10 shards with [3, 7] excluded.
        (2, 3, 8, [], (2, 3, 4)),
        (2, 4, 8, [], (2, 3, 4, 5)),
        (7, 2, 8, [], (7, 0)),
        (2, 3, 10, [], (2, 3, 4)),
        (2, 4, 10, [], (2, 3, 4, 5)),
        (7, 2, 10, [], (7, 8)),
        (2, 3, 10, [3, 7], (2, 4, 5)),
        (2, 4, 10, [3, 7], (2, 4, 5, 6)),
        (7, 2, 10, [3, 7], (8, 9)),
    ],
)
def test_the_seed_examples(first: int, count: int, total: int, excluded: list[int], expected: tuple[int, ...]) -> None:
    assert placement_shards(first, count, total, excluded) == expected


def test_too_many_shards_is_a_clear_error() -> None:
    expected = r"cannot place on 9 shards: 8 of 10 shards are available \(excluded: \[3, 7\]\)"
    with pytest.raises(RoutingError, match=expected):
        placement_shards(0, 9, 10, [3, 7])
    with pytest.raises(RoutingError, match="outside"):
        placement_shards(10, 1, 10)


placements = st.integers(1, 64).flatmap(
    lambda total: st.tuples(
        st.integers(0, total - 1), st.just(total), st.frozensets(st.integers(0, total - 1), max_size=total - 1)
    )
)


@given(placements, st.data())
def test_a_placement_is_distinct_clockwise_and_never_excluded(
    p: tuple[int, int, frozenset[int]], data: st.DataObject
) -> None:
    first, total, excluded = p
    count = data.draw(st.integers(1, total - len(excluded)))
    shards = placement_shards(first, count, total, excluded)
    assert len(shards) == len(set(shards)) == count
    assert not set(shards) & excluded
    gaps = [(b - a) % total for a, b in pairwise(shards)]
    assert all(g >= 1 for g in gaps) and sum(gaps) < total  # a walk clockwise that never laps the ring


@given(placements, st.data())
def test_one_more_shard_keeps_the_previous_ones(p: tuple[int, int, frozenset[int]], data: st.DataObject) -> None:
    first, total, excluded = p
    available = total - len(excluded)
    if available < 2:
        return
    count = data.draw(st.integers(1, available - 1))
    grown = placement_shards(first, count + 1, total, excluded)
    assert grown[:count] == placement_shards(first, count, total, excluded)


@given(placements, st.data())
def test_excluding_a_shard_moves_at_most_one_shard(p: tuple[int, int, frozenset[int]], data: st.DataObject) -> None:
    first, total, excluded = p
    if total - len(excluded) < 2:
        return
    count = data.draw(st.integers(1, total - len(excluded) - 1))
    newly = data.draw(st.sampled_from(sorted(set(range(total)) - excluded)))
    before = placement_shards(first, count, total, excluded)
    after = placement_shards(first, count, total, excluded | {newly})
    if newly in before:
        assert len(set(before) - set(after)) == 1 and newly not in after
    else:
        assert after == before  # a placement without the newly excluded shard does not change


def test_growing_the_total_moves_few_first_shards() -> None:
    tenants = [f"tenant-{i:05d}" for i in range(10_000)]
    for old, new in [(8, 10), (100, 101), (255, 256)]:
        moved = sum(first_shard(t, 0, old) != first_shard(t, 0, new) for t in tenants) / len(tenants)
        ideal = 1 - old / new
        assert moved <= ideal * 1.15 + 0.005, (old, new, moved, ideal)


@given(st.integers(0, 2**64 - 1), st.integers(1, 500))
def test_jump_hash_moves_keys_only_to_the_new_bucket(key: int, buckets: int) -> None:
    before, after = jump_hash(key, buckets), jump_hash(key, buckets + 1)
    assert 0 <= before < buckets and after in (before, buckets)


def test_first_shards_spread_evenly() -> None:
    counts = [0] * 16
    for i in range(16_000):
        counts[first_shard(f"t{i}", 0, 16)] += 1
    assert max(counts) < 1.15 * 1000 and min(counts) > 0.85 * 1000


def test_salt_moves_the_first_shard() -> None:
    moved = sum(first_shard(f"t{i}", 0, 64) != first_shard(f"t{i}", 1, 64) for i in range(2000))
    assert moved > 0.9 * 2000


def test_event_hash_version_1_is_murmur3_x86_32_of_utf8() -> None:
    # Reference values of MurmurHash3_x86_32, seed 0 (as published with the algorithm's test vectors).
    assert event_hash("", HASH_MMH3) == 0
    assert event_hash("hello", HASH_MMH3) == 0x248BFA47
    assert event_hash("The quick brown fox jumps over the lazy dog", HASH_MMH3) == 0x2E4FF723


def test_event_hash_version_2_is_xxh64_of_utf8_with_sparks_seed() -> None:
    # What Spark 4 gives for xxhash64(''): XXH64 of the empty input with seed 42.
    assert event_hash("", HASH_XXHASH64) == _signed(0x98B1582B0977E704)
    with pytest.raises(ValueError, match="unknown event hash version 3"):
        event_hash("x", 3)


def _signed(u: int) -> int:
    return u - (1 << 64) if u >= 1 << 63 else u


def test_windows_sit_on_a_fixed_grid() -> None:
    start, end = window_of(datetime(2026, 1, 1, 10, 7, 59, 999999, tzinfo=UTC), 300)
    assert (start, end) == (datetime(2026, 1, 1, 10, 5, tzinfo=UTC), datetime(2026, 1, 1, 10, 10, tzinfo=UTC))
    assert window_of(datetime(2026, 1, 1, 10, 10, tzinfo=UTC), 300)[0] == end


@settings(max_examples=5)
@given(st.lists(st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=80), min_size=1, max_size=300))
def test_spark_and_python_hash_alike(spark, ids: list[str]) -> None:  # type: ignore[no-untyped-def]
    from lakeshard.routing.hashing import _pandas_event_hash, event_hash_column, event_hashes

    rows = [(i, s) for i, s in enumerate(ids)] + [(len(ids), None)]
    df = spark.createDataFrame(rows, "i int, event_id string")
    # Version 1: the Arrow UDF (Spark 4.1+) and the pandas UDF older runtimes fall back to; version 2: Spark's
    # built-in xxhash64. Each equals the driver's hash of the same ID, one ID at a time and a column at once.
    got = {r.i: (r.h, r.p, r.x) for r in df.select(
        "i", event_hash_column(df.event_id, HASH_MMH3).alias("h"), _pandas_event_hash(df.event_id).alias("p"),
        event_hash_column(df.event_id, HASH_XXHASH64).alias("x")).collect()}
    assert got == {i: (None, None, None) if s is None else
                   (event_hash(s, HASH_MMH3), event_hash(s, HASH_MMH3), event_hash(s, HASH_XXHASH64)) for i, s in rows}
    column = pa.array([s for _, s in rows], pa.string())
    for version, at in ((HASH_MMH3, 0), (HASH_XXHASH64, 2)):
        assert event_hashes(column, version).to_pylist() == [got[i][at] for i, _ in rows]
