"""Offline checks of a Databricks asset bundle (``databricks.yml`` + its ``include`` files), no workspace needed.

* the merged configuration of every target against the official bundle JSON schema of the CLI version the bundle
  declares (``bundle.databricks_cli_version: ">= X.Y.Z"``; ``schema/jsonschema-vX.Y.Z.json``, source in
  ``schema/README.md``), and the top-level keys that schema lists (it admits others; the CLI only warns);
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
  ``/Workspace/Shared`` (every workspace user may edit there) and gives the ``users`` group ``CAN_VIEW`` only;
* what the schema cannot say (:data:`RULES`, on the merged configuration of each target): the CLI pinned at or
  above the first release of every feature used; development triggers and schedules left for development mode to
  pause; each developer's storage their own, no two storage locations overlapping; production's grants covering
  every role (producers, readers), since bundle grants replace all others; the pipeline's run-as principal
  holding what its datasets need (``CREATE_MATERIALIZED_VIEW`` for a materialized view); external volumes, and in
  production ``lifecycle.prevent_destroy`` on what holds data; the tables a pipeline reads by name created before
  its first update (``register-tables --create-missing``); triggered and scheduled runs queued.

:func:`check_bundle` returns the problems as ``"<file>: <where>: <what>"`` lines (empty = valid).
"""

from __future__ import annotations

import ast
import functools
import glob
import inspect
import json
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

from lakeshard.bundle import Bundle, BundleError, load_bundle, merge, substitute

VAR = re.compile(r"\$\{var\.([A-Za-z_][\w-]*)")
VAR_REF = re.compile(r"\$\{var\.([A-Za-z_][\w-]*)\}")
RESOURCE_REF = re.compile(r"\$\{resources\.([A-Za-z_]+)\.([A-Za-z_][\w-]*)")
PERSONAL_NAME = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+|/Users/(?!\$\{var\.service_principal\})")
PERSONAL = re.compile(PERSONAL_NAME.pattern + r"|\$\{workspace\.current_user")
RESOURCE_MODELS: dict[str, Any] = {"jobs": Job, "pipelines": Pipeline, "schemas": Schema, "volumes": Volume}
FILE_KEYS = {"notebook_path", "python_file", "whl", "path", "include"}  # include: a pipeline's source glob
# Task types the Jobs API gives a serverless environment (``environment_key``): Python wheel, Python script, dbt.
ENVIRONMENT_TASKS = {"python_wheel_task", "spark_python_task", "dbt_task"}
CLUSTER_KEYS = {"job_cluster_key", "existing_cluster_id", "new_cluster"}
RUN_AS_SCHEMA_PRIVILEGES = {"USE_SCHEMA"}
RUN_AS_VOLUME_PRIVILEGES = {"READ_VOLUME", "WRITE_VOLUME"}
SHARED_ROOT = re.compile(r"^(/Workspace)?/Shared(/|$)")
MINIMUM_DOC = re.compile(r"minimum allowed value is (\d+)", re.IGNORECASE)

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
    """Yield (where, resources mapping) of a file: its ``resources``, and each ``targets.<t>.resources`` with every
    resource it names merged over the file's own declaration of it (a target may give only some fields)."""
    base = doc.get("resources") if isinstance(doc.get("resources"), dict) else {}
    if base:
        yield "resources", base
    for target, t in (doc.get("targets") or {}).items():
        over = (t or {}).get("resources")
        if isinstance(over, dict):
            yield f"targets.{target}.resources", {
                kind: {name: merge((base.get(kind) or {}).get(name), spec) for name, spec in (items or {}).items()}
                for kind, items in over.items()}


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
        out.append((rel, substitute(merge(tree.get("resources") or {}, over), variables)))
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
        for kind, items in merge(tree.get("resources") or {}, over).items():
            for name, spec in (items or {}).items():
                merged[f"{kind}.{name}"] = merge(merged.get(f"{kind}.{name}") or {}, spec or {})
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
    if not isinstance(doc, dict):
        return [f"databricks.yml: top level: expected a mapping, found {type(doc).__name__}"]
    problems = _check_top_level(doc)
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
    try:
        bundle = load_bundle(root)
    except BundleError as exc:
        problems.append(str(exc))
    else:
        problems += check_official_schema(bundle)
        for rule in RULES:
            problems += rule(bundle)
    resources = _declared_resources(trees)
    development = {name for name, t in (doc.get("targets") or {}).items() if (t or {}).get("mode") == "development"}
    for rel, tree in trees:
        for where, _key, value in _strings(tree):
            problems += [f"{rel}: {where}: ${{var.{v}}} is not declared under variables in databricks.yml"
                         for v in VAR.findall(value) if v not in declared]
            problems += [f"{rel}: {where}: ${{resources.{kind}.{name}}} is not a resource of this bundle"
                         for kind, name in RESOURCE_REF.findall(value) if (kind, name) not in resources]
            if value.startswith("/Volumes/") and "${resources.volumes." not in value:
                problems.append(f"{rel}: {where}: {value!r} spells out a volume path; build it from a volume "
                                "resource (${resources.volumes.<name>...}) so the volume is declared")
            # A development target's paths name whoever deploys (each developer their own); nowhere else.
            per_user = rel == "databricks.yml" and any(where.startswith(f"targets.{d}.variables.") for d in development)
            if (PERSONAL_NAME if per_user else PERSONAL).search(value):
                problems.append(f"{rel}: {where}: {value!r} names a person; use groups and shared paths")
    return problems


# --- The official schema of the pinned CLI ------------------------------------------------------------------------

SCHEMA_DIR = Path(__file__).resolve().parent / "schema"
CLI_VERSION = re.compile(r"^>=\s*v?(\d+\.\d+\.\d+)$")


def declared_cli_version(bundle: Bundle) -> str | None:
    """Return the oldest CLI version ``bundle.databricks_cli_version`` admits (``">= 0.287.0"`` → ``"0.287.0"``), or
    None when the bundle pins none or pins it otherwise than ``>= X.Y.Z``."""
    m = CLI_VERSION.match(str((bundle.config.get("bundle") or {}).get("databricks_cli_version") or "").strip())
    return m.group(1) if m else None


@functools.cache
def official_schema(version: str) -> dict[str, Any]:
    """Return the bundle JSON schema of Databricks CLI ``version`` kept in ``schema/`` (``schema/README.md`` names
    its source)."""
    path = SCHEMA_DIR / f"jsonschema-v{version}.json"
    schema: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return schema


def _deepest(error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """Return the innermost error under ``error``: a value that is neither the mapping the schema describes nor a
    ``${var.*}`` reference fails both branches of a ``oneOf``, and the mapping's branch says what is wrong."""
    best = error
    for sub in error.context or []:
        inner = _deepest(sub)
        deeper = len(inner.absolute_path) > len(best.absolute_path)
        same = len(inner.absolute_path) == len(best.absolute_path)
        if deeper or (same and best.validator in ("oneOf", "anyOf")
                      and inner.validator not in ("oneOf", "anyOf", "type", "pattern")):
            best = inner
    return best


def check_official_schema(bundle: Bundle) -> list[str]:
    """Return how each target's merged configuration breaks the official JSON schema of the CLI version the bundle
    declares (``bundle.databricks_cli_version: ">= X.Y.Z"``, schema kept as ``schema/jsonschema-vX.Y.Z.json``)."""
    version = declared_cli_version(bundle)
    if version is None:
        return []  # check_cli_version says so
    if not (SCHEMA_DIR / f"jsonschema-v{version}.json").is_file():
        return [f"databricks.yml: bundle.databricks_cli_version: the bundle declares >= {version}, and "
                f"tests/bundles/schema holds no jsonschema-v{version}.json (that CLI's bundle/schema/jsonschema.json)"]
    validator = jsonschema.Draft202012Validator(official_schema(version))
    problems = []
    for target in bundle.targets:
        for error in validator.iter_errors(bundle.merged(target)):
            inner = _deepest(error)
            where = ".".join(map(str, inner.absolute_path)) or "top level"
            problems.append(f"target {target} (merged): {where}: {inner.message} (CLI v{version} schema)")
    return problems


def _check_top_level(doc: dict[str, Any]) -> list[str]:
    """Return the problems the official schema lets through: unknown top-level keys (it admits any, the CLI warns),
    variables without a description."""
    version = CLI_VERSION.match(str((doc.get("bundle") or {}).get("databricks_cli_version") or "").strip())
    known = set(official_schema(version.group(1))["properties"]) if version and \
        (SCHEMA_DIR / f"jsonschema-v{version.group(1)}.json").is_file() else set()
    problems = [f"databricks.yml: top level: Additional properties are not allowed ({k!r} was unexpected)"
                for k in doc if known and k not in known]
    problems += [f"databricks.yml: variables.{name}: 'description' is a required property"
                 for name, spec in (doc.get("variables") or {}).items() if not (spec or {}).get("description")]
    return problems


# --- What the schema cannot say -------------------------------------------------------------------------------------

def _targets(bundle: Bundle, mode: str) -> list[str]:
    return [t for t in bundle.targets if bundle.mode(t) == mode]


def _resources(config: dict[str, Any], kind: str) -> dict[str, Any]:
    items: dict[str, Any] = (config.get("resources") or {}).get(kind) or {}
    return items


def check_dev_triggers(bundle: Bundle) -> list[str]:
    """Development mode pauses a job's trigger, schedule or continuous run only when it gives no ``pause_status``
    (the CLI's ApplyPresets): an explicit ``UNPAUSED`` arms it on every developer's deploy."""
    problems = []
    for target in _targets(bundle, "development"):
        for name, job in _resources(bundle.merged(target), "jobs").items():
            for key in ("trigger", "schedule", "continuous"):
                status = ((job or {}).get(key) or {}).get("pause_status")
                if status not in (None, "", "PAUSED"):
                    problems.append(f"target {target}: resources.jobs.{name}.{key}.pause_status: {status!r} in a "
                                    "development target runs on every developer's deploy (development mode pauses only "
                                    "what gives no pause_status); set it in the production target only")
    return problems


URI = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)
CURRENT_USER = re.compile(r"\$\{workspace\.current_user\.(?:short_name|userName|domain_friendly_name)\}")


def _storage(config: dict[str, Any]) -> list[tuple[str, str]]:
    """Return (where, URI) of every storage location a configuration names: the jobs' URI parameters (the lakehouse),
    the volumes' and schemas' storage."""
    out = []
    for name, job in _resources(config, "jobs").items():
        for i, param in enumerate((job or {}).get("parameters") or []):
            if URI.match(str((param or {}).get("default", ""))):
                out.append((f"resources.jobs.{name}.parameters[{i}]", str(param["default"])))
    for kind, key in (("volumes", "storage_location"), ("schemas", "storage_root")):
        for name, spec in _resources(config, kind).items():
            if (spec or {}).get(key):
                out.append((f"resources.{kind}.{name}.{key}", str(spec[key])))
    return out


def check_storage(bundle: Bundle) -> list[str]:
    """Each developer's storage is their own (the dev schema is per user; Unity Catalog refuses overlapping external
    tables and volumes), and no two storage locations of a target overlap (the landing volume's files are not the
    lakehouse's tables)."""
    problems = []
    for target in bundle.targets:
        config = substitute(bundle.merged(target), bundle.variable_values(target))
        places = _storage(config)
        if bundle.mode(target) == "development":
            problems += [f"target {target}: {where}: {uri!r} is one path for every developer; include "
                         "${workspace.current_user.short_name} so that two developers' data never overlap"
                         for where, uri in places if not CURRENT_USER.search(uri)]
        uris = sorted({uri.rstrip("/") for _, uri in places})
        problems += [f"target {target}: {a!r} lies inside {b!r}: Unity Catalog refuses overlapping storage"
                     for a in uris for b in uris if a != b and a.startswith(b + "/")]
    return problems


# Who needs what on the objects the bundle grants on (the variables naming them, docs/databricks.md): bundle grants
# are an object's whole grant list, so a grant these roles need and the bundle lacks is revoked at every deploy.
ROLE_GRANTS: dict[str, dict[str, set[str]]] = {
    "schemas": {"producers": {"USE_SCHEMA"}, "readers": {"USE_SCHEMA", "SELECT"}},
    "volumes": {"producers": {"READ_VOLUME", "WRITE_VOLUME"}},
}


def check_role_grants(bundle: Bundle) -> list[str]:
    """In production every role's grants are in the bundle (variables ``producers``, ``readers``)."""
    problems = []
    declared = set(bundle.config.get("variables") or {})
    for target in _targets(bundle, "production"):
        config = bundle.merged(target)
        for kind, roles in ROLE_GRANTS.items():
            for name, spec in _resources(config, kind).items():
                for role, wanted in sorted(roles.items()):
                    if role not in declared:
                        problems.append(f"databricks.yml: variables: {role!r} is not declared; the bundle grants "
                                        f"it {sorted(wanted)} on resources.{kind}.{name}")
                        continue
                    if missing := wanted - _granted(spec, f"${{var.{role}}}"):
                        problems.append(f"target {target}: resources.{kind}.{name}: grants give ${{var.{role}}} no "
                                        f"{sorted(missing)}; bundle grants replace every other grant on the object, "
                                        "so one made in SQL is revoked at the next deploy: declare it in the bundle")
    return problems


DATASET_PRIVILEGES = {  # what a pipeline's run-as principal needs on its schema to create each kind of dataset
    "CREATE_MATERIALIZED_VIEW": re.compile(r"\b(?:dp|dlt)\.(?:materialized_view|create_materialized_view)\b"),
    "CREATE_TABLE": re.compile(r"\b(?:dp|dlt)\.(?:table|create_streaming_table|streaming_table)\b"),
}
SCHEMA_REF = re.compile(r"^\$\{resources\.schemas\.([A-Za-z_][\w-]*)\.name\}$")


def _pipeline_sources(bundle: Bundle, name: str) -> list[Path]:
    """Return the source files of pipeline ``name``, found from the file that declares it (paths are relative)."""
    out: list[Path] = []
    for file in bundle.files:
        spec = ((file.doc.get("resources") or {}).get("pipelines") or {}).get(name) or {}
        for library in spec.get("libraries") or []:
            for kind in ("glob", "file", "notebook"):
                pattern = str(((library or {}).get(kind) or {}).get("include" if kind == "glob" else "path") or "")
                if pattern:
                    base = (bundle.root / file.path).parent
                    found = sorted(glob.glob(str(base / pattern), recursive=True))
                    out += [Path(p) for p in found if Path(p).is_file()]
    return out


def check_pipeline_privileges(bundle: Bundle) -> list[str]:
    """In production the run-as principal holds, on each pipeline's schema, what creating its datasets needs:
    CREATE_TABLE for streaming tables and the event log table, CREATE_MATERIALIZED_VIEW for materialized views."""
    problems = []
    for target in _targets(bundle, "production"):
        config = bundle.merged(target)
        principal = (config.get("run_as") or {}).get("service_principal_name")
        if not principal:
            continue
        for name, pipeline in _resources(config, "pipelines").items():
            ref = SCHEMA_REF.match(str((pipeline or {}).get("schema", "")))
            if not ref:
                problems.append(f"target {target}: resources.pipelines.{name}.schema: name a schema of the bundle "
                                "(${resources.schemas.<name>.name}) so its grants can be checked")
                continue
            needed = {"USE_SCHEMA"} | ({"CREATE_TABLE"} if (pipeline or {}).get("event_log") else set())
            sources = [p.resolve() for p in _pipeline_sources(bundle, name)]
            text = "\n".join(p.read_text(encoding="utf-8") for p in sources)
            needed |= {privilege for privilege, pattern in DATASET_PRIVILEGES.items() if pattern.search(text)}
            schema = _resources(config, "schemas").get(ref.group(1)) or {}
            if missing := needed - _granted(schema, principal):
                problems.append(f"target {target}: resources.schemas.{ref.group(1)}: the run_as principal {principal} "
                                f"lacks {sorted(missing)}, which pipeline {name} needs to create its datasets "
                                f"({', '.join(str(p.relative_to(bundle.root)) for p in sources)})")
    return problems


def check_destroy_protection(bundle: Bundle) -> list[str]:
    """Data the bundle does not own outlives it: every volume is external (a managed volume's files are deleted with
    it), and in production the schema, the volumes and the pipelines refuse a destroy (``lifecycle.prevent_destroy``;
    the CLI drops a schema with everything in it)."""
    problems = []
    for target in bundle.targets:
        config = bundle.merged(target)
        for name, spec in _resources(config, "volumes").items():
            external = str((spec or {}).get("volume_type", "MANAGED")).upper() == "EXTERNAL"
            if not external or not (spec or {}).get("storage_location"):
                problems.append(f"target {target}: resources.volumes.{name}: a managed volume's files are deleted with "
                                "it (bundle destroy, a renamed catalog, schema or resource key); make it EXTERNAL "
                                "with a storage_location")
        if bundle.mode(target) != "production":
            continue
        for kind in ("schemas", "volumes", "pipelines"):
            for name, spec in _resources(config, kind).items():
                if ((spec or {}).get("lifecycle") or {}).get("prevent_destroy") is not True:
                    problems.append(f"target {target}: resources.{kind}.{name}: no lifecycle.prevent_destroy: true; "
                                    "bundle destroy (or a deploy that recreates it) would drop it and what it holds")
    return problems


def check_first_run(bundle: Bundle) -> list[str]:
    """A job that starts a pipeline after registering the tables creates the missing ones empty (``register-tables
    --create-missing``): the pipeline reads them by name, and on a fresh deploy no ingest has written them yet."""
    problems = []
    for target in bundle.targets:
        for name, job in _resources(bundle.merged(target), "jobs").items():
            tasks = (job or {}).get("tasks") or []
            by_key = {t.get("task_key"): t for t in tasks}
            for task in tasks:
                if "pipeline_task" not in task:
                    continue
                upstream = [by_key[k] for k in _upstream(tasks, str(task.get("task_key"))) if k in by_key]
                registers = [t for t in upstream if ((t.get("python_wheel_task") or {}).get("parameters")
                                                     or [None])[0] == "register-tables"]
                if not registers:
                    problems.append(f"target {target}: resources.jobs.{name}.{task.get('task_key')}: the pipeline "
                                    "reads tables by name; a register-tables task must run before it")
                for reg in registers:
                    if "--create-missing" not in (reg.get("python_wheel_task") or {}).get("parameters"):
                        problems.append(f"target {target}: resources.jobs.{name}.{reg.get('task_key')}: pass "
                                        f"--create-missing: {task.get('task_key')} reads the tables by name, and "
                                        "after a fresh deploy they exist only once an ingest has written them")
    return problems


def check_queue(bundle: Bundle) -> list[str]:
    """A job started by a trigger or a schedule queues the runs that come while it runs (otherwise the Jobs API skips
    them: files that arrive during an ingest would wait for the next arrival)."""
    problems = []
    for target in bundle.targets:
        for name, job in _resources(bundle.merged(target), "jobs").items():
            started = (job or {}).get("trigger") or (job or {}).get("schedule")
            if started and not ((job or {}).get("queue") or {}).get("enabled"):
                problems.append(f"target {target}: resources.jobs.{name}: a run triggered while "
                                f"max_concurrent_runs ({job.get('max_concurrent_runs', 1)}) runs are active is "
                                "skipped; set queue.enabled: true")
    return problems


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


def _uses_prevent_destroy(config: dict[str, Any]) -> bool:
    return any(((spec or {}).get("lifecycle") or {}).get("prevent_destroy")
               for items in (config.get("resources") or {}).values() for spec in (items or {}).values())


def _grants_materialized_views(config: dict[str, Any]) -> bool:
    return any("CREATE_MATERIALIZED_VIEW" in ((g or {}).get("privileges") or [])
               for spec in _resources(config, "schemas").values() for g in (spec or {}).get("grants") or [])


# The first CLI release with each feature the bundle may use (the CLI's CHANGELOG.md and its bundle schema).
CLI_FEATURES: list[tuple[str, str, Any]] = [
    ("0.245.0", "artifacts with dynamic_version",
     lambda c: any((a or {}).get("dynamic_version") for a in (c.get("artifacts") or {}).values())),
    ("0.267.0", "pipelines running as the target's run_as",
     lambda c: bool(c.get("run_as")) and bool(_resources(c, "pipelines"))),
    ("0.269.0", "lifecycle.prevent_destroy (in the schema since v0.268.0, checked on every resource since v0.269.0)",
     _uses_prevent_destroy),
    ("0.287.0", "CREATE_MATERIALIZED_VIEW among schema grant privileges", _grants_materialized_views),
]


def check_cli_version(bundle: Bundle) -> list[str]:
    """The bundle pins the CLI (``bundle.databricks_cli_version: ">= X.Y.Z"``) at or above the first release of every
    feature it uses, so an older CLI refuses to deploy it instead of deploying something else."""
    declared = declared_cli_version(bundle)
    if declared is None:
        found = (bundle.config.get("bundle") or {}).get("databricks_cli_version")
        return [f"databricks.yml: bundle.databricks_cli_version: pin the oldest CLI that deploys this bundle as "
                f"'>= X.Y.Z', found {found!r}"]
    problems = []
    for first, feature, used in CLI_FEATURES:
        targets = [t for t in bundle.targets if used(bundle.merged(t))]
        if targets and _version(declared) < _version(first):
            problems.append(f"databricks.yml: bundle.databricks_cli_version: '>= {declared}' admits CLIs without "
                            f"{feature} (first in v{first}; used by target {', '.join(targets)})")
    return problems


RULES = [check_cli_version, check_dev_triggers, check_storage, check_role_grants, check_pipeline_privileges,
         check_destroy_protection, check_first_run, check_queue]


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
