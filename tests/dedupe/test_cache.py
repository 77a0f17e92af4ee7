"""The ID cache: exact membership over 128-bit hashes, a byte-bounded LRU, and honest hit/miss counters."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeshard.dedupe.cache import IdCache, IdInterval
from lakeshard.dedupe.index import group_indices

int64s = st.integers(min_value=-(2**63), max_value=2**63 - 1)
pairs = st.lists(st.tuples(int64s, int64s), max_size=200)


def _interval(ids: list[tuple[int, int]]) -> IdInterval:
    return IdInterval(np.array([h for h, _ in ids], np.int64), np.array([lo for _, lo in ids], np.int64))


@settings(max_examples=200)
@given(stored=pairs, queried=pairs, shared_hi=st.booleans())
def test_membership_equals_a_python_set(stored: list[tuple[int, int]], queried: list[tuple[int, int]],
                                        shared_hi: bool) -> None:
    if shared_hi and stored:  # many IDs sharing one half: only the other half tells them apart
        queried = queried + [(stored[0][0], lo) for _, lo in queried] + stored[: len(stored) // 2]
    found = _interval(stored).contains(np.array([h for h, _ in queried], np.int64),
                                       np.array([lo for _, lo in queried], np.int64))
    assert found.tolist() == [q in set(stored) for q in queried]


@given(first=pairs, second=pairs, shared_hi=st.booleans())
def test_union_holds_both_sides_in_order(first: list[tuple[int, int]], second: list[tuple[int, int]],
                                         shared_hi: bool) -> None:
    if shared_hi and first:  # inserted among IDs of the same high half: the low half decides the position
        second = second + [(first[0][0], lo) for _, lo in second]
    both = _interval(first).union(np.array([h for h, _ in second], np.int64),
                                  np.array([lo for _, lo in second], np.int64))
    everything = first + second
    assert list(zip(both.hi.tolist(), both.lo.tolist(), strict=True)) == sorted(everything)
    assert both.contains(np.array([h for h, _ in everything], np.int64),
                         np.array([lo for _, lo in everything], np.int64)).all()
    assert len(both) == len(everything)


def test_lru_evicts_the_least_recently_used_interval_past_the_byte_bound() -> None:
    one = _interval([(i, i) for i in range(1000)])  # 16 kB of hashes + overhead
    cache = IdCache(max_bytes=int(one.nbytes * 2.5))
    cache.put((0, "h0"), one)
    cache.put((0, "h1"), one)
    assert cache.lookup([(0, "h0")]) == set()  # h0 is now the most recently used
    cache.put((1, "h2"), one)  # over the bound: the least recent (h1) goes
    assert cache.lookup([(0, "h0"), (0, "h1"), (1, "h2")]) == {(0, "h1")}
    stats = cache.stats()
    assert stats.evictions == 1 and stats.bytes <= cache.max_bytes
    assert (stats.hits, stats.misses) == (3, 1) and stats.hit_rate == pytest.approx(0.75)


def test_an_interval_larger_than_the_bound_is_kept_until_the_next_insertion() -> None:
    big = _interval([(i, -i) for i in range(5000)])
    cache = IdCache(max_bytes=big.nbytes // 2)
    cache.put((0, "h0"), big)
    assert cache.get((0, "h0")) is big  # the batch being checked needs it
    cache.put((0, "h1"), IdInterval.empty())
    assert cache.get((0, "h0")) is None and cache.stats().bytes <= cache.max_bytes


def test_add_extends_only_intervals_in_memory_and_drop_shards_forgets_a_shard() -> None:
    cache = IdCache(max_bytes=1 << 20)
    cache.put((0, "h0"), IdInterval.empty())
    cache.add((0, "h0"), np.array([7], np.int64), np.array([8], np.int64))
    cache.add((5, "h0"), np.array([7], np.int64), np.array([8], np.int64))  # not cached: stays absent
    got = cache.get((0, "h0"))
    assert got is not None and got.contains(np.array([7], np.int64), np.array([8], np.int64)).tolist() == [True]
    assert cache.get((5, "h0")) is None
    cache.put((1, "h0"), IdInterval.empty())
    assert cache.drop_shards([0]) == 1 and cache.get((0, "h0")) is None and cache.get((1, "h0")) is not None


def test_a_non_positive_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="positive byte bound"):
        IdCache(max_bytes=0)


@settings(max_examples=200)
@given(ids=pairs, runs=st.integers(min_value=1, max_value=5), shared_hi=st.booleans())
def test_an_interval_is_sorted_by_both_halves_whether_built_from_sorted_runs_or_any_order(
        ids: list[tuple[int, int]], runs: int, shared_hi: bool) -> None:
    """Paged-in intervals arrive as sorted runs (one per ID file); the result must not depend on that."""
    if shared_hi and ids:  # high halves that tie: only the low half orders them
        ids = ids + [(ids[0][0], lo) for _, lo in ids]
    chunks = [sorted(ids[i::runs]) for i in range(runs)]
    as_runs = [p for chunk in chunks for p in chunk]
    for given_order in (as_runs, ids, sorted(ids)):
        built = _interval(given_order)
        assert list(zip(built.hi.tolist(), built.lo.tolist(), strict=True)) == sorted(ids)


@settings(max_examples=200)
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["2026-01-01T00", "2026-01-01T01", "2025-12-31T23"])),
                max_size=150), st.booleans())
def test_rows_are_grouped_by_shard_and_hour_in_their_order(rows: list[tuple[int, str]], as_arrow: bool) -> None:
    expected: dict[tuple[int, str], list[int]] = {}
    for i, key in enumerate(rows):
        expected.setdefault(key, []).append(i)
    shard = np.array([s for s, _ in rows], np.int32)
    hours = [h for _, h in rows]
    hour = pa.chunked_array([hours[:7], hours[7:]], pa.string()) if as_arrow else np.array(hours, dtype=object)
    got = group_indices(shard, hour)
    assert {k: v.tolist() for k, v in got.items()} == expected
    assert all(v.dtype == np.int64 for v in got.values())
