"""``lakeshard bundle-plan``: what deploying a target of the Databricks asset bundle creates, owns, grants and
would delete, read offline from ``databricks.yml`` and ``bundles/`` (:func:`lakeshard.bundle.plan_target`).

The top-level parser wires it in with :func:`add_commands`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from lakeshard.bundle import DeployPlan, load_bundle, plan_target

__all__ = ["add_commands", "cmd_bundle_plan", "format_plan"]


def format_plan(plan: DeployPlan) -> list[str]:
    """Return the lines that show ``plan``: the target's header, then one block per resource."""
    mode = plan.mode or "no mode"
    lines = [f"target {plan.target} ({mode}), Databricks CLI {plan.cli_version or 'any version (not pinned)'}",
             f"  files      {plan.root_path}",
             f"  deployed   by {plan.deployed_by}",
             f"  runs as    {plan.run_as}"]
    for r in plan.resources:
        lines += ["", f"{r.kind} {r.key}: {r.name}"]
        if r.storage:
            lines.append(f"  storage    {r.storage}")
        lines.append(f"  {r.owner.split(':')[0]:<10} {r.owner.partition(': ')[2]}")
        if r.kind in ("schema", "volume"):
            if r.grants:
                lines.append("  grants     the object's whole grant list (a deploy revokes any other):")
                lines += [f"             {g.principal}: {', '.join(g.privileges)}" for g in r.grants]
            else:
                lines.append("  grants     none managed by the bundle (grants made elsewhere stay)")
        if r.trigger:
            lines.append(f"  starts     {r.trigger}")
        lines.append(f"  destroy    {r.on_destroy}")
    if plan.not_owned:
        lines += ["", "not the bundle's (never created or deleted by it):"]
        lines += [f"  {what}" for what in plan.not_owned]
    return lines


def cmd_bundle_plan(args: argparse.Namespace) -> int:
    """Print, per target, every resource the bundle deploys: its resolved name, storage, owner and run-as,
    grants, trigger state and what a destroy would delete. Read offline; values only a deploy knows are shown as
    placeholders (the deployer's name as <user>, a looked-up service principal as <lookup ...>)."""
    bundle = load_bundle(Path(args.bundle))
    targets = args.target or list(bundle.targets)
    plans = [plan_target(bundle, t) for t in targets]  # every target checked before anything is printed
    for i, plan in enumerate(plans):
        if i:
            print()
        print("\n".join(format_plan(plan)))
    return 0


def add_commands(subparsers: Any) -> None:
    """Add ``bundle-plan`` to the top-level parser's ``subparsers`` (what ``add_subparsers()`` returned)."""
    p = subparsers.add_parser("bundle-plan", help="what deploying the Databricks bundle creates, grants, would delete",
                              description=cmd_bundle_plan.__doc__)
    p.add_argument("--target", "-t", action="append",
                   help="a target of databricks.yml (repeatable; default: every target)")
    p.add_argument("--bundle", default=".", help="the bundle's folder, holding databricks.yml (default .)")
    p.set_defaults(func=cmd_bundle_plan)

