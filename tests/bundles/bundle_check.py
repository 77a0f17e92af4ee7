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
  by a cron schedule;
* per target, with its variable values substituted: every numeric field at or above the minimum the pinned
  ``databricks-bundles`` models document ("The minimum allowed value is N"), e.g. a file arrival trigger's
  ``wait_after_last_change_seconds >= 60``;
* an ``environment_key`` only on the task types the Jobs API gives environments to (Python wheel, Python
  script, dbt), naming an environment of the job and on no cluster; a job cluster's ``node_type_id`` a
  variable (node types differ per cloud);
* every wheel artifact clears its wheel directory before it builds (a glob such as ``dist/*.whl`` must not
  pick up a stale wheel);
* ``prod`` runs as a service principal that holds ``USE_SCHEMA`` on every schema and ``READ_VOLUME`` and
  ``WRITE_VOLUME`` on every volume the bundle declares (bundle ``grants``), keeps its ``root_path`` out of
  ``/Workspace/Shared`` (every workspace user may edit there) and gives the ``users`` group ``CAN_VIEW`` only.

:func:`check_bundle` returns the problems as ``"<file>: <where>: <what>"`` lines (empty = valid).
"""

from __future__ import annotations

import ast
import functools
import glob
import inspect
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
VAR_REF = re.compile(r"\$\{var\.([A-Za-z_][\w-]*)\}")
RESOURCE_REF = re.compile(r"\$\{resources\.([A-Za-z_]+)\.([A-Za-z_][\w-]*)")
PERSONAL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+|/Users/(?!\$\{var\.service_principal\})|\$\{workspace\.current_user")
RESOURCE_MODELS: dict[str, Any] = {"jobs": Job, "pipelines": Pipeline, "schemas": Schema, "volumes": Volume}
FILE_KEYS = {"notebook_path", "python_file", "whl", "path", "include"}  # include: a pipeline's source glob
# Task types the Jobs API gives a serverless environment (``environment_key``): Python wheel, Python script, dbt.
ENVIRONMENT_TASKS = {"python_wheel_task", "spark_python_task", "dbt_task"}
CLUSTER_KEYS = {"job_cluster_key", "existing_cluster_id", "new_cluster"}
RUN_AS_SCHEMA_PRIVILEGES = {"USE_SCHEMA"}
RUN_AS_VOLUME_PRIVILEGES = {"READ_VOLUME", "WRITE_VOLUME"}
SHARED_ROOT = re.compile(r"^(/Workspace)?/Shared(/|$)")
MINIMUM_DOC = re.compile(r"minimum allowed value is (\d+)", re.IGNORECASE)

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
        target = (yml.parent / value.removesuffix("/**")).resolve()
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


def _resource_sections(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield (where, resources mapping) of a file: its ``resources`` and each ``targets.<t>.resources``."""
    if isinstance(doc.get("resources"), dict):
        yield "resources", doc["resources"]
    for target, t in (doc.get("targets") or {}).items():
        if isinstance((t or {}).get("resources"), dict):
            yield f"targets.{target}.resources", t["resources"]


def _check_resources(yml: Path, doc: Any, rel: str) -> list[str]:
    if not isinstance(doc, dict) or set(doc) - {"resources", "targets"}:
        return [f"{rel}: top level: a resource file holds only 'resources' (or target-only resources under "
                f"'targets.<target>.resources'), found {sorted(doc or {})}"]
    problems = []
    for target, t in (doc.get("targets") or {}).items():
        if set(t or {}) - {"resources"}:
            problems.append(f"{rel}: targets.{target}: a resource file gives a target only 'resources', "
                            f"found {sorted(t or {})}")
    for where, section in _resource_sections(doc):
        problems += _check_resource_models(where, section, rel)
    return problems


def _check_resource_models(where: str, section: dict[str, Any], rel: str) -> list[str]:
    problems = []
    for kind, items in section.items():
        model = RESOURCE_MODELS.get(kind)
        if model is None:
            problems.append(f"{rel}: {where}.{kind}: resource type not used by lakeshard "
                            f"(known: {sorted(RESOURCE_MODELS)})")
            continue
        for name, spec in (items or {}).items():
            try:
                model.from_dict(spec)
            except (ValueError, TypeError) as exc:
                problems.append(f"{rel}: {where}.{kind}.{name}: {exc}")
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
        build = str((artifact or {}).get("build", ""))
        out = re.search(r"(?:--wheel-dir|-w|--outdir|-o)[ =](\S+)", build)
        folder = re.escape(out.group(1)) if out else None
        clears = folder and re.search(rf"rmtree\(['\"]{folder}['\"]|rm -rf {folder}\b", build)
        if (artifact or {}).get("type") == "whl" and not clears:
            problems.append(f"databricks.yml: artifacts.{name}.build: clear the wheel directory before building "
                            f"(found {build!r}); tasks attach a glob that would also pick up a stale wheel")
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
    jobs = [(where, name, job) for where, section in _resource_sections(doc if isinstance(doc, dict) else {})
            for name, job in (section.get("jobs") or {}).items()]
    for where, name, job in jobs:
        for i, env in enumerate((job or {}).get("environments") or []):
            spec = (env or {}).get("spec") or {}
            if "client" in spec or not spec.get("environment_version"):
                problems.append(f"{rel}: {where}.jobs.{name}.environments[{i}].spec: name an environment_version "
                                "(the serverless client key is deprecated)")
        if name == "ingest":
            trigger = (job or {}).get("trigger") or {}
            if "schedule" in (job or {}) or not (trigger.get("file_arrival") or (job or {}).get("continuous")):
                problems.append(f"{rel}: resources.jobs.ingest: ingest must be triggered by file arrival on the "
                                "landing volume (trigger.file_arrival) or run continuously, not on a schedule")
    return problems


def _declares(kind: str, spec: Any) -> bool:
    """Return whether ``spec`` declares a whole resource (a target may also just add fields, such as grants)."""
    try:
        RESOURCE_MODELS[kind].from_dict(spec)
    except (KeyError, ValueError, TypeError):
        return False
    return True


def _declared_resources(trees: list[tuple[str, Any]]) -> set[tuple[str, str]]:
    return {(kind, name) for _rel, tree in trees if isinstance(tree, dict)
            for where, section in _resource_sections(tree)
            for kind, items in section.items()
            for name, spec in (items or {}).items() if where == "resources" or _declares(kind, spec)}


@functools.cache
def model_minimums() -> dict[str, tuple[int, str]]:
    """Return field → (minimum, model class) for every job model field whose documentation states a minimum.

    The pinned ``databricks-bundles`` models are generated from the Jobs API specification and keep each
    field's documentation as the string after it ("... The minimum allowed value is 60 seconds").
    """
    out: dict[str, tuple[int, str]] = {}
    for source in sorted(Path(inspect.getfile(Job)).parent.glob("*.py")):
        for cls in ast.parse(source.read_text(encoding="utf-8")).body:
            if not isinstance(cls, ast.ClassDef) or cls.name.endswith("Dict"):
                continue
            for field, doc in zip(cls.body, cls.body[1:], strict=False):
                if (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)
                        and isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)
                        and isinstance(doc.value.value, str)
                        and (m := MINIMUM_DOC.search(" ".join(doc.value.value.split())))):
                    out.setdefault(field.target.id, (int(m.group(1)), cls.name))
    return out


def _merge(base: Any, over: Any) -> Any:
    """Return ``over`` merged into ``base`` as a target override merges into the bundle (mappings key by key)."""
    if isinstance(base, dict) and isinstance(over, dict):
        return {**base, **{k: _merge(base.get(k), v) for k, v in over.items()}}
    if isinstance(base, list) and isinstance(over, list):
        return base + over
    return over


def _substitute(node: Any, values: dict[str, Any]) -> Any:
    """Return ``node`` with each ``${var.X}`` replaced by its value (a whole-string reference keeps the type)."""
    if isinstance(node, dict):
        return {k: _substitute(v, values) for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute(v, values) for v in node]
    if isinstance(node, str):
        whole = VAR_REF.fullmatch(node)
        if whole and whole.group(1) in values:
            return values[whole.group(1)]
        return VAR_REF.sub(lambda m: str(values.get(m.group(1), m.group(0))), node)
    return node


def target_resources(trees: list[tuple[str, Any]], target: str) -> list[tuple[str, dict[str, Any]]]:
    """Return (file, resources) as ``target`` deploys them: target-only resources merged in, variables resolved."""
    root = dict(trees[0][1])
    variables = {name: (spec or {}).get("default") for name, spec in (root.get("variables") or {}).items()}
    for name, value in (((root.get("targets") or {}).get(target) or {}).get("variables") or {}).items():
        variables[name] = value if not isinstance(value, dict) else f"<lookup {value.get('lookup')}>"
    out = []
    for rel, tree in trees:
        if not isinstance(tree, dict):
            continue
        over = (((tree.get("targets") or {}).get(target) or {}).get("resources")) or {}
        out.append((rel, _substitute(_merge(tree.get("resources") or {}, over), variables)))
    return out


def _check_minimums(target: str, resources: list[tuple[str, dict[str, Any]]]) -> list[str]:
    minimums = model_minimums()
    problems = []
    for rel, section in resources:
        for where, key, value in _numbers(section.get("jobs") or {}, "resources.jobs"):
            if key in minimums and value < minimums[key][0]:
                least, model = minimums[key]
                problems.append(f"{rel}: {where}: {value} in target {target!r} is below the minimum {least} "
                                f"({model}.{key} in databricks-bundles); deploy would be rejected")
    return problems


def _numbers(node: Any, where: str) -> Iterator[tuple[str, str, int]]:
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(v, int) and not isinstance(v, bool):
                yield f"{where}.{k}", str(k), v
            else:
                yield from _numbers(v, f"{where}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _numbers(v, f"{where}[{i}]")


def _check_tasks(rel: str, doc: Any) -> list[str]:
    """Return the problems of the tasks of one file: environments on the wrong task types, literal node types."""
    problems = []
    for where, section in _resource_sections(doc if isinstance(doc, dict) else {}):
        for name, job in (section.get("jobs") or {}).items():
            envs = {(e or {}).get("environment_key") for e in (job or {}).get("environments") or []}
            for i, task in enumerate((job or {}).get("tasks") or []):
                at = f"{rel}: {where}.jobs.{name}.tasks[{i}]"
                key = task.get("environment_key")
                if key is None:
                    continue
                kind = sorted(k for k in task if k.endswith("_task"))
                if not set(kind) <= ENVIRONMENT_TASKS or not kind:
                    problems.append(f"{at}.environment_key: the Jobs API gives environments to "
                                    f"{sorted(ENVIRONMENT_TASKS)} only, found {kind}")
                if key not in envs:
                    problems.append(f"{at}.environment_key: {key!r} is not an environment of the job "
                                    f"(declared: {sorted(e for e in envs if e)})")
                if CLUSTER_KEYS & set(task):
                    problems.append(f"{at}: a task with an environment_key runs on serverless compute, "
                                    f"not on a cluster ({sorted(CLUSTER_KEYS & set(task))})")
            for j, cluster in enumerate((job or {}).get("job_clusters") or []):
                node = ((cluster or {}).get("new_cluster") or {}).get("node_type_id")
                if node is not None and not VAR_REF.fullmatch(str(node)):
                    problems.append(f"{rel}: {where}.jobs.{name}.job_clusters[{j}].new_cluster.node_type_id: "
                                    f"{node!r} is one cloud's node type; use a variable set per target")
    return problems


REGISTERING_JOBS = ("ingest", "maintenance")  # the jobs that write user-facing tables, and so register them


def _check_unity_catalog(rel: str, doc: Any) -> list[str]:
    """Return the problems that keep the jobs' tables out of Unity Catalog: a lakehouse in a volume (no table can
    be defined on volume files), a writing job that does not register its tables after its last flow."""
    problems = []
    for where, section in _resource_sections(doc if isinstance(doc, dict) else {}):
        for name, job in (section.get("jobs") or {}).items():
            for i, param in enumerate((job or {}).get("parameters") or []):
                default = str((param or {}).get("default", ""))
                if (param or {}).get("name") == "lakehouse" and default.startswith("/Volumes/"):
                    problems.append(f"{rel}: {where}.jobs.{name}.parameters[{i}]: the lakehouse {default!r} is a "
                                    "volume, and Unity Catalog defines no table on files in a volume; use an external "
                                    "location URI (a variable per target)")
            if name not in REGISTERING_JOBS:
                continue
            tasks = (job or {}).get("tasks") or []
            flows = [t.get("task_key") for t in tasks if "notebook_task" in t]
            registers = [t for t in tasks
                         if ((t.get("python_wheel_task") or {}).get("parameters") or [None])[0] == "register-tables"]
            if not registers:
                problems.append(f"{rel}: {where}.jobs.{name}: no task registers the tables it writes "
                                "(a python_wheel_task running 'lakeshard register-tables')")
            elif flows and flows[-1] not in {d.get("task_key") for d in registers[0].get("depends_on") or []}:
                problems.append(f"{rel}: {where}.jobs.{name}: the register-tables task must depend on the last flow "
                                f"task {flows[-1]!r}")
    return problems


PIPELINE_REF = re.compile(r"^\$\{resources\.pipelines\.([A-Za-z_][\w-]*)\.id\}$")


def _upstream(tasks: list[dict[str, Any]], key: str) -> set[str]:
    """Return every task ``key`` depends on, directly or through other tasks."""
    deps = {t.get("task_key"): {d.get("task_key") for d in t.get("depends_on") or []} for t in tasks}
    seen: set[str] = set()
    todo = list(deps.get(key, ()))
    while todo:
        k = todo.pop()
        if k not in seen:
            seen.add(k)
            todo.extend(deps.get(k, ()))
    return seen


def _check_downstream(trees: list[tuple[str, Any]]) -> list[str]:
    """Return the problems of the downstream pipeline: the maintenance job must start a pipeline of the bundle
    after ``close_buckets``, so that each update sees the buckets closed by that run."""
    pipelines = {name for _rel, tree in trees if isinstance(tree, dict)
                 for _where, section in _resource_sections(tree) for name in section.get("pipelines") or {}}
    for rel, tree in trees:
        for _where, section in _resource_sections(tree if isinstance(tree, dict) else {}):
            job = (section.get("jobs") or {}).get("maintenance")
            if job is None:
                continue
            tasks = job.get("tasks") or []
            starts = [(t, PIPELINE_REF.match(str((t.get("pipeline_task") or {}).get("pipeline_id", ""))))
                      for t in tasks if "pipeline_task" in t]
            if not starts:
                return [f"{rel}: resources.jobs.maintenance: no pipeline_task starts the downstream pipeline "
                        f"(declared pipelines: {sorted(pipelines)})"]
            problems = []
            for task, ref in starts:
                if not ref or ref.group(1) not in pipelines:
                    problems.append(f"{rel}: resources.jobs.maintenance.{task.get('task_key')}: pipeline_id must be "
                                    f"${{resources.pipelines.<name>.id}} of a declared pipeline {sorted(pipelines)}")
                if "close_buckets" not in _upstream(tasks, str(task.get("task_key"))):
                    problems.append(f"{rel}: resources.jobs.maintenance.{task.get('task_key')}: the pipeline must "
                                    "start after close_buckets (depends_on, directly or through other tasks)")
            return problems
    return []


def _granted(section: dict[str, Any], principal: str) -> set[str]:
    return {str(p) for g in section.get("grants") or [] if (g or {}).get("principal") == principal
            for p in (g or {}).get("privileges") or []}


def _check_prod(doc: dict[str, Any], trees: list[tuple[str, Any]]) -> list[str]:
    """Return the problems of the production target: run-as grants, a root path users cannot edit, permissions."""
    prod = (doc.get("targets") or {}).get("prod") or {}
    problems = []
    root_path = str((prod.get("workspace") or {}).get("root_path") or "")
    if SHARED_ROOT.match(root_path):
        problems.append(f"databricks.yml: targets.prod.workspace.root_path: {root_path!r} is under /Workspace/Shared, "
                        "where every workspace user may edit what production runs; deploy elsewhere")
    for i, perm in enumerate(prod.get("permissions") or []):
        if (perm or {}).get("group_name") == "users" and perm.get("level") != "CAN_VIEW":
            problems.append(f"databricks.yml: targets.prod.permissions[{i}]: the users group gets "
                            f"{perm.get('level')!r}; production gives it CAN_VIEW only")
    principal = (prod.get("run_as") or {}).get("service_principal_name")
    if not principal:
        return problems
    wanted = {"schemas": RUN_AS_SCHEMA_PRIVILEGES, "volumes": RUN_AS_VOLUME_PRIVILEGES}
    merged: dict[str, dict[str, Any]] = {}
    for _rel, tree in trees:
        if not isinstance(tree, dict):
            continue
        over = (((tree.get("targets") or {}).get("prod") or {}).get("resources")) or {}
        for kind, items in _merge(tree.get("resources") or {}, over).items():
            for name, spec in (items or {}).items():
                merged[f"{kind}.{name}"] = _merge(merged.get(f"{kind}.{name}") or {}, spec or {})
    for key, spec in sorted(merged.items()):
        kind = key.split(".")[0]
        if kind in wanted and (missing := wanted[kind] - _granted(spec, principal)):
            problems.append(f"databricks.yml: targets.prod: resources.{key}: the run_as principal {principal} lacks "
                            f"{sorted(missing)} (grants give it {sorted(_granted(spec, principal))})")
    return problems


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
        problems += _check_tasks(rel, resource_doc)
        problems += _check_unity_catalog(rel, resource_doc)
    for target in doc.get("targets") or {}:
        problems += _check_minimums(target, target_resources(trees, target))
    problems += _check_prod(doc, trees)
    problems += _check_downstream(trees)
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

    ``bundles/<job>.job.yml`` must hold resource ``jobs.<job>`` whose notebook tasks (the flows) are exactly those,
    in that order; tasks of other types (registering tables, starting a pipeline) run no flow and are not compared.
    """
    problems = []
    for job, expected in jobs.items():
        yml = root / "bundles" / f"{job}.job.yml"
        if not yml.is_file():
            problems.append(f"bundles/{job}.job.yml: missing; the pipeline declares job {job!r}")
            continue
        spec = ((_load(yml) or {}).get("resources", {}).get("jobs", {}) or {}).get(job) or {}
        flow_tasks = [t for t in spec.get("tasks") or [] if "notebook_task" in t]  # the others run no flow
        keys = {t.get("task_key") for t in flow_tasks}
        found = [(t.get("task_key"), sorted(d["task_key"] for d in t.get("depends_on") or [] if d["task_key"] in keys),
                  str((yml.parent / t["notebook_task"].get("notebook_path", "")).resolve().relative_to(root)))
                 for t in flow_tasks]
        if found != expected:
            problems.append(f"bundles/{job}.job.yml: tasks (key, depends on, notebook) are {found}; "
                            f"the pipeline declaration gives {expected}")
    return problems
