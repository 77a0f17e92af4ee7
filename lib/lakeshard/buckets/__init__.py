"""Hourly bucket completeness (Spotify): the completionist closes ``(tenant, hour)`` buckets of ``events``
when they are quiet and nothing for them can still be in flight; closed buckets never change, and late
events go to the open bucket flagged ``late``.

Example::

    from lakeshard.buckets import Completionist, assign_buckets

    c = Completionist(spark, store, cfg)
    c.run()                                            # close what is complete, with integrity checks
    c.closed_buckets(since=yesterday)                  # complete hours, for downstream hourly jobs
    batch = assign_buckets(batch, c.closed(), now)     # a writer routes late events to open buckets
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakeshard._lazy import lazy_exports

if TYPE_CHECKING:
    from lakeshard.buckets.checksum import (
        BucketCheck,
        check_buckets,
    )
    from lakeshard.buckets.completionist import (
        BucketsError,
        BucketState,
        Completionist,
        CompletionReport,
        closed_table,
    )
    from lakeshard.buckets.guard import guard_open_buckets, refused_by_guard
    from lakeshard.buckets.late import (
        assign_buckets,
        assign_buckets_arrow,
        event_hour,
    )
    from lakeshard.buckets.planner import (
        Backlog,
        BucketDecision,
        BucketObservation,
        hour_end,
        late_target,
        open_hour,
        plan_closures,
    )

# Spark and Arrow load on first use of a name, not on `import lakeshard.buckets`.
__all__ = [
    "Backlog",
    "BucketCheck",
    "BucketDecision",
    "BucketObservation",
    "BucketState",
    "BucketsError",
    "CompletionReport",
    "Completionist",
    "assign_buckets",
    "assign_buckets_arrow",
    "check_buckets",
    "closed_table",
    "event_hour",
    "guard_open_buckets",
    "hour_end",
    "late_target",
    "open_hour",
    "plan_closures",
    "refused_by_guard",
]

__getattr__, __dir__ = lazy_exports(globals())
