"""The asset bundle, checked offline: typed models, paths, variables, targets, and the job DAGs against the
pipeline declaration; and each check shown to fail on a deliberately broken copy."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from bundle_check import check_bundle, job_mismatches, model_minimums

from lakeshard.pipelines import Pipeline, lakeshard_pipeline

ROOT = Path(__file__).resolve().parents[2]


def declared_jobs(pipeline: Pipeline) -> dict[str, list[tuple[str, list[str], str]]]:
    """Return each job's tasks as the declaration gives them: key, the same job's flows it follows, notebook."""
    out = {}
    for job, flows in pipeline.jobs().items():
        out[job] = [(f, sorted(u for u in pipeline.upstream(f) if u in flows), pipeline.flow(f).notebook)
                    for f in flows]
    return out


def test_the_repository_bundle_is_valid() -> None:
    assert check_bundle(ROOT) == []


def test_minimums_come_from_the_pinned_models_documentation() -> None:
    assert model_minimums()["wait_after_last_change_seconds"] == (60, "FileArrivalTriggerConfiguration")
    assert model_minimums()["min_time_between_triggers_seconds"][0] == 60


def test_job_task_dags_match_the_pipeline_declaration() -> None:
    jobs = declared_jobs(lakeshard_pipeline())
    assert jobs["ingest"] == [("route", [], "notebooks/jobs/route.ipynb"),
                              ("ingest", ["route"], "notebooks/jobs/ingest.ipynb")]
    assert job_mismatches(ROOT, jobs) == []


@pytest.fixture
def broken(tmp_path: Path) -> Callable[[str, Callable[[Any], None]], Path]:
    """Return a function that copies the bundle, lets ``change`` edit one YAML file's data, and returns the copy."""
    def make(relative: str, change: Callable[[Any], None]) -> Path:
        root = tmp_path / "bundle"
        root.mkdir()
        shutil.copy(ROOT / "databricks.yml", root)
        for folder in ("bundles", "notebooks", "lib"):
            shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
        doc = yaml.safe_load((root / relative).read_text())
        change(doc)
        (root / relative).write_text(yaml.safe_dump(doc, sort_keys=False))
        return root
    return make


def _route_task(doc: Any) -> dict[str, Any]:
    task: dict[str, Any] = doc["resources"]["jobs"]["ingest"]["tasks"][0]
    return task


def _set(path: str, value: Any) -> Callable[[Any], None]:
    def change(doc: Any) -> None:
        *parents, last = path.split(".")
        for key in parents:
            doc = doc[key]
        if value is None:
            del doc[last]
        else:
            doc[last] = value
    return change


def _ingest(doc: Any) -> dict[str, Any]:
    job: dict[str, Any] = doc["resources"]["jobs"]["ingest"]
    return job


def _prod(doc: Any) -> dict[str, Any]:
    target: dict[str, Any] = doc["targets"]["prod"]
    return target


def _drop_grant(kind: str, name: str) -> Callable[[Any], None]:
    def change(doc: Any) -> None:
        _prod(doc)["resources"][kind][name]["grants"] = []
    return change


CASES: list[tuple[str, str, Callable[[Any], None], str]] = [
    ("a trigger below the models' minimum", "bundles/ingest.job.yml",
     lambda d: _ingest(d)["trigger"]["file_arrival"].update(wait_after_last_change_seconds=30),
     "wait_after_last_change_seconds: 30 in target 'dev' is below the minimum 60"),
    ("a variable below the models' minimum in one target", "databricks.yml",
     _set("targets.prod.variables.ingest_min_seconds", 10),
     "min_time_between_triggers_seconds: 10 in target 'prod' is below the minimum 60"),
    ("an environment on a notebook task", "bundles/ingest.job.yml",
     lambda d: (_route_task(d).update(environment_key="default"),
                _ingest(d).update(environments=[{"environment_key": "default", "spec": {"environment_version": "4"}}])),
     "tasks[0].environment_key: the Jobs API gives environments to ['dbt_task', 'python_wheel_task', "
     "'spark_python_task'] only, found ['notebook_task']"),
    ("a task environment the job does not declare", "bundles/generate_traffic.job.yml",
     lambda d: d["targets"]["dev"]["resources"]["jobs"]["generate_traffic"]["tasks"][0].update(environment_key="x"),
     "environment_key: 'x' is not an environment of the job"),
    ("a cloud's node type spelled out", "bundles/maintenance.job.yml",
     lambda d: d["resources"]["jobs"]["maintenance"]["job_clusters"][0]["new_cluster"].update(node_type_id="i3.xlarge"),
     "new_cluster.node_type_id: 'i3.xlarge' is one cloud's node type"),
    ("a wheel built over a stale dist folder", "databricks.yml",
     _set("artifacts.python_artifact.build", "python3 -m pip wheel --no-deps --wheel-dir dist ."),
     "artifacts.python_artifact.build: clear the wheel directory before building"),
    ("production under /Workspace/Shared", "databricks.yml",
     _set("targets.prod.workspace.root_path", "/Workspace/Shared/.bundle/${bundle.name}/${bundle.target}"),
     "targets.prod.workspace.root_path: '/Workspace/Shared/.bundle/${bundle.name}/${bundle.target}' is under "
     "/Workspace/Shared"),
    ("users may edit production", "databricks.yml",
     _set("targets.prod.permissions", [{"group_name": "users", "level": "CAN_MANAGE"}]),
     "targets.prod.permissions[0]: the users group gets 'CAN_MANAGE'; production gives it CAN_VIEW only"),
    ("run-as principal without USE_SCHEMA", "databricks.yml", _drop_grant("schemas", "lakeshard"),
     "resources.schemas.lakeshard: the run_as principal ${var.service_principal} lacks ['USE_SCHEMA']"),
    ("run-as principal without volume grants", "databricks.yml", _drop_grant("volumes", "landing"),
     "resources.volumes.landing: the run_as principal ${var.service_principal} lacks ['READ_VOLUME', "
     "'WRITE_VOLUME']"),
    ("unknown key in a task", "bundles/ingest.job.yml",
     lambda d: _route_task(d).update(notebok_task=_route_task(d).pop("notebook_task")),
     "resources.jobs.ingest: Unexpected field 'notebok_task' for class Task"),
    ("unknown top-level key", "databricks.yml", lambda d: d.update(bundel={"name": "x"}),
     "databricks.yml: top level: Additional properties are not allowed ('bundel' was unexpected)"),
    ("missing notebook", "bundles/ingest.job.yml",
     lambda d: _route_task(d)["notebook_task"].update(notebook_path="../notebooks/jobs/missing.ipynb"),
     "notebook_task.notebook_path: '../notebooks/jobs/missing.ipynb' does not exist"),
    ("a file that is not a notebook", "bundles/ingest.job.yml",
     lambda d: _route_task(d)["notebook_task"].update(notebook_path="../databricks.yml"),
     "notebook_task.notebook_path: '../databricks.yml' is not a notebook"),
    ("undeclared variable", "bundles/maintenance.job.yml",
     lambda d: d["resources"]["jobs"]["maintenance"]["parameters"].append({"name": "x", "default": "${var.nope}"}),
     "${var.nope} is not declared under variables in databricks.yml"),
    ("variable without description", "databricks.yml", _set("variables.events.description", None),
     "databricks.yml: variables.events: 'description' is a required property"),
    ("variable without a value in a target", "databricks.yml", _set("targets.prod.variables.total_shards", None),
     "targets.prod.variables: variable 'total_shards' has no default and no value in this target"),
    ("production without root_path", "databricks.yml", _set("targets.prod.workspace", None),
     "targets.prod.workspace.root_path: production needs an explicit root_path"),
    ("development target in production mode", "databricks.yml", _set("targets.dev.mode", "production"),
     "targets.dev.mode: expected 'development', found 'production'"),
    ("a personal name", "databricks.yml",
     _set("targets.prod.permissions", [{"user_name": "jane.doe@example.com", "level": "CAN_MANAGE"}]),
     "'jane.doe@example.com' names a person"),
    ("a wheel no artifact builds", "bundles/ingest.job.yml",
     lambda d: _route_task(d).update(libraries=[{"whl": "../build/*.whl"}]),
     "wheel '../build/*.whl' is not built by any whl artifact"),
    ("production without run_as", "databricks.yml", _set("targets.prod.run_as", None),
     "targets.prod.run_as: production jobs must run as a service principal"),
    ("a wheel with a fixed version", "databricks.yml", _set("artifacts.python_artifact.dynamic_version", None),
     "artifacts.python_artifact.dynamic_version: a wheel needs dynamic_version: true"),
    ("the deprecated serverless client", "bundles/generate_traffic.job.yml",
     lambda d: d["targets"]["dev"]["resources"]["jobs"]["generate_traffic"]["environments"][0]["spec"].update(
         client="2"),
     "environments[0].spec: name an environment_version"),
    ("ingest on a cron schedule", "bundles/ingest.job.yml",
     lambda d: d["resources"]["jobs"]["ingest"].update(
         schedule={"quartz_cron_expression": "0 0/5 * * * ?", "timezone_id": "UTC"}),
     "resources.jobs.ingest: ingest must be triggered by file arrival"),
    ("ingest without its trigger", "bundles/ingest.job.yml", lambda d: d["resources"]["jobs"]["ingest"].pop("trigger"),
     "resources.jobs.ingest: ingest must be triggered by file arrival"),
    ("an undeclared volume", "bundles/landing.volume.yml", lambda d: d["resources"]["volumes"].pop("landing"),
     "${resources.volumes.landing} is not a resource of this bundle"),
    ("an undeclared schema", "bundles/lakeshard.schema.yml", lambda d: d["resources"].pop("schemas"),
     "${resources.schemas.lakeshard} is not a resource of this bundle"),
    ("a volume path spelled out", "bundles/maintenance.job.yml",
     lambda d: d["resources"]["jobs"]["maintenance"]["parameters"][0].update(default="/Volumes/main/lakeshard/lh"),
     "'/Volumes/main/lakeshard/lh' spells out a volume path"),
    ("a volume with an unknown field", "bundles/landing.volume.yml",
     lambda d: d["resources"]["volumes"]["landing"].update(volume_typ="MANAGED"),
     "resources.volumes.landing: Unexpected field 'volume_typ'"),
    ("a lakehouse in a volume", "bundles/maintenance.job.yml",
     lambda d: d["resources"]["jobs"]["maintenance"]["parameters"][0].update(
         default="/Volumes/${resources.volumes.landing.catalog_name}/${resources.volumes.landing.schema_name}/lh"),
     "resources.jobs.maintenance.parameters[0]: the lakehouse '/Volumes/"),
    ("a writing job that registers no table", "bundles/ingest.job.yml",
     lambda d: _ingest(d).update(tasks=[t for t in _ingest(d)["tasks"] if "python_wheel_task" not in t]),
     "resources.jobs.ingest: no task registers the tables it writes"),
    ("maintenance starts no downstream pipeline", "bundles/maintenance.job.yml",
     lambda d: d["resources"]["jobs"]["maintenance"].update(
         tasks=[t for t in d["resources"]["jobs"]["maintenance"]["tasks"] if "pipeline_task" not in t]),
     "resources.jobs.maintenance: no pipeline_task starts the downstream pipeline"),
    ("the downstream pipeline started before close_buckets", "bundles/maintenance.job.yml",
     lambda d: [t.pop("depends_on") for t in d["resources"]["jobs"]["maintenance"]["tasks"] if "pipeline_task" in t],
     "resources.jobs.maintenance.downstream: the pipeline must start after close_buckets"),
    ("a pipeline source folder that does not exist", "bundles/downstream.pipeline.yml",
     lambda d: d["resources"]["pipelines"]["downstream"]["libraries"][0]["glob"].update(include="../lib/nothing/**"),
     "libraries[0].glob.include: '../lib/nothing/**' does not exist"),
    ("a pipeline with an unknown field", "bundles/downstream.pipeline.yml",
     lambda d: d["resources"]["pipelines"]["downstream"].update(serverles=True),
     "resources.pipelines.downstream: Unexpected field 'serverles'"),
    ("tables registered before the last flow", "bundles/maintenance.job.yml",
     lambda d: [t.update(depends_on=[{"task_key": "close_buckets"}]) for t in d["resources"]["jobs"]["maintenance"]
                ["tasks"] if t["task_key"] == "register_tables"],
     "resources.jobs.maintenance: the register-tables task must depend on the last flow task 'compact_books'"),
    ("a serverless dependency no artifact builds", "bundles/generate_traffic.job.yml",
     lambda d: d["targets"]["dev"]["resources"]["jobs"]["generate_traffic"]["environments"][0]["spec"].update(
         dependencies=["../build/*.whl"]),
     "spec.dependencies[0]: wheel '../build/*.whl' is not built by any whl artifact"),
]


@pytest.mark.parametrize(("relative", "change", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_checks_fail_on_a_broken_copy(
    broken: Callable[[str, Callable[[Any], None]], Path], relative: str, change: Callable[[Any], None],
    expected: str,
) -> None:
    problems = check_bundle(broken(relative, change))
    assert any(expected in p for p in problems), problems


def test_a_job_dag_that_drifts_from_the_declaration_is_reported(
    broken: Callable[[str, Callable[[Any], None]], Path],
) -> None:
    root = broken("bundles/ingest.job.yml", lambda d: d["resources"]["jobs"]["ingest"]["tasks"][1].pop("depends_on"))
    [problem] = job_mismatches(root, declared_jobs(lakeshard_pipeline()))
    assert problem.startswith("bundles/ingest.job.yml: tasks (key, depends on, notebook) are [('route', [], ")
    assert "('ingest', [], 'notebooks/jobs/ingest.ipynb')]" in problem


def test_a_flow_declared_without_its_job_task_is_reported() -> None:
    p = lakeshard_pipeline()
    vacuum = dataclasses.replace(p.flow("autoshard"), name="vacuum", inputs=("events",), outputs=("events",),
                                 refresh=(), after=(), notebook="notebooks/jobs/vacuum.ipynb")
    [problem] = job_mismatches(ROOT, declared_jobs(p.extend(vacuum)))
    assert problem.startswith("bundles/maintenance.job.yml: tasks (key, depends on, notebook) are "
                              "[('close_buckets', []")
    assert "('vacuum', [], 'notebooks/jobs/vacuum.ipynb')" in problem
