"""The read path: events read with partition, min/max and regex pruning, and the report of what was pruned.

:func:`read_events` (and :func:`plan_read`, the plan alone, without Spark) reads a tenant's events over a time
range; ``spark.read.format("lakeshard")`` (:func:`register_lakeshard_source`) prunes with the same stages from
the filters Spark pushes. Both read the fragment metadata compaction writes (:mod:`lakeshard.compaction`).

Example::

    from lakeshard.query import read_events

    df, report = read_events(spark, store, cfg.table_uri("events"), tenant="acme",
                             start=t0, end=t1, predicates={"service": "billing"})
    print(report.render())
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakeshard._lazy import lazy_exports

if TYPE_CHECKING:
    from lakeshard.query.datasource import register_lakeshard_source
    from lakeshard.query.errors import QueryError
    from lakeshard.query.read import (
        Predicates,
        PruningReport,
        TimeBounds,
        choose_files,
        choose_files_by_values,
        in_partitions,
        plan_read,
        read_events,
    )

# Spark and Arrow load on first use of a name, not on `import lakeshard.query`.
__all__ = [
    "Predicates",
    "PruningReport",
    "QueryError",
    "TimeBounds",
    "choose_files",
    "choose_files_by_values",
    "in_partitions",
    "plan_read",
    "read_events",
    "register_lakeshard_source",
]

__getattr__, __dir__ = lazy_exports(globals())
