"""Shard routing (Husky Shard Router): each valid landing event gets its tenant's placement for its time window
and a shard of that placement, and is appended to ``routed``; bad records go to ``quarantine``.

:mod:`~lakeshard.routing.hashing` hashes events identically in Python and Spark; :mod:`~lakeshard.routing.placement`
picks a placement's shards (consistent hash of tenant and salt, then clockwise, skipping exclusions);
:class:`ShardAllocator` allocates immutable, time-bounded placements through the Delta log; :class:`Router`
reads new landing files and routes them exactly once. Table names and app ids live in :mod:`lakeshard.tables`.

Example::

    from lakeshard.routing import Router, first_shard, placement_shards

    placement_shards(first_shard("acme", salt=0, total_shards=64), 4, 64)   # the tenant's 4 shards
    reports = Router(spark, store, cfg).run()                               # route every new landing file
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakeshard._lazy import lazy_exports

if TYPE_CHECKING:
    from lakeshard.routing.allocator import (
        AllocatorStats,
        ShardAllocator,
        plan_placements,
    )
    from lakeshard.routing.arrow_route import (
        route_arrow,
        routed_rows,
    )
    from lakeshard.routing.consumed import (
        consumed_landing,
    )
    from lakeshard.routing.errors import (
        RoutingError,
    )
    from lakeshard.routing.handoff import FusedHandoff
    from lakeshard.routing.hashing import (
        HASH_MMH3,
        HASH_VERSIONS,
        HASH_XXHASH64,
        event_hash,
        event_hash_column,
        event_hashes,
        jump_hash,
        tenant_key,
    )
    from lakeshard.routing.lifecycle import (
        ANCHOR_BYTES,
        Consumed,
        HeldBack,
        Intake,
        PlannedRange,
        next_range,
        plan_intake,
    )
    from lakeshard.routing.placement import (
        Placement,
        first_shard,
        placement_shards,
        window_of,
    )
    from lakeshard.routing.plan import planned_batch, planned_file
    from lakeshard.routing.router import (
        Router,
        RouteReport,
    )
    from lakeshard.routing.spark_route import (
        AUTO_WRITE_TASKS_MAX,
        route,
        write_tasks,
    )
    from lakeshard.routing.tables import (
        RoutingTables,
        ShardTopology,
        TenantSetting,
        placements_arrow,
        placements_from_arrow,
    )
    from lakeshard.routing.unrouted import (
        unrouted_landing,
    )

# Spark and Arrow load on first use of a name, not on `import lakeshard.routing`.
__all__ = [
    "ANCHOR_BYTES",
    "AUTO_WRITE_TASKS_MAX",
    "HASH_MMH3",
    "HASH_VERSIONS",
    "HASH_XXHASH64",
    "AllocatorStats",
    "Consumed",
    "FusedHandoff",
    "HeldBack",
    "Intake",
    "Placement",
    "PlannedRange",
    "RouteReport",
    "Router",
    "RoutingError",
    "RoutingTables",
    "ShardAllocator",
    "ShardTopology",
    "TenantSetting",
    "consumed_landing",
    "event_hash",
    "event_hash_column",
    "event_hashes",
    "first_shard",
    "jump_hash",
    "next_range",
    "placement_shards",
    "placements_arrow",
    "placements_from_arrow",
    "plan_intake",
    "plan_placements",
    "planned_batch",
    "planned_file",
    "route",
    "route_arrow",
    "routed_rows",
    "tenant_key",
    "unrouted_landing",
    "window_of",
    "write_tasks",
]

__getattr__, __dir__ = lazy_exports(globals())
