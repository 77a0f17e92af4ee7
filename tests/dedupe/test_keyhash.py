"""The numpy key hash equals Spark's ``xxhash64`` bit for bit, so both writer paths share one ID index."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from unittest.mock import patch

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from lakeshard import sparkhash
from lakeshard.dedupe.keyhash import first_of_each_key, key_hashes
from lakeshard.dedupe.writer import key_hash_columns
from lakeshard.sparkhash import xxhash64_strings

# Any Unicode scalar value (surrogates cannot be UTF-8), lengths across every XXH64 branch: < 4, < 8, < 32,
# one and several 32-byte stripes, with 4-byte and 1-byte tails (multi-byte characters shift them all).
texts = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=80)
instants = st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1)).map(
    lambda d: d.replace(tzinfo=UTC))
keys = st.lists(st.tuples(texts, texts, instants), min_size=1, max_size=60)


def test_reference_vectors_of_xxh64() -> None:
    """Published XXH64 values: the empty input with seed 0, and Spark's seed 42 chaining start."""
    empty = xxhash64_strings(pa.array([""]), np.array([0], np.uint64))
    assert int(empty[0]) == 0xEF46DB3751D8E999
    abc = xxhash64_strings(pa.array(["abc"]), np.array([0], np.uint64))
    assert int(abc[0]) == 0x44BC2CF5AD770999


@settings(max_examples=12)
@given(rows=keys)
def test_key_hashes_equal_sparks_xxhash64_over_arbitrary_unicode(
    spark: SparkSession, rows: list[tuple[str, str, datetime]]
) -> None:
    batch = pa.table({"tenant_id": [r[0] for r in rows], "event_id": [r[1] for r in rows],
                      "ts": pa.array([r[2] for r in rows], pa.timestamp("us", tz="UTC"))})
    expected = spark.createDataFrame(batch).withColumns(key_hash_columns()).select("key_hi", "key_lo").toArrow()
    hi, lo = key_hashes(batch)
    assert hi.tolist() == expected.column("key_hi").to_pylist()
    assert lo.tolist() == expected.column("key_lo").to_pylist()


def test_a_long_batch_mixing_every_length_matches_spark(spark: SparkSession) -> None:
    """One larger batch, so the lock-step lanes (short strings finishing early) are exercised together, hashed a
    block of rows at a time as a big batch is (blocks of 37 rows here: the last one short)."""
    rng = np.random.default_rng(4)
    alphabet = "aZ09-_/é€𝄞中"
    rows = [("t" * int(rng.integers(1, 40)), "".join(rng.choice(list(alphabet), int(rng.integers(0, 300)))),
             datetime(2026, 1, 1, tzinfo=UTC) + timedelta(microseconds=int(rng.integers(-10**15, 10**15))))
            for _ in range(2000)]
    batch = pa.table({"tenant_id": [r[0] for r in rows], "event_id": [r[1] for r in rows],
                      "ts": pa.array([r[2] for r in rows], pa.timestamp("us", tz="UTC"))})
    expected = spark.createDataFrame(batch).withColumns(key_hash_columns()).select("key_hi", "key_lo").toArrow()
    with patch.object(sparkhash, "_BLOCK_ROWS", 37):
        hi, lo = key_hashes(batch)
    assert np.array_equal(hi, expected.column("key_hi").to_numpy())
    assert np.array_equal(lo, expected.column("key_lo").to_numpy())


def test_ids_of_one_length_match_spark(spark: SparkSession) -> None:
    """uuids (36 bytes) and 8-byte ids: every row takes the same branches at once (no row left out of a step)."""
    import uuid

    rng = np.random.default_rng(5)
    for ids in ([str(uuid.UUID(int=int(rng.integers(0, 2**62)) << 64 | i)) for i in range(500)],
                [f"{i:08d}" for i in range(500)]):
        batch = pa.table({"tenant_id": [f"tenant-{i % 7}" for i in range(len(ids))], "event_id": ids,
                          "ts": pa.array(rng.integers(0, 2**50, len(ids)), pa.int64()).cast(
                              pa.timestamp("us", tz="UTC"))})
        expected = spark.createDataFrame(batch).withColumns(key_hash_columns()).select("key_hi", "key_lo").toArrow()
        hi, lo = key_hashes(batch)
        assert np.array_equal(hi, expected.column("key_hi").to_numpy())
        assert np.array_equal(lo, expected.column("key_lo").to_numpy())


@settings(max_examples=100)
@given(st.lists(st.one_of(st.none(), texts), min_size=0, max_size=40), st.integers(1, 3), st.integers(0, 2**64 - 1))
def test_hashing_under_several_rows_of_seeds_is_hashing_under_each(strings: list[str | None], m: int,
                                                                    base: int) -> None:
    """``xxhash64_strings`` with seeds of shape ``(m, n)`` gives, row for row, what each row of seeds gives
    alone (nulls keep their seed in every row)."""
    seeds = (np.arange(m * len(strings), dtype=np.uint64).reshape(m, len(strings)) * np.uint64(0x9E3779B1)
             + np.uint64(base))
    column = pa.array(strings, pa.string())
    together = xxhash64_strings(column, seeds)
    assert together.shape == (m, len(strings))
    for row in range(m):
        assert together[row].tolist() == xxhash64_strings(column, seeds[row]).tolist()


@settings(max_examples=150)
@given(st.lists(st.one_of(st.none(), texts), min_size=0, max_size=60), st.integers(0, 5), st.integers(1, 2),
       st.integers(1, 70))
def test_hashing_a_block_of_rows_at_a_time_changes_no_hash(strings: list[str | None], skip: int, m: int,
                                                           block: int) -> None:
    """A column longer than a block is hashed a block of rows at a time: whatever the block size, and for a column
    that is a slice of a longer one (its offsets not starting at zero), every hash is the one a single pass over the
    whole column gives."""
    column = pa.array([*(["before"] * skip), *strings], pa.string()).slice(skip)
    seeds = np.arange(m * len(strings), dtype=np.uint64).reshape(m, len(strings)) * np.uint64(0x9E3779B97F4A7C15)
    whole = xxhash64_strings(column, seeds)
    with patch.object(sparkhash, "_BLOCK_ROWS", block):
        blocked = xxhash64_strings(column, seeds)
    assert blocked.shape == whole.shape == (m, len(strings))
    assert blocked.tolist() == whole.tolist()


# Few distinct halves, so batches hold re-sent keys and high halves shared by different keys (a 64-bit collision).
halves = st.integers(min_value=-3, max_value=3)


@settings(max_examples=300)
@given(st.lists(st.tuples(halves, halves), max_size=120))
def test_the_first_row_of_each_key_hash_is_kept_whatever_repeats(rows: list[tuple[int, int]]) -> None:
    first: dict[tuple[int, int], int] = {}
    for i, key in enumerate(rows):
        first.setdefault(key, i)
    hi = np.array([h for h, _ in rows], np.int64)
    lo = np.array([low for _, low in rows], np.int64)
    assert first_of_each_key(hi, lo).tolist() == sorted(first.values())


# Landing paths whose code point order differs from their UTF-16 order, and a missing path (sorted last, as by Spark).
paths = st.sampled_from(["a", "b", "é", "\uffff", "𝄞", "a/b", None])
lines = st.one_of(st.none(), st.integers(min_value=0, max_value=4))


@settings(max_examples=300)
@given(st.lists(st.tuples(halves, halves, lines, paths, lines), max_size=120))
def test_of_each_key_hash_the_copy_first_in_landing_order_is_kept(
    rows: list[tuple[int, int, int | None, str | None, int | None]]
) -> None:
    """The copy kept is the smallest (batch, file, line): integers as numbers, paths by UTF-8 bytes, nulls last;
    the first row among equals."""
    def last_if_null(value: object, key: object) -> tuple[bool, object]:
        return value is None, key

    best: dict[tuple[int, int], tuple[tuple[tuple[bool, object], ...], int]] = {}
    for i, (h, low, batch, path, line) in enumerate(rows):
        rank = (last_if_null(batch, batch or 0), last_if_null(path, (path or "").encode()),
                last_if_null(line, line or 0))
        if (h, low) not in best or rank < best[h, low][0]:
            best[h, low] = (rank, i)
    hi = np.array([r[0] for r in rows], np.int64)
    lo = np.array([r[1] for r in rows], np.int64)
    landed = [pa.array([r[2] for r in rows], pa.int64()),
              pa.chunked_array([pa.array([r[3] for r in rows], pa.string())]),
              pa.array([r[4] for r in rows], pa.int64())]
    assert first_of_each_key(hi, lo, landed).tolist() == sorted(i for _, i in best.values())
