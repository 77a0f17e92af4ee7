"""The load-management commands of ``lakeshard``: ``autoshard``, ``balance`` and ``exclude``.

``autoshard`` and ``balance`` print their plan, or why it changes nothing; ``--apply`` runs the pipeline's
flow of the same name, which commits it to ``tenant_settings`` (effective from each tenant's next placement
window) and logs the run in ``pipeline_events``. ``exclude`` changes ``shard_topology`` at once: it is the
operator's lever for a lagging shard.

The top-level parser wires them in with :func:`add_commands`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import Any

from lakeshard.app.cli_args import clock, config_from_args, count
from lakeshard.config import LakeshardConfig

__all__ = ["add_commands", "cmd_autoshard", "cmd_balance", "cmd_exclude"]

_SHOWN = 20  # rows of a plan printed before "... and N more"


def _store(cfg: LakeshardConfig) -> Any:
    from lakeshard.lake import open_store
    from lakeshard.runtime import get_spark

    return open_store(get_spark(cfg), cfg)


def _footer(applied: bool, version: int | None, changed: int, skipped: str) -> str:
    if not changed:
        return f"nothing to change: {skipped}"
    if not applied:
        return "plan only: pass --apply to commit it"
    return (f"committed as tenant_settings version {version}; effective from each tenant's next placement "
            "window (live placements never change)")


def cmd_autoshard(args: argparse.Namespace) -> int:
    """Size each tenant's shard count from its recent bytes/s (up fast, down slowly); print the plan, or --apply
    it by running the pipeline's autoshard flow."""
    from lakeshard.balancing import autoshard
    from lakeshard.report import format_table

    cfg = config_from_args(args)
    if args.apply:
        run = args.run_flow(cfg, "autoshard", {"apply": True, "as_of": args.as_of.isoformat() if args.as_of else ""})
        if run is None:
            return 0
    else:
        run = autoshard(_store(cfg), cfg, now=args.as_of, apply=False)
    plan = run.plan
    if not plan.stale:
        print(f"{plan.tenants_with_metrics} tenants with metrics; {plan.ups} scale up, {plan.downs} scale down "
              f"(target {cfg.balancing.target_bytes_per_second:,.0f} bytes/s per shard, "
              f"bounds {cfg.balancing.min_shards}-{cfg.balancing.max_shards})")
    if plan.changes:
        rows = [[c.tenant_id, c.old, c.new, round(c.rate, 1), round(c.peak, 1), c.reason]
                for c in sorted(plan.changes, key=lambda c: -abs(c.new - c.old))[:_SHOWN]]
        print(format_table(["tenant", "shards", "new", "bytes/s now", "peak bytes/s", "reason"], rows))
        if len(plan.changes) > _SHOWN:
            print(f"... and {len(plan.changes) - _SHOWN} more")
    print(_footer(args.apply, run.version, len(plan.changes), plan.skipped))
    return 0


def cmd_balance(args: argparse.Namespace) -> int:
    """Move tenants off the hottest shards by changing their salts; print the plan, or --apply it by running the
    pipeline's balance flow."""
    from lakeshard.balancing import balance
    from lakeshard.report import format_table

    extra: dict[str, Any] = {}
    if args.max_moves is not None:
        extra["balancing"] = {"max_moves": args.max_moves}
    cfg = config_from_args(args, **extra)
    if args.apply:
        run = args.run_flow(cfg, "balance", {"apply": True, "max_moves": args.max_moves or 0,
                                             "as_of": args.as_of.isoformat() if args.as_of else ""})
        if run is None:
            return 0
    else:
        run = balance(_store(cfg), cfg, now=args.as_of, apply=False)
    plan = run.plan
    b, a = plan.before, plan.after
    print(f"per-shard load over {cfg.table_uri('routing_metrics')}: variance/mean^2 {b.relative_variance:.4f} -> "
          f"{a.relative_variance:.4f}, max/mean {b.max_over_mean:.2f} -> {a.max_over_mean:.2f} "
          f"({plan.variance_removed:.0%} of the variance removed by {len(plan.moves)} moves; "
          f"stopped: {plan.stopped})")
    if plan.moves:
        rows = [[m.tenant_id, round(m.bytes), f"{m.old_salt} -> {m.new_salt}", m.hottest_shard,
                 _shards(m.old_shards), _shards(m.new_shards)] for m in plan.moves[:_SHOWN]]
        print(format_table(["tenant", "bytes/window", "salt", "cools shard", "shards now", "next shards"], rows))
        if len(plan.moves) > _SHOWN:
            print(f"... and {len(plan.moves) - _SHOWN} more")
    print(_footer(args.apply, run.version, len(plan.moves), plan.skipped))
    return 0


def _shards(shards: tuple[int, ...]) -> str:
    return ",".join(map(str, shards)) if len(shards) <= 6 else f"{shards[0]}..{shards[-1]} ({len(shards)})"


def cmd_exclude(args: argparse.Namespace) -> int:
    """Exclude shards from new placements (e.g. a lagging one) or --include them again; applies at once."""
    from lakeshard.balancing import exclude_shards

    cfg = config_from_args(args)
    run = exclude_shards(_store(cfg), cfg, exclude=args.shards, include=args.include or [], reason=args.reason)
    if run.version is None:
        print(f"no change: excluded shards stay {list(run.before.excluded)} of {run.before.total_shards}")
    else:
        print(f"excluded shards {list(run.before.excluded)} -> {list(run.after.excluded)} of "
              f"{run.after.total_shards} (shard_topology version {run.version}); placements from the next "
              "window on skip them, so new traffic drains from excluded shards within one window")
    return 0


def add_commands(
    subparsers: Any,
    common: Callable[[argparse.ArgumentParser, bool], None],
    *,
    run_flow: Callable[[LakeshardConfig, str, Mapping[str, Any]], Any],
) -> None:
    """Add ``autoshard``, ``balance`` and ``exclude`` to the top-level parser's ``subparsers``.

    Args:
        subparsers: what ``ArgumentParser.add_subparsers()`` returned.
        common: adds ``--lakehouse`` (and ``--landing`` when its second argument is true) to a parser.
        run_flow: runs a pipeline flow and returns its outcome (:func:`lakeshard.pipelines.commands.run_flow`);
            ``autoshard --apply`` and ``balance --apply`` run their flows through it.
    """
    p = subparsers.add_parser("autoshard", help="set tenants' shard counts from their bytes/s (plan; --apply)",
                              description=cmd_autoshard.__doc__)
    common(p, False)
    p.add_argument("--apply", action="store_true", help="commit the plan to tenant_settings")
    p.add_argument("--as-of", type=clock, default=None,
                   help="plan as if it were this time (ISO; default now), e.g. to replay old metrics")
    p.set_defaults(func=cmd_autoshard, run_flow=run_flow)

    p = subparsers.add_parser("balance", help="even out per-shard load by moving tenant salts (plan; --apply)",
                              description=cmd_balance.__doc__)
    common(p, False)
    p.add_argument("--apply", action="store_true", help="commit the new salts to tenant_settings")
    p.add_argument("--max-moves", type=count(0), default=None, help="cap on tenants moved this run (default: config)")
    p.add_argument("--as-of", type=clock, default=None, help="use metrics up to this time (ISO; default now)")
    p.set_defaults(func=cmd_balance, run_flow=run_flow)

    p = subparsers.add_parser("exclude", help="exclude shards from new placements, or --include them again",
                              description=cmd_exclude.__doc__)
    common(p, False)
    p.add_argument("shards", type=count(0), nargs="*", metavar="SHARD", help="shards to exclude")
    p.add_argument("--include", type=count(0), nargs="+", metavar="SHARD", help="excluded shards to put back")
    p.add_argument("--reason", help="why (recorded in shard_topology)")
    p.set_defaults(func=cmd_exclude)
