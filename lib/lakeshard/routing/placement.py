"""Time-bounded shard placements (Husky): which shards a tenant's events of one time window go to.

A placement is immutable: once allocated, the same ``(tenant, window)`` always maps to the same shard
list, so an event routed twice — by two routers, or before and after a restart — lands on the same
shard, and deduplication only ever has to look within one shard.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from lakeshard.routing.errors import RoutingError
from lakeshard.routing.hashing import event_hash, jump_hash, tenant_key
from lakeshard.utc import aware, from_micros, micros

__all__ = [
    "Placement",
    "first_shard",
    "placement_shards",
    "window_of",
]


def first_shard(tenant_id: str, salt: int, total_shards: int) -> int:
    """Return the tenant's first shard: a jump consistent hash of ``tenant_id`` + ``salt`` over the total.

    Growing ``total_shards`` from k to k+1 changes the first shard of only about 1/(k+1) of tenants.
    """
    if total_shards < 1:
        raise RoutingError(f"total_shards must be at least 1, got {total_shards}")
    return jump_hash(tenant_key(tenant_id, salt), total_shards)


def placement_shards(first: int, count: int, total_shards: int, excluded: Iterable[int] = ()) -> tuple[int, ...]:
    """Return ``count`` shards: ``first`` and the shards after it clockwise, skipping excluded ones.

    The walk wraps past the last shard to 0; an excluded ``first`` is skipped too. From the Husky post,
    with 10 shards and shards 3 and 7 excluded::

        placement_shards(2, 3, 10, [3, 7]) == (2, 4, 5)
        placement_shards(7, 2, 10, [3, 7]) == (8, 9)

    Raises:
        RoutingError: ``count`` exceeds the shards that are not excluded, or an argument is out of range.
    """
    if total_shards < 1:
        raise RoutingError(f"total_shards must be at least 1, got {total_shards}")
    if not 0 <= first < total_shards:
        raise RoutingError(f"first shard {first} is outside [0, {total_shards})")
    skip = {s for s in excluded if 0 <= s < total_shards}
    available = total_shards - len(skip)
    if count < 1 or count > available:
        raise RoutingError(
            f"cannot place on {count} shards: {available} of {total_shards} shards are available "
            f"(excluded: {sorted(skip)}); the count must be between 1 and {available}"
        )
    shards: list[int] = []
    shard = first
    while len(shards) < count:
        if shard not in skip:
            shards.append(shard)
        shard = (shard + 1) % total_shards
    return tuple(shards)


def window_of(ts: datetime, window_seconds: int) -> tuple[datetime, datetime]:
    """Return the ``[start, end)`` of the fixed-grid window (aligned to the Unix epoch) holding ``ts``."""
    if window_seconds < 1:
        raise RoutingError(f"window length must be at least one second, got {window_seconds}")
    size = window_seconds * 1_000_000
    start = from_micros((micros(ts) // size) * size)
    return start, start + timedelta(seconds=window_seconds)


@dataclass(frozen=True)
class Placement:
    """The shards of one tenant for one time window; never changes once allocated."""

    tenant_id: str
    window_start: datetime
    window_end: datetime
    shards: tuple[int, ...]
    salt: int
    total_shards: int
    excluded: tuple[int, ...]
    created_at: datetime
    hash_version: int  # the event hash this placement routes by (lakeshard.routing.hashing), fixed for good

    def shard_for(self, event_id: str) -> int:
        """Return the shard of an event of this placement: ``shards[event_hash(event_id, v) % len(shards)]``."""
        return self.shards[event_hash(event_id, self.hash_version) % len(self.shards)]

    def covers(self, ts: datetime) -> bool:
        """Return whether ``ts`` lies in this placement's window."""
        ts = aware(ts)
        return self.window_start <= ts < self.window_end
