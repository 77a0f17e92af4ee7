"""lakeshard's Databricks asset bundle read offline: its files merged as a target deploys them, and a deploy plan.

Reading YAML needs PyYAML (the ``app`` extra); nothing here talks to a workspace.

Example::

    from pathlib import Path
    from lakeshard.bundle import load_bundle, plan_target

    bundle = load_bundle(Path("."))
    for resource in plan_target(bundle, "prod").resources:
        print(resource.kind, resource.name, resource.on_destroy)
"""

from __future__ import annotations

from lakeshard.bundle.config import USER, Bundle, BundleFile, load_bundle, merge, resolve_resource_fields, substitute
from lakeshard.bundle.errors import BundleError
from lakeshard.bundle.plan import DeployPlan, Grant, ResourcePlan, plan_target

__all__ = [
    "USER",
    "Bundle",
    "BundleError",
    "BundleFile",
    "DeployPlan",
    "Grant",
    "ResourcePlan",
    "load_bundle",
    "merge",
    "plan_target",
    "resolve_resource_fields",
    "substitute",
]
