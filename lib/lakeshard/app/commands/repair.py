"""``lakeshard fsck [--repair]`` and ``lakeshard refill``: damage found, removed from the log, and restored.

* ``fsck``   — every live data file of every table checked against its log; ``--repair`` removes the damaged
  ones (one commit per table) and records what they held in ``fsck_repairs``;
* ``refill`` — what a repair removed restored: an ``events`` bucket from the landing zone, ``routed`` files by
  routing their batches again, ``event_ids`` partitions from ``events``, placements from their events' shards,
  ``buckets``, ``tenant_settings`` and ``shard_topology`` rows from the files a bookkeeping rewrite made them from.

The top-level parser wires them in with :func:`add_commands`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from lakeshard.app.cli_args import bucket, config_from_args
from lakeshard.config import LakeshardConfig

if TYPE_CHECKING:
    from lakeshard.lake import CommitResult, TableStore

__all__ = ["add_commands", "cmd_fsck", "cmd_refill"]


def cmd_fsck(args: argparse.Namespace) -> int:
    """Check every live data file of every lakehouse table against the log (exists, reads as Parquet, rows and
    key ranges as the log says); with --repair, remove the damaged ones from their table's log (one commit per
    table) and record what they held in fsck_repairs. Exit 1 when damage was found and left, or a table's log cannot
    be read."""
    from lakeshard.errors import TableStoreError
    from lakeshard.lake import open_lazy_store
    from lakeshard.maintenance import check_table, repair_table
    from lakeshard.tables import FSCK_REPAIRS, TABLES

    cfg = config_from_args(args)
    store = open_lazy_store(cfg)
    left = 0
    present = [name for name in TABLES if store.exists(cfg.table_uri(name))]
    if not present:
        print(f"no lakeshard table in {cfg.lakehouse}")
    unreadable = 0
    for name in present:
        uri = cfg.table_uri(name)
        try:
            check = check_table(store, uri)
        except TableStoreError as exc:  # its log cannot be read (a torn commit): the other tables are still checked
            print(f"{name}: cannot be checked: {exc}", file=sys.stderr)
            unreadable += 1
            continue
        print(f"{name}: {check.files:,} live files at version {check.version}, {len(check.damaged)} damaged")
        for _, damage in check.damaged:
            print(f"  damaged: {damage}", file=sys.stderr)
        if check.damaged and args.repair:
            done = repair_table(store, check, cfg.table_uri(FSCK_REPAIRS))
            print(f"  removed {len(done.damaged)} files ({done.lost_rows:,} rows by the log) from {name} in version "
                  f"{done.repaired_version}; recorded in {FSCK_REPAIRS}")
            if name in _REFILLS:
                print(f"  {_REFILLS[name]}")
            _name_unrebuildable(store, cfg, name, {f.path for f, _ in done.damaged})
        elif check.damaged:
            left += len(check.damaged)
    if left:
        print(f"{left} damaged files left in the log: lakeshard fsck --repair removes them and records what they held",
              file=sys.stderr)
    if unreadable:
        print(f"{unreadable} table's log cannot be read: fsck checks data files against a log, it does not mend one"
              if unreadable == 1 else f"{unreadable} tables' logs cannot be read: fsck checks data files against a "
              "log, it does not mend one", file=sys.stderr)
    return 1 if left or unreadable else 0


def _name_unrebuildable(store: TableStore, cfg: LakeshardConfig, name: str, removed: set[str]) -> None:
    """Print, for a table whose removed files ``refill --decisions`` rebuilds, each of ``removed`` it cannot rebuild
    and why (stderr): at the repair, not only when a refill is run."""
    from lakeshard.maintenance import DECISION_TABLES, plan_decision_refills

    if name not in DECISION_TABLES:
        return
    for refill in plan_decision_refills(store, cfg, tables=[name]):
        for path, why in refill.unrebuilt:
            if path in removed:
                print(f"  cannot rebuild {name} file {path}: {why}", file=sys.stderr)


_NAMED = 20  # landing files a refill names one per line; the rest are counted

# What restores the rows a repair removed from each table ``lakeshard refill`` knows.
_REFILLS = {
    "events": "lakeshard refill --bucket TENANT/HOUR restores a repaired bucket's events from the landing zone",
    "routed": "lakeshard refill --routed routes the removed files' batches again",
    "event_ids": "lakeshard refill --ids rebuilds the removed IDs from events; run it before the next ingest",
    "placements": "lakeshard refill --placements restores the removed placements from their events' shards; run it "
                  "before the next ingest",
    **{name: "lakeshard refill --decisions rebuilds the removed rows from the files a bookkeeping rewrite made them "
             "from, and names each file it cannot rebuild and why" for name in ("buckets", "tenant_settings",
                                                                                "shard_topology")},
}


def cmd_refill(args: argparse.Namespace) -> int:
    """Restore the events lakeshard fsck --repair removed. With --bucket (a damaged events file): parse again the
    landing bytes of the batches that fed the bucket, and commit back to events the ones the ID index holds and the
    bucket does not; a closed bucket is refused. With --routed (damaged routed files): route each removed file's
    batch again from its plan, for the file's shard; the writers then write the events not written yet and drop
    the rest as duplicates. With --ids (damaged event_ids files): rebuild each repaired partition's IDs from the
    events they index. With --placements (damaged placements files): restore the placement of each window the
    events hold and placements lacks, when exactly one placement the tenant could have had sends every event of
    the window to the shard it went to. With --decisions (damaged buckets, tenant_settings or shard_topology
    files): rebuild each removed file's rows from the files the bookkeeping rewrite that made it removed, still on
    disk until vacuum; each file that cannot be rebuilt is named with the reason. Exit 1 when some removed rows or
    windows cannot be restored."""
    from lakeshard.lake import open_lazy_store
    from lakeshard.maintenance import plan_refill, refill_bucket

    cfg = config_from_args(args)
    store = open_lazy_store(cfg)
    if args.routed:
        return _refill_routed(store, cfg, dry_run=args.dry_run)
    if args.ids:
        return _refill_ids(store, cfg, dry_run=args.dry_run)
    if args.placements:
        return _refill_placements(store, cfg, dry_run=args.dry_run)
    if args.decisions:
        return _refill_decisions(store, cfg, dry_run=args.dry_run)
    tenant_id, hour = args.bucket
    plan = plan_refill(store, cfg, tenant_id, hour)
    print(f"bucket {tenant_id}/{hour}: {plan.found:,} events in the landing bytes of {len(plan.batches)} batches, "
          f"{plan.rows.num_rows:,} of them lost (fsck removed {plan.removed:,} rows)")
    if args.dry_run:
        return 0
    done = refill_bucket(store, cfg, plan)
    if done is not None:
        print(f"restored {plan.rows.num_rows:,} events to {tenant_id}/{hour} in events version {done.version}")
    for problem in plan.problems[:_NAMED]:
        print(f"landing file {problem}", file=sys.stderr)
    if len(plan.problems) > _NAMED:
        print(f"... and {len(plan.problems) - _NAMED:,} more landing files not as planned", file=sys.stderr)
    if plan.missing:
        print(f"{plan.missing:,} removed rows were not restored: no landing file of the batches that fed the bucket "
              "holds them any more (see the files named above); they are lost unless a copy is found elsewhere",
              file=sys.stderr)
        return 1
    return 0


def _refill_routed(store: TableStore, cfg: LakeshardConfig, *, dry_run: bool) -> int:
    """Route again the batches of the routed files fsck removed (``lakeshard refill --routed``)."""
    from lakeshard.maintenance import plan_routed_refills, refill_routed
    from lakeshard.tables import ROUTED

    refills = plan_routed_refills(store, cfg)
    if not refills.pending and not refills.unknown:
        print(f"nothing to refill in {ROUTED}: {refills.done} removed files' batches were routed again already")
    _commit_each(refills.pending, lambda r: refill_routed(store, cfg, r), dry_run=dry_run, table=ROUTED,
                 what=lambda r: f"batch {r.batch}, shard {r.shard}: {r.rows.num_rows:,} events in its landing bytes "
                                f"(fsck removed {r.removed:,} rows)",
                 would="would route them again", did="routed again in {}: the writers write those not written yet")
    for path, why in refills.unknown:
        print(f"cannot refill {ROUTED} file {path}: {why}", file=sys.stderr)
    return 1 if refills.unknown else 0


def _refill_ids(store: TableStore, cfg: LakeshardConfig, *, dry_run: bool) -> int:
    """Rebuild from events the ID index partitions fsck removed files of (``lakeshard refill --ids``)."""
    from lakeshard.maintenance import plan_id_refills, refill_ids
    from lakeshard.tables import ID_INDEX

    refills = plan_id_refills(store, cfg)
    if not refills.pending:
        print(f"nothing to refill in {ID_INDEX}: {refills.done} repaired partitions were rebuilt already")
    _commit_each(refills.pending, lambda r: refill_ids(store, cfg, r), dry_run=dry_run, table=ID_INDEX,
                 what=lambda r: f"shard {r.shard}, interval {r.interval}: {r.rows.num_rows:,} IDs of events in "
                                f"events the index lacks (fsck removed {r.removed:,} rows)",
                 would="would commit them", did="committed in {}")
    return 0


def _refill_decisions(store: TableStore, cfg: LakeshardConfig, *, dry_run: bool) -> int:
    """Rebuild the buckets, tenant_settings and shard_topology rows fsck removed (``lakeshard refill --decisions``)."""
    from lakeshard.maintenance import DECISION_TABLES, plan_decision_refills, refill_decisions

    refills = plan_decision_refills(store, cfg)
    if not refills:
        print(f"nothing to refill in {', '.join(DECISION_TABLES)}: fsck removed none of their files")
    for r in refills:
        what = (f"{r.table}: {len(r.rebuilt)} of {r.version} removed files rebuilt from the files they were rewritten "
                f"from (fsck removed {r.removed:,} rows), {r.rows.num_rows:,} rows not in the table")
        if dry_run or not r.rows.num_rows:
            print(f"{what}; " + ("would commit them" if dry_run and r.rows.num_rows else "nothing to commit"))
        else:
            done = refill_decisions(store, cfg, r)
            print(f"{what}; " + ("committed already" if done is None or done.skipped
                                 else f"committed in {r.table} version {done.version}"))
        for path, why in r.unrebuilt:
            print(f"cannot rebuild {r.table} file {path}: {why}", file=sys.stderr)
    return 1 if any(r.unrebuilt for r in refills) else 0


def _commit_each(pending: Sequence[Any], commit: Callable[[Any], CommitResult], *, dry_run: bool, table: str,
                 what: Callable[[Any], str], would: str, did: str) -> None:
    """Commit each of ``pending`` refills (or, dry, say what would be) and print one line each: ``what`` it is, then
    ``would`` or ``did`` (formatted with the version committed, or "committed already" on a replay)."""
    for refill in pending:
        if dry_run:
            print(f"{what(refill)}; {would}")
            continue
        done = commit(refill)
        print(f"{what(refill)}; " + ("committed already" if done.skipped else did.format(f"{table} version "
                                                                                           f"{done.version}")))


def _refill_placements(store: TableStore, cfg: LakeshardConfig, *, dry_run: bool) -> int:
    """Restore the placements of the placements files fsck removed (``lakeshard refill --placements``)."""
    from lakeshard.errors import CommitConflict
    from lakeshard.maintenance import plan_placement_refills, refill_placements
    from lakeshard.tables import PLACEMENTS

    done = None
    for _ in range(cfg.routing.allocation_retries):
        refills = plan_placement_refills(store, cfg)
        if dry_run:
            break
        try:  # prepared at the plan's read: an allocator or another refill that committed since means plan again
            done = refill_placements(store, cfg, refills)
            break
        except CommitConflict:
            continue
    else:
        print(f"could not restore placements in {PLACEMENTS}: allocators kept committing first; run it again",
              file=sys.stderr)
        return 1
    if not refills.version:
        print(f"nothing to refill in {PLACEMENTS}: fsck removed none of its files")
        return 0
    for p in refills.restored[:_SHOWN_WINDOWS]:
        print(f"{p.tenant_id} window {p.window_start.isoformat()}: shards {list(p.shards)} (hash {p.hash_version}, "
              f"salt {p.salt}, ring {p.total_shards}, excluded {list(p.excluded)})")
    if len(refills.restored) > _SHOWN_WINDOWS:
        print(f"... and {len(refills.restored) - _SHOWN_WINDOWS:,} more windows")
    for tenant_id, start, why in refills.unresolved:
        print(f"cannot restore the placement of {tenant_id} window {start.isoformat()}: {why}", file=sys.stderr)
    if dry_run or done is None:
        print(f"{'would restore' if dry_run else 'restored'} {len(refills.restored):,} placements; "
              f"{len(refills.unresolved):,} windows left as they are")
    else:
        state = "committed already" if done.skipped else f"{PLACEMENTS} version {done.version}"
        print(f"restored {len(refills.restored):,} placements in {state}; {len(refills.unresolved):,} windows left "
              "as they are")
    return 1 if refills.unresolved else 0


_SHOWN_WINDOWS = 20


def add_commands(subparsers: Any, common: Callable[..., None]) -> None:
    """Add ``fsck`` and ``refill`` to the top-level parser's ``subparsers`` (``common`` adds ``--lakehouse``)."""
    p = subparsers.add_parser("fsck", help="check every live data file of every table; --repair removes damaged ones",
                              description=cmd_fsck.__doc__)
    common(p, landing=False)
    p.add_argument("--repair", action="store_true",
                   help="remove damaged files from their table's log (one commit per table), recorded in fsck_repairs")
    p.set_defaults(func=cmd_fsck)

    p = subparsers.add_parser("refill", help="restore what fsck --repair removed: events, routed files, IDs, "
                                              "placements, decisions",
                              description=cmd_refill.__doc__)
    common(p, landing=False)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--bucket", type=bucket, metavar="TENANT/HOUR",
                       help="an events bucket fsck repaired, e.g. acme/2026-01-01T10")
    which.add_argument("--routed", action="store_true",
                       help="every routed file fsck removed: route its batch again for its shard")
    which.add_argument("--ids", action="store_true",
                       help="every event_ids partition fsck removed files of: rebuild its IDs from events")
    which.add_argument("--placements", action="store_true",
                       help="every window whose placements file fsck removed: restore its placement from the "
                            "shards its events went to")
    which.add_argument("--decisions", action="store_true",
                       help="every buckets, tenant_settings or shard_topology file fsck removed: rebuild its rows from "
                            "the files it was rewritten from")
    p.add_argument("--dry-run", action="store_true", help="say what would be restored, commit nothing")
    p.set_defaults(func=cmd_refill)
