"""The writer's in-memory LRU of ID intervals (Husky): recent IDs answered from memory, the rest paged in.

An *interval* is one ``(shard, hour)`` partition of the ``event_ids`` table. The cache keeps each interval it
has seen as two sorted ``int64`` arrays — the two halves of a 128-bit hash of the event key
``(tenant_id, event_id, ts)`` — so one ID costs 16 bytes and a lookup is a vectorised binary search. Two
distinct keys would have to collide on all 128 bits for a valid event to be taken for a duplicate: with a
billion IDs in one interval the chance is about 10^-21.

The cache is bounded by bytes: adding past the bound evicts the least recently used intervals. It is only an
accelerator — every answer it gives equals what the ``event_ids`` table holds — so a writer that loses a
commit race (or sees another writer's progress on its shards) simply drops that shard's intervals and pages
them in again from the lakehouse.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["CacheStats", "IdCache", "IdInterval", "Interval", "hash_order"]

Interval = tuple[int, str]  # (shard, hour "YYYY-MM-DDTHH")
Int64s = npt.NDArray[np.int64]

_OVERHEAD_BYTES = 256  # per cached interval: the arrays' headers and the dictionary entry


class IdInterval:
    """The IDs of one interval as sorted 128-bit hashes ``(hi, lo)``; immutable once built."""

    __slots__ = ("hi", "lo")

    def __init__(self, hi: Int64s, lo: Int64s) -> None:
        if hi.shape != lo.shape:
            raise ValueError(f"hash halves differ in length: {hi.shape} vs {lo.shape}")
        hi, lo = np.asarray(hi, np.int64), np.asarray(lo, np.int64)
        order = hash_order(hi, lo)
        self.hi: Int64s = np.ascontiguousarray(hi if order is None else hi[order])
        self.lo: Int64s = np.ascontiguousarray(lo if order is None else lo[order])

    @classmethod
    def empty(cls) -> IdInterval:
        return cls(np.empty(0, np.int64), np.empty(0, np.int64))

    @classmethod
    def _presorted(cls, hi: Int64s, lo: Int64s) -> IdInterval:
        out = cls.__new__(cls)
        out.hi, out.lo = hi, lo
        return out

    def __len__(self) -> int:
        return int(self.hi.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self.hi.nbytes + self.lo.nbytes) + _OVERHEAD_BYTES

    def contains(self, hi: Int64s, lo: Int64s) -> npt.NDArray[np.bool_]:
        """Return, per queried hash, whether the interval holds it."""
        hi, lo = np.asarray(hi, np.int64), np.asarray(lo, np.int64)
        found = np.zeros(hi.shape[0], dtype=bool)
        if not len(self) or not hi.shape[0]:
            return found
        # Binary search on the high half alone (a plain int64 search); the IDs sharing a queried high half —
        # almost always none or one — are then compared on the low half.
        left = np.searchsorted(self.hi, hi, side="left")
        run = np.searchsorted(self.hi, hi, side="right") - left
        for k in range(int(run.max())):
            at = np.flatnonzero(run > k)
            found[at] |= self.lo[left[at] + k] == lo[at]
        return found

    def union(self, hi: Int64s, lo: Int64s) -> IdInterval:
        """Return a new interval holding these IDs and the given ones.

        Only the new IDs are sorted; they are then inserted into the sorted arrays at their positions, so
        adding a batch to a large interval costs a copy of it, not a sort.
        """
        order = np.lexsort((lo, hi))
        hi, lo = np.asarray(hi, np.int64)[order], np.asarray(lo, np.int64)[order]
        at = np.searchsorted(self.hi, hi, side="left")
        # Among IDs sharing the high half, keep the order of the low half.
        while True:
            inside = at < len(self)
            step = np.zeros(at.shape[0], dtype=bool)
            step[inside] = (self.hi[at[inside]] == hi[inside]) & (self.lo[at[inside]] < lo[inside])
            if not step.any():
                break
            at += step
        return IdInterval._presorted(np.insert(self.hi, at, hi), np.insert(self.lo, at, lo))


def hash_order(hi: Int64s, lo: Int64s) -> npt.NDArray[np.intp] | None:
    """Return the permutation that sorts the IDs by ``(hi, lo)``, or None when they are sorted already.

    ID files are written sorted by the hash, so a paged-in interval is a few sorted runs (one per file):
    a stable sort on the high half (timsort) merges runs in about linear time, where a lexsort of both
    halves sorted everything twice. High halves that tie (a 64-bit collision, or one ID stored twice) fall
    back to the lexsort, which orders them by the low half.
    """
    if hi.shape[0] < 2 or bool(np.all(hi[1:] > hi[:-1])):
        return None
    order = np.argsort(hi, kind="stable")
    ranked = hi[order]
    if bool(np.any(ranked[1:] == ranked[:-1])):
        return np.lexsort((lo, hi))
    return order


@dataclass(frozen=True)
class CacheStats:
    """Counters since the cache was made; ``hit_rate`` is the share of interval lookups answered from memory."""

    hits: int
    misses: int
    evictions: int
    dropped: int
    intervals: int
    ids: int
    bytes: int
    max_bytes: int

    @property
    def hit_rate(self) -> float:
        looked_up = self.hits + self.misses
        return self.hits / looked_up if looked_up else 0.0


class IdCache:
    """A byte-bounded LRU of :class:`IdInterval` keyed by ``(shard, hour)``.

    Example::

        cache = IdCache(max_bytes=64 << 20)
        missing = cache.lookup({(0, "2026-01-01T00")})   # -> the intervals to page in
        cache.put((0, "2026-01-01T00"), IdInterval(hi, lo))
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError(f"the ID cache needs a positive byte bound, got {max_bytes}")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Interval, IdInterval] = OrderedDict()
        self._bytes = 0
        self._hits = self._misses = self._evictions = self._dropped = 0

    def lookup(self, intervals: Iterable[Interval]) -> set[Interval]:
        """Mark these intervals as used now and return those not in memory (counted as misses)."""
        missing = set()
        for key in sorted(set(intervals)):
            if key in self._entries:
                self._entries.move_to_end(key)
                self._hits += 1
            else:
                missing.add(key)
                self._misses += 1
        return missing

    def get(self, key: Interval) -> IdInterval | None:
        return self._entries.get(key)

    def put(self, key: Interval, ids: IdInterval) -> None:
        """Store an interval as most recently used, then evict the least recent ones past the byte bound.

        The interval just stored is never evicted by its own insertion, even when it alone passes the bound:
        the batch being checked needs it; it goes first on the next insertion.
        """
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old.nbytes
        self._entries[key] = ids
        self._bytes += ids.nbytes
        while self._bytes > self.max_bytes and len(self._entries) > 1:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= evicted.nbytes
            self._evictions += 1

    def add(self, key: Interval, hi: Int64s, lo: Int64s) -> None:
        """Add newly committed IDs to an interval that is in memory (an absent one is paged in when needed)."""
        current = self._entries.get(key)
        if current is not None:
            self.put(key, current.union(hi, lo))

    def drop_shards(self, shards: Iterable[int]) -> int:
        """Forget every interval of these shards (after a lost commit race); return how many were dropped."""
        doomed = set(shards)
        keys = [k for k in self._entries if k[0] in doomed]
        for key in keys:
            self._bytes -= self._entries.pop(key).nbytes
        self._dropped += len(keys)
        return len(keys)

    def stats(self) -> CacheStats:
        return CacheStats(hits=self._hits, misses=self._misses, evictions=self._evictions, dropped=self._dropped,
                          intervals=len(self._entries), ids=sum(len(v) for v in self._entries.values()),
                          bytes=self._bytes, max_bytes=self.max_bytes)
