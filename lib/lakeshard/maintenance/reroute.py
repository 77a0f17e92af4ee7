"""``lakeshard refill --routed``: the events of ``routed`` files fsck removed, routed again from their batch's plan.

A ``routed`` file that ``lakeshard fsck --repair`` removed before the writers consumed it held events that never
reached ``events`` nor the ID index: unlike a repaired ``events`` bucket (:mod:`lakeshard.maintenance.refill`),
nothing records their keys. What is recorded is where they came from: the ``routed`` commit that added the file
carries its batch, and ``landing_batches`` holds that batch's plan (the byte ranges of its landing files, their
checksums and the clock the parse validated by). So a refill parses the plan's bytes again by its clock and routes
them again (placements are immutable, so every event lands on the shard it landed on before), keeps the rows of
the removed file's shard, and appends them to ``routed`` as a new commit. The writers consume it as any other:
the events already written (rows of the shard's other files, or of an earlier refill) are duplicates in the ID
index and dropped; the lost ones are written once.

The commit carries the app transaction ``refill/<batch>/<shard>`` (:func:`~lakeshard.tables.refill_app_id`) at
the number of that batch's files of that shard fsck removed, so a refill run twice (or crashed and run again)
commits once, and a file the refill wrote that fsck removes in turn is refilled again. Quarantine and metrics are
not touched: the batch's first run recorded them.

A removed file whose adding commit the log no longer holds (cleaned up past ``delta.logRetentionDuration``), or
whose batch plan is gone, cannot be refilled; :attr:`RoutedRefills.unknown` names it.

Example::

    refills = plan_routed_refills(store, cfg)
    for refill in refills.pending:
        refill_routed(store, cfg, refill)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from lakeshard.lake import AppTransaction
from lakeshard.tables import FSCK_REPAIRS, LANDING_BATCHES, ROUTED, refill_app_id

if TYPE_CHECKING:
    from lakeshard.config import LakeshardConfig
    from lakeshard.lake import CommitResult, TableStore

__all__ = ["RoutedRefill", "RoutedRefills", "plan_routed_refills", "refill_routed"]


@dataclass(frozen=True, eq=False)  # an Arrow table has no meaningful equality
class RoutedRefill:
    """One batch's events of one shard, routed again: ``rows`` in ``routed``'s columns; ``removed`` the rows the
    log said fsck's removed files held; ``version`` the app transaction's (how many of the files were removed)."""

    batch: int
    shard: int
    version: int
    removed: int
    rows: pa.Table

    @property
    def app_transaction(self) -> AppTransaction:
        """Return the app transaction the refill's commit carries (a replay of it is skipped)."""
        return AppTransaction(refill_app_id(self.batch, self.shard), self.version)


@dataclass(frozen=True)
class RoutedRefills:
    """What refilling the ``routed`` files fsck removed takes: the refills still to commit, how many were committed
    already, and the removed files that cannot be refilled (path and why)."""

    pending: tuple[RoutedRefill, ...]
    done: int
    unknown: tuple[tuple[str, str], ...]


def plan_routed_refills(store: TableStore, cfg: LakeshardConfig) -> RoutedRefills:
    """Return the refills of every ``routed`` file ``fsck_repairs`` records as removed, each batch's planned landing
    bytes parsed and routed again (refills an earlier run committed are counted in ``done``, not planned)."""
    routed = cfg.table_uri(ROUTED)
    if not store.exists(routed) or not store.exists(cfg.table_uri(FSCK_REPAIRS)):
        return RoutedRefills((), 0, ())
    repairs = store.read_table_arrow(cfg.table_uri(FSCK_REPAIRS), ["path", "rows"],
                                     where=pc.field("table_name") == ROUTED).to_pylist()
    if not repairs:
        return RoutedRefills((), 0, ())
    batch_of = _batches_adding(store, routed, {r["path"] for r in repairs})
    files: Counter[tuple[int, int]] = Counter()
    rows: Counter[tuple[int, int]] = Counter()
    unknown = []
    for r in repairs:
        batch, shard = batch_of.get(r["path"], (None, None))
        if batch is None or shard is None:
            unknown.append((str(r["path"]), "the log no longer holds the commit that added it, so its batch is "
                                            "unknown"))
            continue
        files[batch, shard] += 1
        rows[batch, shard] += int(r["rows"] or 0)
    pending, done = [], 0
    again: dict[int, pa.Table | None] = {}  # each batch parsed and routed once, however many of its shards lost files
    for (batch, shard), version in sorted(files.items()):
        if (store.transaction_version(routed, refill_app_id(batch, shard)) or 0) >= version:
            done += 1
            continue
        found = again[batch] if batch in again else again.setdefault(batch, _routed_again(store, cfg, batch))
        if found is None:
            unknown.append((f"batch {batch}, shard {shard}", f"{cfg.table_uri(LANDING_BATCHES)} holds no plan of "
                                                             f"batch {batch}"))
            continue
        mine = found.filter(pc.equal(found.column("shard"), pa.scalar(shard, found.schema.field("shard").type)))
        pending.append(RoutedRefill(batch, shard, version, rows[batch, shard], mine))
    return RoutedRefills(tuple(pending), done, tuple(unknown))


def refill_routed(store: TableStore, cfg: LakeshardConfig, refill: RoutedRefill) -> CommitResult:
    """Return the commit appending ``refill``'s rows to ``routed`` (skipped when an earlier run committed it)."""
    meta = {"batch": refill.batch, "refill": {"shard": refill.shard, "rows": refill.rows.num_rows,
                                              "removed": refill.removed}}
    return store.append_arrow(cfg.table_uri(ROUTED), refill.rows.cast(store.arrow_schema(cfg.table_uri(ROUTED))),
                              app_transactions=[refill.app_transaction], metadata=meta)


def _batches_adding(store: TableStore, routed: str, paths: set[str]) -> dict[str, tuple[int, int | None]]:
    """Return, for each of ``paths`` a commit the log holds added to ``routed``, the batch its commit carries and the
    file's shard."""
    found: dict[str, tuple[int, int | None]] = {}
    for entry in store.log_entries(routed):
        batch = entry.custom_metadata.get("batch")
        if batch is None:
            continue
        for change in entry.changes:
            if change.action == "add" and change.file.path in paths:
                shard = change.file.partition_values.get("shard")
                found[change.file.path] = (int(batch), None if shard is None else int(shard))
    return found


def _routed_again(store: TableStore, cfg: LakeshardConfig, batch: int) -> pa.Table | None:
    """Return batch ``batch``'s planned landing bytes parsed by the plan's clock and routed, as ``routed`` rows; None
    when ``landing_batches`` holds no plan of it."""
    from lakeshard.landing import parse_landing_arrow
    from lakeshard.routing import ShardAllocator, planned_batch, route_arrow, routed_rows

    rows = store.read_table_arrow(cfg.table_uri(LANDING_BATCHES), where=pc.field("batch") == batch).to_pylist()
    if not rows:
        return None
    plan = planned_batch(rows)
    events, _ = parse_landing_arrow(plan.files, limits=cfg.landing_format, now_ms=plan.now_ms)
    return routed_rows(route_arrow(events, ShardAllocator(store, cfg)), batch)
