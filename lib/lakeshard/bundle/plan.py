"""What deploying a bundle's target creates, who owns and runs it, what it grants, and what a destroy would delete.

:func:`plan_target` reads the merged configuration (:meth:`lakeshard.bundle.Bundle.resolved`) as the CLI deploys it:
development mode prefixes job and pipeline names with ``[dev <user>]`` and schema names with ``dev_<user>_``, and
pauses the triggers and schedules that give no ``pause_status``; bundle grants are a securable's whole grant list;
``lifecycle.prevent_destroy`` stops a destroy (or a deploy that would recreate the resource) with an error.

Example::

    plan = plan_target(load_bundle(Path(".")), "dev")
    [r.trigger for r in plan.resources if r.kind == "job"]
    # ['file arrival on /Volumes/main/dev_<user>_lakeshard_dev/landing/: PAUSED (development mode) ...', ...]
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lakeshard.bundle.config import USER, Bundle

__all__ = ["DeployPlan", "Grant", "ResourcePlan", "plan_target"]

_KINDS = {"schemas": "schema", "volumes": "volume", "jobs": "job", "pipelines": "pipeline"}
_USER_HOME = re.compile(r"^(?:/Workspace)?/Users/([^/]+)/")
_URI = re.compile(r"^[a-z0-9]+://", re.IGNORECASE)
_DEV_CONCURRENT_RUNS = 4  # what development mode gives a job that sets no max_concurrent_runs


@dataclass(frozen=True)
class Grant:
    """Privileges the bundle grants one principal on a securable."""

    principal: str
    privileges: tuple[str, ...]


@dataclass(frozen=True)
class ResourcePlan:
    """One resource as a target deploys it."""

    kind: str  # schema, volume, job, pipeline
    key: str  # its key under resources.<kind>s
    name: str  # the name it gets in the workspace or catalog
    storage: str  # where its data lives ("" for none)
    owner: str  # who owns it, and for jobs and pipelines who they run as
    grants: tuple[Grant, ...]  # the object's whole grant list when not empty (the bundle replaces the rest)
    trigger: str  # what starts it and whether that is live ("" for none)
    on_destroy: str  # what `databricks bundle destroy` would do to it
    protected: bool  # lifecycle.prevent_destroy


@dataclass(frozen=True)
class DeployPlan:
    """Everything a target deploys, and what it names but never creates or deletes."""

    target: str
    mode: str  # development, production, or "" (none)
    cli_version: str  # bundle.databricks_cli_version ("" when not pinned)
    root_path: str  # the workspace folder of the deployed files and state
    deployed_by: str  # who can deploy it
    run_as: str  # who the jobs and pipelines run as
    resources: tuple[ResourcePlan, ...]
    not_owned: tuple[str, ...]  # data the resources use that neither a deploy nor a destroy deletes


def plan_target(bundle: Bundle, target: str) -> DeployPlan:
    """Return what deploying ``target`` of ``bundle`` creates, owns, grants and would delete.

    Raises:
        BundleError: the bundle declares no such target.
    """
    mode = bundle.mode(target)
    config = bundle.resolved(target)
    workspace = config.get("workspace") or {}
    root_path = str(workspace.get("root_path") or f"/Workspace/Users/{USER}/.bundle/{bundle.name}/{target}")
    home = _USER_HOME.match(root_path)
    if mode == "development":
        deployer, deployed_by = USER, f"each developer, as themselves ({USER}); development mode"
    elif home:
        deployer = home.group(1)
        deployed_by = f"{deployer} only: root_path is its home folder (workspace admins aside)"
    else:
        deployer, deployed_by = "the deployer", f"whoever may write {root_path}"
    run_as = _principal(config.get("run_as") or {}) or f"the deployer ({deployer})"
    resources: list[ResourcePlan] = []
    lakehouses: set[str] = set()
    for kind, items in (config.get("resources") or {}).items():
        for key, spec in (items or {}).items():
            spec = spec or {}
            if kind == "schemas":
                resources.append(_schema(key, spec, deployer))
            elif kind == "volumes":
                resources.append(_volume(key, spec, deployer))
            elif kind == "jobs":
                resources.append(_job(key, spec, run_as, deployer, mode))
                lakehouses |= {str(p.get("default")) for p in spec.get("parameters") or []
                               if p.get("name") == "lakehouse" and _URI.match(str(p.get("default", "")))}
            elif kind == "pipelines":
                resources.append(_pipeline(key, spec, run_as, deployer, mode))
    not_owned = tuple(f"the lakehouse at {uri}: lakeshard's tables are external Delta tables there (the jobs "
                      "register the user-facing ones by location); a destroy drops their names, never their files"
                      for uri in sorted(lakehouses))
    order = list(_KINDS.values())
    resources.sort(key=lambda r: order.index(r.kind))  # what holds data first, then what runs over it
    return DeployPlan(target, mode, str((config.get("bundle") or {}).get("databricks_cli_version") or ""),
                      root_path, deployed_by, run_as, tuple(resources), not_owned)


def _principal(run_as: Mapping[str, Any]) -> str:
    if run_as.get("service_principal_name"):
        return f"service principal {run_as['service_principal_name']}"
    if run_as.get("user_name"):
        return f"user {run_as['user_name']}"
    return ""


def _grants(spec: Mapping[str, Any]) -> tuple[Grant, ...]:
    return tuple(Grant(str(g.get("principal") or "<empty>"), tuple(str(p) for p in g.get("privileges") or []))
                 for g in spec.get("grants") or [])


def _protected(spec: Mapping[str, Any]) -> bool:
    return (spec.get("lifecycle") or {}).get("prevent_destroy") is True


def _refused(spec: Mapping[str, Any], otherwise: str) -> str:
    if _protected(spec):
        return f"refused: lifecycle.prevent_destroy (so is a deploy that would recreate it); otherwise it {otherwise}"
    return otherwise


def _schema(key: str, spec: Mapping[str, Any], deployer: str) -> ResourcePlan:
    name = f"{spec.get('catalog_name')}.{spec.get('name')}"
    storage = str(spec.get("storage_root") or "the catalog's managed storage")
    destroy = ("drops the schema with everything in it (the CLI drops schemas with force): its volumes, the "
               "registered tables (names only, files stay) and the pipeline's tables")
    return ResourcePlan("schema", key, name, storage, f"owner: {deployer}", _grants(spec), "",
                        _refused(spec, destroy), _protected(spec))


def _volume(key: str, spec: Mapping[str, Any], deployer: str) -> ResourcePlan:
    name = f"{spec.get('catalog_name')}.{spec.get('schema_name')}.{spec.get('name')}"
    path = f"/Volumes/{spec.get('catalog_name')}/{spec.get('schema_name')}/{spec.get('name')}"
    if str(spec.get("volume_type", "")).upper() == "EXTERNAL":
        storage = f"{path} = external storage {spec.get('storage_location')}"
        destroy = f"drops the volume; its files at {spec.get('storage_location')} stay"
    else:
        storage = f"{path} = managed storage of the schema"
        destroy = "drops the volume AND DELETES EVERY FILE IN IT (a managed volume's files go with it)"
    return ResourcePlan("volume", key, name, storage, f"owner: {deployer}", _grants(spec), "",
                        _refused(spec, destroy), _protected(spec))


def _job(key: str, spec: Mapping[str, Any], run_as: str, deployer: str, mode: str) -> ResourcePlan:
    storage = ", ".join(f"{p.get('name')} {p.get('default')}" for p in spec.get("parameters") or []
                        if p.get("name") in ("lakehouse", "landing"))
    starts = []
    trigger = spec.get("trigger") or {}
    if trigger.get("file_arrival"):
        starts.append((f"file arrival on {trigger['file_arrival'].get('url')}", trigger.get("pause_status")))
    if spec.get("schedule"):
        schedule = spec["schedule"]
        starts.append((f"schedule {schedule.get('quartz_cron_expression')} {schedule.get('timezone_id', '')}".strip(),
                       schedule.get("pause_status")))
    if spec.get("continuous"):
        starts.append(("continuous", spec["continuous"].get("pause_status")))
    said = []
    for what, status in starts:
        if status:
            state = str(status)
        elif mode == "development":
            state = "PAUSED (development mode pauses what gives no pause_status)"
        else:
            state = "UNPAUSED (the Jobs API's default)"
        said.append(f"{what}: {state}")
    if not said:
        said.append("by hand only")
    queue = "queued" if (spec.get("queue") or {}).get("enabled") else "skipped"
    runs = spec.get("max_concurrent_runs") or (f"{_DEV_CONCURRENT_RUNS} (development mode)" if mode == "development"
                                               else 1)
    said.append(f"at most {runs} run(s) at once, a run triggered meanwhile is {queue}")
    return ResourcePlan("job", key, str(spec.get("name", key)), storage, f"owner: {deployer}; runs as {run_as}",
                        (), "; ".join(said), _refused(spec, "deletes the job and its run history; no data"),
                        _protected(spec))


def _pipeline(key: str, spec: Mapping[str, Any], run_as: str, deployer: str, mode: str) -> ResourcePlan:
    where = f"{spec.get('catalog')}.{spec.get('schema')}"
    log = spec.get("event_log") or {}
    storage = f"its tables in {where} (managed)" + (f", event log {log.get('catalog')}.{log.get('schema')}."
                                                    f"{log.get('name')}" if log else "")
    trigger = "continuous" if spec.get("continuous") else "an update per run of the job that starts it"
    if mode == "development":
        trigger += " (development: true, as development mode sets)"
    destroy = f"deletes the pipeline and its tables in {where} (rebuilt from their sources by a new update)"
    return ResourcePlan("pipeline", key, str(spec.get("name", key)), storage, f"owner: {deployer}; runs as {run_as}",
                        (), trigger, _refused(spec, destroy), _protected(spec))
