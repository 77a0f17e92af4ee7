"""The event key's 128-bit hash in numpy, bit for bit what Spark's ``xxhash64`` gives.

The ID index stores, per event, ``key_hi = xxhash64(tenant_id, event_id, ts)`` and
``key_lo = xxhash64("lakeshard/key-lo", tenant_id, event_id, ts)`` as Spark computes them
(:func:`key_hash_columns`); the key's columns and the hash's are :data:`lakeshard.tables.EVENT_KEY` and
:data:`lakeshard.tables.EVENT_KEY_HASH`. The writer's driver-side (Arrow) path must produce the same numbers so
that both paths share one index and one cache: :func:`key_hashes` does, without Spark; the two sit side by side here.

Spark's ``xxhash64(c1, c2, ...)`` chains XXH64 over its inputs (:mod:`lakeshard.sparkhash` implements it over
whole columns); ``tests/dedupe/test_keyhash.py`` checks the key hash against Spark over arbitrary Unicode.

Example::

    hi, lo = key_hashes(batch)   # two int64 arrays, equal to Spark's key_hi / key_lo of the same rows
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from lakeshard.sparkhash import SPARK_HASH_SEED, U64, xxhash64_longs, xxhash64_strings
from lakeshard.tables import EVENT_KEY, EVENT_KEY_HASH

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["first_of_each_key", "key_hash_columns", "key_hashes"]

KEY_LO_PREFIX = "lakeshard/key-lo"  # the constant first input that seeds the second half differently


def key_hash_columns() -> dict[str, Column]:
    """Return the two 64-bit halves of the event key's hash as Spark columns, by name (``key_hi``, ``key_lo``).

    Spark's ``xxhash64`` chains its inputs; a constant first input gives the second half a different seed.
    """
    from pyspark.sql import functions as F

    hi, lo = EVENT_KEY_HASH
    return {hi: F.xxhash64(*EVENT_KEY), lo: F.xxhash64(F.lit(KEY_LO_PREFIX), *EVENT_KEY)}


def _strings_hashed_once(strings: pa.Array | pa.ChunkedArray, seed: int) -> U64:
    """Return the hash of each string under one seed, hashing each distinct value once (tenant ids repeat)."""
    encoded = pc.dictionary_encode(strings)
    encoded = encoded.combine_chunks() if isinstance(encoded, pa.ChunkedArray) else encoded
    distinct = xxhash64_strings(encoded.dictionary, np.full(len(encoded.dictionary), seed, np.uint64))
    indices = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False)
    hashed = distinct[indices] if len(distinct) else np.zeros(len(indices), np.uint64)
    return np.where(encoded.is_valid().to_numpy(zero_copy_only=False), hashed, np.uint64(seed))


def key_hashes(events: pa.Table) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Return ``(key_hi, key_lo)`` of each row of ``events`` (the key's columns, ``tenant_id``, ``event_id``,
    ``ts``): the signed 64-bit values Spark's :func:`key_hash_columns` gives the same rows."""
    n = events.num_rows
    tenant, event, when = EVENT_KEY  # two strings and a timestamp, hashed in this order
    micros = pc.cast(pc.cast(events.column(when), pa.timestamp("us", tz="UTC")), pa.int64())
    ts = micros.fill_null(0).to_numpy()
    ts_valid = pc.is_valid(micros).to_numpy(zero_copy_only=False)
    lo_seed = xxhash64_strings(pa.array([KEY_LO_PREFIX]), np.array([SPARK_HASH_SEED], np.uint64))[0]
    # Both halves at once: one row of seeds each, so each event_id's words are read and mixed in once.
    h = np.stack([_strings_hashed_once(events.column(tenant), int(seed))
                  for seed in (np.uint64(SPARK_HASH_SEED), lo_seed)])
    h = xxhash64_strings(events.column(event), h)
    h = np.where(ts_valid, xxhash64_longs(ts, h), h) if n else h
    return h[0].view(np.int64), h[1].view(np.int64)


def first_of_each_key(hi: npt.NDArray[np.int64], lo: npt.NDArray[np.int64],
                      landed: Sequence[pa.Array | pa.ChunkedArray] = ()) -> npt.NDArray[np.int64]:
    """Return, in ascending order, the index of the row kept of each distinct key hash ``(hi, lo)``: the rows a
    batch keeps of its in-batch duplicates.

    ``landed`` ranks the copies of a key (most significant column first; integers or strings, compared as Spark
    compares them: strings by UTF-8 bytes, nulls last): the copy kept is the smallest, the first row among equals.
    Writers pass the landing order, router batch then ``source_file`` then ``line_number``, so that which copy of a
    re-sent event lands (copies may differ in payload) depends on neither the engine nor the order the rows were
    handed over in.

    The 128-bit hash stands for the key here as it does in the ID index the batch is checked against next. One hash
    table over the high halves finds the rows whose high half repeats (a few percent: re-sent events), and only
    those are sorted, by both halves and their rank; grouping the three key columns (strings) cost five times as
    much.
    """
    import pandas as pd

    repeats = np.flatnonzero(pd.Series(hi).duplicated(keep=False).to_numpy())
    keep = np.ones(len(hi), dtype=bool)
    if len(repeats):
        taken = pa.array(repeats)
        # np.lexsort's keys, least significant first: the row, then ``landed`` backwards, then the two halves.
        ranks = [repeats, *[_ranks(column.take(taken)) for column in reversed(landed)]]
        order = np.lexsort((*ranks, lo[repeats], hi[repeats]))
        h, low = hi[repeats][order], lo[repeats][order]
        later = np.zeros(len(order), dtype=bool)
        later[1:] = (h[1:] == h[:-1]) & (low[1:] == low[:-1])
        keep[repeats[order[later]]] = False
    return np.flatnonzero(keep).astype(np.int64, copy=False)


def _ranks(values: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.int64]:
    """Return integers ordered as ``values`` (integers, or strings by code point, which is UTF-8 byte order), nulls
    last."""
    if pa.types.is_integer(values.type):
        return np.asarray(values.fill_null(np.iinfo(np.int64).max).to_numpy(), np.int64)
    encoded = pc.dictionary_encode(values)
    encoded = encoded.combine_chunks() if isinstance(encoded, pa.ChunkedArray) else encoded
    distinct = np.array(encoded.dictionary.to_pylist(), dtype=object)
    rank = np.append(np.argsort(np.argsort(distinct, kind="stable")), len(distinct))
    return np.asarray(rank[encoded.indices.fill_null(len(distinct)).to_numpy()], np.int64)
