"""Lakehouse housekeeping: the small bookkeeping tables compacted, expired commit files cleaned up, data files
no recent version references vacuumed (the maintenance job's ``compact_books`` flow, docs/pipelines.md), and
every live data file checked against the log (``lakeshard fsck``), and the events a repair removed restored from
the landing zone (``lakeshard refill``: a bucket's events, or a ``routed`` file's batch routed again) or, for
the ID index, from ``events``, for ``placements``, from the shards the events of each window went to, and for
``buckets``, ``tenant_settings`` and ``shard_topology``, from the files a bookkeeping rewrite made them from.

Example::

    from lakeshard.maintenance import clean_logs, compact_bookkeeping, vacuum_tables

    report = compact_bookkeeping(store, cfg)
    clean_logs(store, cfg)
    vacuum_tables(store, cfg, now=datetime.now(UTC))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakeshard._lazy import lazy_exports

if TYPE_CHECKING:
    from lakeshard.maintenance.bookkeeping import (
        BOOKKEEPING_TABLES,
        CHECKPOINT_INTERVAL,
        SORTED_LAYOUTS,
        BookkeepingReport,
        TableUpkeep,
        clean_logs,
        compact_bookkeeping,
        small_files,
        vacuum_tables,
        write_sorted,
    )
    from lakeshard.maintenance.decisions import (
        DECISION_TABLES,
        DecisionRefill,
        plan_decision_refills,
        refill_decisions,
    )
    from lakeshard.maintenance.errors import MaintenanceError, RefillRefused
    from lakeshard.maintenance.fsck import FSCK_OPERATION, TableCheck, check_table, repair_table
    from lakeshard.maintenance.placements import PlacementRefills, plan_placement_refills, refill_placements
    from lakeshard.maintenance.refill import REFILL_OPERATION, RefillPlan, plan_refill, refill_bucket
    from lakeshard.maintenance.reindex import IdRefill, IdRefills, plan_id_refills, refill_ids
    from lakeshard.maintenance.reroute import RoutedRefill, RoutedRefills, plan_routed_refills, refill_routed

# Arrow loads on first use of a name, not on `import lakeshard.maintenance`.
__all__ = [
    "BOOKKEEPING_TABLES",
    "CHECKPOINT_INTERVAL",
    "DECISION_TABLES",
    "FSCK_OPERATION",
    "REFILL_OPERATION",
    "SORTED_LAYOUTS",
    "BookkeepingReport",
    "DecisionRefill",
    "IdRefill",
    "IdRefills",
    "MaintenanceError",
    "PlacementRefills",
    "RefillPlan",
    "RefillRefused",
    "RoutedRefill",
    "RoutedRefills",
    "TableCheck",
    "TableUpkeep",
    "check_table",
    "clean_logs",
    "compact_bookkeeping",
    "plan_decision_refills",
    "plan_id_refills",
    "plan_placement_refills",
    "plan_refill",
    "plan_routed_refills",
    "refill_bucket",
    "refill_decisions",
    "refill_ids",
    "refill_placements",
    "refill_routed",
    "repair_table",
    "small_files",
    "vacuum_tables",
    "write_sorted",
]

__getattr__, __dir__ = lazy_exports(globals())
