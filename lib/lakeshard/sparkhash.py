"""Spark's ``xxhash64`` in numpy, bit for bit, over a column's rows together.

Spark's ``xxhash64(c1, c2, ...)`` is XXH64 chained over its inputs: the seed starts at 42, and each non-null
input is hashed with the previous result as its seed (a null input leaves it unchanged). A string is hashed
as its UTF-8 bytes, a ``long`` (and a timestamp, as microseconds since the epoch) as its eight little-endian
bytes, exactly as the reference XXH64 does (Spark's ``XXH64.hashUnsafeBytes`` / ``hashLong``). Strings of
different lengths advance in lock-step, each taking the next 32-byte stripe, 8-byte word, 4-byte word or byte
only while it has one (masks), so the cost is a few dozen numpy passes over a block of rows, not a Python call
per row. Two users: the ID index's key hash (:mod:`lakeshard.dedupe.keyhash`) and the router's event hash
(:mod:`lakeshard.routing.hashing`); ``tests/dedupe/test_keyhash.py`` and ``tests/routing/test_placement.py``
check both against Spark over arbitrary Unicode (hypothesis).

Example::

    h = xxhash64_strings(pa.array(["a", "b"]), np.full(2, SPARK_HASH_SEED, np.uint64))  # Spark's xxhash64(col)
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["SPARK_HASH_SEED", "U64", "xxhash64_longs", "xxhash64_strings"]

SPARK_HASH_SEED = 42  # the seed of Spark's xxhash64 expression

U64 = npt.NDArray[np.uint64]

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)


def _rotl(x: U64, r: int) -> U64:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _round(acc: U64, word: U64) -> U64:
    return _rotl(acc + word * _P2, 31) * _P1


def _fmix(h: U64) -> U64:
    h = h ^ (h >> np.uint64(33))
    h = h * _P2
    h = h ^ (h >> np.uint64(29))
    h = h * _P3
    return h ^ (h >> np.uint64(32))


def _rows(mask: npt.NDArray[np.bool_]) -> slice | npt.NDArray[np.intp] | None:
    """Return the rows ``mask`` selects as an index: every row as a slice (no gather, no scatter: uuid-like ids
    all take the same path), some as their positions, none as None."""
    if mask.all():
        return slice(None) if len(mask) else None
    picked = np.flatnonzero(mask)
    return picked if len(picked) else None


def xxhash64_longs(values: npt.NDArray[np.int64], seeds: U64) -> U64:
    """Return XXH64 of each ``long`` (its eight little-endian bytes) with its own seed: Spark's ``hashLong``.
    ``seeds`` may hold several rows of seeds (shape ``(m, n)``): each row gives its own hashes."""
    with np.errstate(over="ignore"):
        h = seeds + _P5 + np.uint64(8)
        h = h ^ _round(np.zeros_like(h), values.astype(np.int64).view(np.uint64))
        h = _rotl(h, 27) * _P1 + _P4
        return _fmix(h)


def xxhash64_strings(strings: pa.Array | pa.ChunkedArray, seeds: U64) -> U64:
    """Return XXH64 of each string's UTF-8 bytes with its own seed (Spark's ``hashUnsafeBytes``); a null keeps
    its seed, as Spark's chaining skips null inputs.

    ``seeds`` of shape ``(m, n)`` hashes every string under ``m`` seeds at once (one row of hashes per row of
    seeds): reading the strings' words and mixing each word in, the larger part of the work, is done once."""
    arr = pc.cast(strings, pa.large_string())
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    n = len(arr)
    seeds = np.asarray(seeds, np.uint64)
    seeds = np.broadcast_to(seeds, (*seeds.shape[:-1], n) if seeds.ndim > 1 else (n,))
    if n <= _BLOCK_ROWS:
        return _strings_block(arr, seeds)
    # A block of rows at a time: the few dozen passes each make over the block's temporaries then stay in the CPU's
    # cache, where passes over whole columns (8 MB a pass at 1M rows) each went to memory, most into pages the kernel
    # had to zero first (bench/results/ingest-profile.md).
    hashed = np.empty(seeds.shape, np.uint64)
    for at in range(0, n, _BLOCK_ROWS):
        hashed[..., at:at + _BLOCK_ROWS] = _strings_block(arr.slice(at, _BLOCK_ROWS), seeds[..., at:at + _BLOCK_ROWS])
    return hashed


_BLOCK_ROWS = 16_384  # strings hashed per block: the temporaries of a block (128 kB each) fit a core's cache


def _strings_block(arr: pa.LargeStringArray, seeds: U64) -> U64:
    """Return :func:`xxhash64_strings` of ``arr`` (large strings, one chunk), ``seeds`` broadcast to its rows."""
    n = len(arr)
    if n == 0:
        return np.empty((*np.shape(seeds)[:-1], 0), np.uint64)
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, np.int64)[arr.offset: arr.offset + n + 1]
    data = np.zeros(0, np.uint8) if data_buf is None else np.frombuffer(data_buf, np.uint8)
    # The block's bytes and eight zero bytes after them: a masked-off lane may still read a word there.
    first = int(offsets[0])
    padded = np.concatenate([data[first: int(offsets[-1])], np.zeros(8, np.uint8)])
    windows = np.lib.stride_tricks.sliding_window_view(padded, 8)
    start, length = offsets[:-1] - first, np.diff(offsets)

    def words(at: npt.NDArray[np.int64]) -> U64:
        return np.ascontiguousarray(windows[at]).view("<u8").reshape(-1)

    with np.errstate(over="ignore"):
        h = seeds + _P5
        big = _rows(length >= 32)
        if big is not None:
            s = seeds[..., big]
            v = [s + _P1 + _P2, s + _P2, s.copy(), s - _P1]
            stripes = length[big] // 32
            for k in range(int(stripes.max())):
                act = _rows(stripes > k)
                assert act is not None  # the longest string has stripe k
                at = start[big][act] + 32 * k
                for lane in range(4):
                    v[lane][..., act] = _round(v[lane][..., act], words(at + 8 * lane))
            acc = _rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)
            for lane in range(4):
                acc = (acc ^ _round(np.zeros_like(acc), v[lane])) * _P1 + _P4
            h[..., big] = acc
        h = h + length.astype(np.uint64)
        at = start + (length // 32) * 32
        tail_words = (length % 32) // 8
        for k in range(int(tail_words.max(initial=0))):
            act = _rows(tail_words > k)
            assert act is not None  # the longest tail has word k
            word = words(at[act])
            h[..., act] = _rotl(h[..., act] ^ _round(np.zeros_like(word), word), 27) * _P1 + _P4
            at[act] += 8
        act = _rows(length % 8 >= 4)
        if act is not None:
            four = words(at[act]) & np.uint64(0xFFFFFFFF)
            h[..., act] = _rotl(h[..., act] ^ (four * _P1), 23) * _P2 + _P3
            at[act] += 4
        tail_bytes = length % 4
        for k in range(3):
            act = _rows(tail_bytes > k)
            if act is None:
                break
            h[..., act] = _rotl(h[..., act] ^ (padded[at[act]].astype(np.uint64) * _P5), 11) * _P1
            at[act] += 1
        h = _fmix(h)
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    return np.where(valid, h, seeds)
