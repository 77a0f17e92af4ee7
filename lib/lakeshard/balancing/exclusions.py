"""Shard exclusions (Husky): take a lagging shard out of new placements, and put it back later.

Excluding a shard changes only placements allocated from then on: they skip it, so new traffic stops
reaching it from the next placement window, while events of windows already placed still go where their
(immutable) placement says — which keeps deduplication within one shard. A tenant whose run included
the excluded shard gets the next available shard instead; every other placement stays the same.
"""

from __future__ import annotations

from collections.abc import Iterable

from lakeshard.balancing.errors import BalancingError
from lakeshard.routing import ShardTopology

__all__ = ["ExclusionError", "plan_exclusion"]


class ExclusionError(BalancingError):
    """An exclusion names shards outside the ring, or would leave no shard to place on."""


def plan_exclusion(
    topology: ShardTopology, *, exclude: Iterable[int] = (), include: Iterable[int] = ()
) -> ShardTopology:
    """Return ``topology`` with ``exclude`` added to and then ``include`` removed from its excluded shards.

    Raises:
        ExclusionError: a shard is outside ``[0, total_shards)``, a shard is both excluded and included,
            or every shard would be excluded.

    Example::

        plan_exclusion(ShardTopology(16, (3,)), exclude=[5], include=[3]) == ShardTopology(16, (5,))
    """
    out_set, in_set = set(exclude), set(include)
    total = topology.total_shards
    bad = sorted(s for s in out_set | in_set if not 0 <= s < total)
    if bad:
        raise ExclusionError(f"shards {bad} are outside the ring of {total} shards [0, {total})")
    both = sorted(out_set & in_set)
    if both:
        raise ExclusionError(f"shards {both} are both excluded and included; name each shard once")
    excluded = (set(topology.excluded) | out_set) - in_set
    if len(excluded) >= total:
        raise ExclusionError(f"excluding {sorted(out_set)} would leave none of the {total} shards for placements "
                             f"(already excluded: {list(topology.excluded)})")
    return ShardTopology(total, tuple(sorted(excluded)))
