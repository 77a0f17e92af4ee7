"""The hashes routing depends on, defined once: in plain Python and, bit for bit, inside Spark.

* :func:`event_hash` — MurmurHash3 x86 32-bit (seed 0, unsigned) of the event ID's UTF-8 bytes; the
  router picks ``placement.shards[event_hash(event_id) % len(placement.shards)]``.
* :func:`tenant_key` — the low 64 bits of MurmurHash3 x64 128-bit of ``tenant_id + "#" + salt``,
  the key of the consistent hash that picks a tenant's first shard (:func:`jump_hash`).

Spark's built-in ``hash()`` is Murmur3 too, but it treats the last bytes of a string differently from
the reference algorithm, so Spark code calls :func:`event_hash_column`, a vectorised (Arrow) UDF running
the same ``mmh3`` code as the driver. Why not redefine the hash as Spark's variant (it would save the
UDF, about 1.3 s per million events here): every event already routed was placed by this hash, and a
copy of it re-sent after such a change would land on another shard, whose writer has never seen its
ID — a duplicate in ``events``. See ``docs/routing.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import mmh3
import pandas as pd  # at module level: pandas_udf/arrow_udf resolve the type hints below in this module's globals
import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["event_hash", "event_hash_column", "event_hashes", "jump_hash", "tenant_key"]

_JUMP_MULTIPLIER = 2862933555777941757
_MASK64 = (1 << 64) - 1


def event_hash(event_id: str) -> int:
    """Return the unsigned 32-bit MurmurHash3 of ``event_id``'s UTF-8 bytes (seed 0)."""
    return int(mmh3.hash(event_id.encode("utf-8"), 0, signed=False))


def event_hashes(event_ids: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Return :func:`event_hash` of every ID as an int64 Arrow array (null stays null): the driver's router
    and Spark's UDF both call this."""
    return pa.array([None if i is None else int(mmh3.hash(i.encode("utf-8"), 0, signed=False))
                     for i in event_ids.to_pylist()], pa.int64())


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


def event_hash_column(event_id: Column) -> Column:
    """Return a Spark column with :func:`event_hash` of ``event_id`` (bigint; null stays null).

    An Arrow UDF (Spark 4.1+) where available: the IDs reach Python as one Arrow array per batch, with
    no pandas conversion on the way in or out; older runtimes get the equivalent pandas UDF.
    """
    try:
        from pyspark.sql.pandas.functions import arrow_udf
    except ImportError:  # Spark < 4.1 (e.g. an older Databricks runtime)
        return _pandas_event_hash(event_id)

    @arrow_udf("bigint")  # type: ignore[call-overload, untyped-decorator, unused-ignore]
    def _event_hash(ids: pa.Array) -> pa.Array:
        return event_hashes(ids)

    return _event_hash(event_id)  # type: ignore[no-any-return, unused-ignore]


def _pandas_event_hash(event_id: Column) -> Column:
    from pyspark.sql.pandas.functions import pandas_udf

    @pandas_udf("bigint")  # type: ignore[call-overload, untyped-decorator]
    def _event_hash(ids: pd.Series) -> pd.Series:
        return pd.Series([None if i is None else event_hash(i) for i in ids], dtype="Int64")

    return _event_hash(event_id)  # type: ignore[no-any-return]
