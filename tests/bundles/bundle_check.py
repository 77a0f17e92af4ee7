"""Offline checks of a Databricks asset bundle (``databricks.yml`` + its ``include`` files), no workspace needed.

* ``databricks.yml`` against a strict schema of the keys lakeshard uses (unknown keys are errors);
* every resource against the ``databricks-bundles`` typed models (``Job.from_dict`` rejects unknown fields);
* every notebook or file a resource names exists, relative to the YAML file that names it, and a
  ``notebook_path`` is a notebook (an ``.ipynb`` nbformat reads, or a ``# Databricks notebook source`` file);
* every wheel a task attaches is what an ``artifacts`` entry builds;
* every ``${var.X}`` is declared, every declared variable has a description and a value in every target;
* exactly one default target; ``dev`` is ``mode: development``; ``prod`` is ``mode: production`` with an
  explicit ``workspace.root_path``, permissions and ``run_as`` a service principal; no personal user names or
  e-mail addresses;
* every ``${resources.<kind>.<name>...}`` names a resource the bundle declares, and the volumes the jobs
  write to are declared (a ``/Volumes/`` path is built from a volume resource, not spelled out);
* every wheel artifact has ``dynamic_version: true``; serverless environments name an ``environment_version``
  (not the deprecated ``client``); the ingest job is triggered by file arrival (or runs continuously), not
  by a cron schedule.

:func:`check_bundle` returns the problems as ``"<file>: <where>: <what>"`` lines (empty = valid).
"""

from __future__ import annotations

import glob
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import nbformat
import yaml
from databricks.bundles.jobs import Job
from databricks.bundles.pipelines import Pipeline
from databricks.bundles.schemas import Schema
from databricks.bundles.volumes import Volume

VAR = re.compile(r"\$\{var\.([A-Za-z_][\w-]*)")
RESOURCE_REF = re.compile(r"\$\{resources\.([A-Za-z_]+)\.([A-Za-z_][\w-]*)")
PERSONAL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+|/Users/|\$\{workspace\.current_user")
RESOURCE_MODELS: dict[str, Any] = {"jobs": Job, "pipelines": Pipeline, "schemas": Schema, "volumes": Volume}
FILE_KEYS = {"notebook_path", "python_file", "whl", "path"}

_STRING_MAP = {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}}
_PERMISSION = {"type": "object", "additionalProperties": False, "required": ["level"],
               "properties": {"level": {"enum": ["CAN_VIEW", "CAN_RUN", "CAN_MANAGE"]},
                              "group_name": {"type": "string"}, "service_principal_name": {"type": "string"},
                              "user_name": {"type": "string"}}}
_WORKSPACE = {"type": "object", "additionalProperties": False,
              "properties": {k: {"type": "string"} for k in ("host", "profile", "root_path", "file_path",
                                                              "artifact_path", "state_path")}}
_TARGET = {"type": "object", "additionalProperties": False, "properties": {
    "mode": {"enum": ["development", "production"]}, "default": {"type": "boolean"},
    "workspace": _WORKSPACE, "permissions": {"type": "array", "items": _PERMISSION},
    "variables": {"type": "object", "additionalProperties": {"anyOf": [
        {"type": ["string", "number", "boolean"]},
        {"type": "object", "additionalProperties": False, "required": ["lookup"], "properties": {
            "lookup": {"type": "object", "minProperties": 1, "maxProperties": 1}}}]}},
    "run_as": {"type": "object"}, "presets": {"type": "object"},
    "resources": {"type": "object"}}}
ROOT_SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["bundle", "targets"],
    "properties": {
        "bundle": {"type": "object", "additionalProperties": False, "required": ["name"],
                   "properties": {"name": {"type": "string", "minLength": 1},
                                  "databricks_cli_version": {"type": "string"}, "uuid": {"type": "string"}}},
        "include": {"type": "array", "items": {"type": "string"}},
        "variables": {"type": "object", "additionalProperties": {
            "type": "object", "additionalProperties": False, "required": ["description"],
            "properties": {"description": {"type": "string", "minLength": 1},
                           "default": {"type": ["string", "number", "boolean"]}, "type": {"enum": ["complex"]},
                           "lookup": {"type": "object"}}}},
        "targets": {"type": "object", "minProperties": 1, "additionalProperties": _TARGET},
        "artifacts": {"type": "object", "additionalProperties": {
            "type": "object", "additionalProperties": False, "required": ["type", "build"],
            "properties": {"type": {"enum": ["whl"]}, "build": {"type": "string"}, "path": {"type": "string"},
                           "dynamic_version": {"type": "boolean"}}}},
        "workspace": _WORKSPACE,
        "permissions": {"type": "array", "items": _PERMISSION},
        "resources": {"type": "object"},
        "sync": {"type": "object"},
    },
}


def _load(path: Path) -> Any:
    with path.open(encoding="utf-8") as f:
        return yaml.safe_load(f)


def _strings(node: Any, where: str = "") -> Iterator[tuple[str, str, str]]:
    """Yield (where, key, string) for every string in a YAML tree, with the key that holds it."""
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(v, str):
                yield f"{where}.{k}".lstrip("."), str(k), v
            else:
                yield from _strings(v, f"{where}.{k}".lstrip("."))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            if isinstance(v, str):
                yield f"{where}[{i}]", "", v
            else:
                yield from _strings(v, f"{where}[{i}]")


def _is_notebook(path: Path) -> bool:
    if path.suffix == ".ipynb":
        try:
            nbformat.read(str(path), as_version=4)
        except Exception:
            return False
        return True
    return path.is_file() and path.read_text(encoding="utf-8").startswith("# Databricks notebook source")


def _wheel_dirs(root: Path, doc: dict[str, Any]) -> set[Path]:
    """Return the directories the whl artifacts build into (``--wheel-dir DIR`` / ``-w DIR``, default dist)."""
    out = set()
    for artifact in (doc.get("artifacts") or {}).values():
        if isinstance(artifact, dict) and artifact.get("type") == "whl":
            m = re.search(r"(?:--wheel-dir|-w)[ =](\S+)", str(artifact.get("build", "")))
            out.add((root / (m.group(1) if m else "dist")).resolve())
    return out


def _check_paths(yml: Path, root: Path, doc: Any, wheel_dirs: set[Path], rel: str) -> list[str]:
    problems = []
    for where, key, value in _strings(doc):
        if key not in FILE_KEYS or "${" in value:
            continue
        target = (yml.parent / value).resolve()
        if key == "whl":
            if target.parent not in wheel_dirs or target.suffix != ".whl":
                problems.append(f"{rel}: {where}: wheel {value!r} is not built by any whl artifact "
                                f"(they build into {sorted(str(d.relative_to(root)) for d in wheel_dirs)})")
        elif not target.exists():
            problems.append(f"{rel}: {where}: {value!r} does not exist (resolved to {target})")
        elif key == "notebook_path" and not _is_notebook(target):
            problems.append(f"{rel}: {where}: {value!r} is not a notebook")
    # Serverless environments list the wheel among their dependencies: ``spec.dependencies[i]``.
    for where, _key, value in _strings(doc):
        if ".dependencies[" in where and value.endswith(".whl") and (yml.parent / value).resolve().parent \
                not in wheel_dirs:
            problems.append(f"{rel}: {where}: wheel {value!r} is not built by any whl artifact")
    return problems


def _check_resources(yml: Path, doc: Any, rel: str) -> list[str]:
    if not isinstance(doc, dict) or set(doc) - {"resources"}:
        return [f"{rel}: top level: a resource file holds only 'resources', found {sorted(doc or {})}"]
    problems = []
    for kind, items in (doc.get("resources") or {}).items():
        model = RESOURCE_MODELS.get(kind)
        if model is None:
            problems.append(f"{rel}: resources.{kind}: resource type not used by lakeshard "
                            f"(known: {sorted(RESOURCE_MODELS)})")
            continue
        for name, spec in (items or {}).items():
            try:
                model.from_dict(spec)
            except (ValueError, TypeError) as exc:
                problems.append(f"{rel}: resources.{kind}.{name}: {exc}")
    return problems


def _check_targets(doc: dict[str, Any]) -> list[str]:
    targets = doc.get("targets") or {}
    problems = []
    defaults = [n for n, t in targets.items() if (t or {}).get("default") is True]
    if len(defaults) != 1:
        problems.append(f"databricks.yml: targets: exactly one target must be default: true, found {defaults}")
    dev, prod = targets.get("dev") or {}, targets.get("prod") or {}
    if dev.get("mode") != "development":
        problems.append(f"databricks.yml: targets.dev.mode: expected 'development', found {dev.get('mode')!r}")
    if prod.get("mode") != "production":
        problems.append(f"databricks.yml: targets.prod.mode: expected 'production', found {prod.get('mode')!r}")
    if not (prod.get("workspace") or {}).get("root_path"):
        problems.append("databricks.yml: targets.prod.workspace.root_path: production needs an explicit root_path")
    if not prod.get("permissions"):
        problems.append("databricks.yml: targets.prod.permissions: production needs explicit permissions")
    if not (prod.get("run_as") or {}).get("service_principal_name"):
        problems.append("databricks.yml: targets.prod.run_as: production jobs must run as a service principal "
                        "(run_as.service_principal_name)")
    for name, artifact in (doc.get("artifacts") or {}).items():
        if (artifact or {}).get("type") == "whl" and (artifact or {}).get("dynamic_version") is not True:
            problems.append(f"databricks.yml: artifacts.{name}.dynamic_version: a wheel needs dynamic_version: true "
                            "(clusters cache a wheel by version; a fixed version keeps a stale copy)")
    variables = doc.get("variables") or {}
    for name, spec in variables.items():
        if "default" in (spec or {}):
            continue
        for target, t in targets.items():
            if name not in ((t or {}).get("variables") or {}):
                problems.append(f"databricks.yml: targets.{target}.variables: variable {name!r} has no default "
                                "and no value in this target")
    for target, t in targets.items():
        for name in ((t or {}).get("variables") or {}):
            if name not in variables:
                problems.append(f"databricks.yml: targets.{target}.variables.{name}: not declared under variables")
    return problems


def _check_jobs(rel: str, doc: Any) -> list[str]:
    """Return the problems of the jobs in one resource file: deprecated environments, a cron-driven ingest."""
    problems = []
    for name, job in (((doc or {}).get("resources") or {}).get("jobs") or {}).items():
        for i, env in enumerate((job or {}).get("environments") or []):
            spec = (env or {}).get("spec") or {}
            if "client" in spec or not spec.get("environment_version"):
                problems.append(f"{rel}: resources.jobs.{name}.environments[{i}].spec: name an environment_version "
                                "(the serverless client key is deprecated)")
        if name == "ingest":
            trigger = (job or {}).get("trigger") or {}
            if "schedule" in (job or {}) or not (trigger.get("file_arrival") or (job or {}).get("continuous")):
                problems.append(f"{rel}: resources.jobs.ingest: ingest must be triggered by file arrival on the "
                                "landing volume (trigger.file_arrival) or run continuously, not on a schedule")
    return problems


def _declared_resources(trees: list[tuple[str, Any]]) -> set[tuple[str, str]]:
    return {(kind, name) for _rel, tree in trees
            for kind, items in (((tree or {}).get("resources") or {}) if isinstance(tree, dict) else {}).items()
            for name in (items or {})}


def check_bundle(root: Path) -> list[str]:
    """Return every problem of the bundle rooted at ``root`` (its ``databricks.yml``), as readable lines."""
    root = root.resolve()
    doc = _load(root / "databricks.yml")
    validator = jsonschema.Draft202012Validator(ROOT_SCHEMA)
    problems = [f"databricks.yml: {'.'.join(map(str, e.absolute_path)) or 'top level'}: {e.message}"
                for e in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.path)))]
    if not isinstance(doc, dict):
        return problems
    problems += _check_targets(doc)
    declared = set(doc.get("variables") or {})
    wheel_dirs = _wheel_dirs(root, doc)
    files = sorted({Path(p) for pattern in doc.get("include") or [] for p in glob.glob(str(root / pattern))})
    if not files:
        problems.append(f"databricks.yml: include: {doc.get('include')} matches no file")
    trees: list[tuple[str, Any]] = [("databricks.yml", doc)]
    for yml in files:
        rel = str(yml.relative_to(root))
        resource_doc = _load(yml)
        trees.append((rel, resource_doc))
        problems += _check_resources(yml, resource_doc, rel)
        problems += _check_paths(yml, root, resource_doc, wheel_dirs, rel)
        problems += _check_jobs(rel, resource_doc)
    resources = _declared_resources(trees)
    for rel, tree in trees:
        for where, _key, value in _strings(tree):
            problems += [f"{rel}: {where}: ${{var.{v}}} is not declared under variables in databricks.yml"
                         for v in VAR.findall(value) if v not in declared]
            problems += [f"{rel}: {where}: ${{resources.{kind}.{name}}} is not a resource of this bundle"
                         for kind, name in RESOURCE_REF.findall(value) if (kind, name) not in resources]
            if value.startswith("/Volumes/") and "${resources.volumes." not in value:
                problems.append(f"{rel}: {where}: {value!r} spells out a volume path; build it from a volume "
                                "resource (${resources.volumes.<name>...}) so the volume is declared")
            if PERSONAL.search(value):
                problems.append(f"{rel}: {where}: {value!r} names a person; use groups and shared paths")
    return problems


def job_mismatches(root: Path, jobs: dict[str, list[tuple[str, list[str], str]]]) -> list[str]:
    """Return how the bundle's jobs differ from ``jobs``: job → [(task key, depends on, notebook path from root)].

    ``bundles/<job>.job.yml`` must hold resource ``jobs.<job>`` whose tasks are exactly those, in that order.
    """
    problems = []
    for job, expected in jobs.items():
        yml = root / "bundles" / f"{job}.job.yml"
        if not yml.is_file():
            problems.append(f"bundles/{job}.job.yml: missing; the pipeline declares job {job!r}")
            continue
        spec = ((_load(yml) or {}).get("resources", {}).get("jobs", {}) or {}).get(job) or {}
        found = [(t.get("task_key"), sorted(d["task_key"] for d in t.get("depends_on") or []),
                  str((yml.parent / t.get("notebook_task", {}).get("notebook_path", "")).resolve().relative_to(root)))
                 for t in spec.get("tasks") or []]
        if found != expected:
            problems.append(f"bundles/{job}.job.yml: tasks (key, depends on, notebook) are {found}; "
                            f"the pipeline declaration gives {expected}")
    return problems
