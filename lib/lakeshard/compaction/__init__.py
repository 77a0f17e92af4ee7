"""Compaction (Husky): lazy size-tiered merges, then locality levels, swapped in atomically, with per-file
pruning regexes in the ``fragments`` Delta table.

Planners are pure (:mod:`~lakeshard.compaction.planner`); :class:`Compactor` executes their plans through
the ``TableStore``. The read path that prunes with the regexes is :mod:`lakeshard.query`; the upkeep of the
small bookkeeping tables (``fragments`` among them) is :mod:`lakeshard.maintenance`.

Example::

    from lakeshard.compaction import Compactor

    Compactor(store, cfg.table_uri("events")).run(apply=True)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakeshard._lazy import lazy_exports

if TYPE_CHECKING:
    from lakeshard.compaction.errors import (
        CompactionError,
    )
    from lakeshard.compaction.events import (
        compact_events,
    )
    from lakeshard.compaction.executor import (
        CompactionReport,
        CompactionSettings,
        Compactor,
        RoundResult,
    )
    from lakeshard.compaction.fragment_table import (
        FragmentTable,
        live_fragment_rows,
        read_fragments,
    )
    from lakeshard.compaction.fragments import (
        FragmentError,
        FragmentMeta,
    )
    from lakeshard.compaction.planner import (
        Bucket,
        CompactionPlan,
        CompactionTask,
        FileNode,
        LocalityPlanner,
        PlannerError,
        SizeTieredPlanner,
        plan_compaction,
    )
    from lakeshard.compaction.sort_schema import (
        EVENTS_SORT_SCHEMA,
        SortSchema,
        SortSchemaError,
        sort_schema_for,
    )

# Spark and Arrow load on first use of a name, not on `import lakeshard.compaction`.
__all__ = [
    "EVENTS_SORT_SCHEMA",
    "Bucket",
    "CompactionError",
    "CompactionPlan",
    "CompactionReport",
    "CompactionSettings",
    "CompactionTask",
    "Compactor",
    "FileNode",
    "FragmentError",
    "FragmentMeta",
    "FragmentTable",
    "LocalityPlanner",
    "PlannerError",
    "RoundResult",
    "SizeTieredPlanner",
    "SortSchema",
    "SortSchemaError",
    "compact_events",
    "live_fragment_rows",
    "plan_compaction",
    "read_fragments",
    "sort_schema_for",
]

__getattr__, __dir__ = lazy_exports(globals())
