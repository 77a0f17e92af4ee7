"""The hashes routing depends on, defined once: in plain Python and, bit for bit, inside Spark.

* :func:`event_hash` — the hash that picks an event's shard within its placement:
  ``placement.shards[event_hash(event_id, placement.hash_version) % len(placement.shards)]``. Two versions:

  - ``HASH_XXHASH64`` (2, what new placements get): Spark's built-in ``xxhash64(event_id)`` — XXH64 of the
    UTF-8 bytes, seed 42, a signed 64-bit value; no Python in Spark's plan, and in this process the numpy
    implementation of :mod:`lakeshard.sparkhash` (whole columns at once).
  - ``HASH_MMH3`` (1, placements made before hash versions existed): MurmurHash3 x86 32-bit (seed 0,
    unsigned) of the UTF-8 bytes. Spark's ``hash()`` is Murmur3 too but treats the last bytes of a string
    differently, so Spark computes it with a vectorised (Arrow) UDF running the same ``mmh3`` code.

  The version is recorded on every placement and never changes for it: a re-sent copy of an event always
  lands on the shard the first copy went to, whichever version a lakehouse started with. See ``docs/routing.md``.
* :func:`tenant_key` — the low 64 bits of MurmurHash3 x64 128-bit of ``tenant_id + "#" + salt``,
  the key of the consistent hash that picks a tenant's first shard (:func:`jump_hash`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import mmh3
import numpy as np
import pandas as pd  # at module level: pandas_udf/arrow_udf resolve the type hints below in this module's globals
import pyarrow as pa
import pyarrow.compute as pc

from lakeshard.sparkhash import SPARK_HASH_SEED, xxhash64_strings

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = [
    "HASH_MMH3",
    "HASH_VERSIONS",
    "HASH_XXHASH64",
    "event_hash",
    "event_hash_column",
    "event_hashes",
    "jump_hash",
    "tenant_key",
]

HASH_MMH3 = 1
HASH_XXHASH64 = 2
HASH_VERSIONS = (HASH_MMH3, HASH_XXHASH64)

_JUMP_MULTIPLIER = 2862933555777941757
_MASK64 = (1 << 64) - 1


def _check_version(version: int) -> None:
    if version not in HASH_VERSIONS:
        raise ValueError(f"unknown event hash version {version!r}; known: {list(HASH_VERSIONS)}")


def event_hash(event_id: str, version: int) -> int:
    """Return the event hash of ``event_id`` under hash ``version`` (see the module doc)."""
    _check_version(version)
    if version == HASH_MMH3:
        return int(mmh3.hash(event_id.encode("utf-8"), 0, signed=False))
    return int(event_hashes(pa.array([event_id], pa.string()), version)[0].as_py())


def event_hashes(event_ids: pa.Array | pa.ChunkedArray, version: int) -> pa.Array:
    """Return :func:`event_hash` of every ID as an int64 Arrow array (null stays null): the driver's router
    and Spark's UDF of version 1 both call this."""
    _check_version(version)
    if version == HASH_MMH3:
        return pa.array([None if i is None else int(mmh3.hash(i.encode("utf-8"), 0, signed=False))
                         for i in event_ids.to_pylist()], pa.int64())
    hashed = xxhash64_strings(event_ids, np.full(len(event_ids), SPARK_HASH_SEED, np.uint64)).view(np.int64)
    return pa.array(hashed, pa.int64(), mask=pc.is_null(event_ids).to_numpy(zero_copy_only=False))


def tenant_key(tenant_id: str, salt: int) -> int:
    """Return the unsigned 64-bit key of ``(tenant_id, salt)`` for the consistent hash."""
    low, _high = mmh3.hash64(f"{tenant_id}#{salt}".encode(), 0, signed=False)
    return int(low)


def jump_hash(key: int, buckets: int) -> int:
    """Return the bucket in ``[0, buckets)`` of Lamping & Veach's jump consistent hash of ``key``.

    Growing ``buckets`` from k to k+1 moves a key only with probability 1/(k+1), and only to the new bucket.
    """
    if buckets < 1:
        raise ValueError(f"jump_hash needs at least one bucket, got {buckets}")
    key &= _MASK64
    b, j = -1, 0
    while j < buckets:
        b = j
        key = (key * _JUMP_MULTIPLIER + 1) & _MASK64
        j = int((b + 1) * ((1 << 31) / ((key >> 33) + 1)))
    return b


def event_hash_column(event_id: Column, version: int) -> Column:
    """Return a Spark column with :func:`event_hash` of ``event_id`` under ``version`` (bigint; null stays null).

    Version 2 is Spark's built-in ``xxhash64``. Version 1 is an Arrow UDF (Spark 4.1+) where available: the
    IDs reach Python as one Arrow array per batch, with no pandas conversion on the way in or out; older
    runtimes get the equivalent pandas UDF.
    """
    _check_version(version)
    if version == HASH_XXHASH64:
        from pyspark.sql import functions as F

        return F.when(event_id.isNotNull(), F.xxhash64(event_id))
    try:
        from pyspark.sql.pandas.functions import arrow_udf
    except ImportError:  # Spark < 4.1 (e.g. an older Databricks runtime)
        return _pandas_event_hash(event_id)

    @arrow_udf("bigint")  # type: ignore[call-overload, untyped-decorator, unused-ignore]
    def _event_hash(ids: pa.Array) -> pa.Array:
        return event_hashes(ids, HASH_MMH3)

    return _event_hash(event_id)  # type: ignore[no-any-return, unused-ignore]


def _pandas_event_hash(event_id: Column) -> Column:
    from pyspark.sql.pandas.functions import pandas_udf

    @pandas_udf("bigint")  # type: ignore[call-overload, untyped-decorator]
    def _event_hash(ids: pd.Series) -> pd.Series:
        return pd.Series([None if i is None else event_hash(i, HASH_MMH3) for i in ids], dtype="Int64")

    return _event_hash(event_id)  # type: ignore[no-any-return]
