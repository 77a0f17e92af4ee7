"""The asset bundle, checked offline: typed models, paths, variables, targets, and the job DAGs against the
pipeline declaration; and each check shown to fail on a deliberately broken copy."""

from __future__ import annotations

import dataclasses
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from bundle_check import (
    SCHEMA_DIR,
    check_bundle,
    check_cli_version,
    check_destroy_protection,
    check_dev_triggers,
    check_first_run,
    check_official_schema,
    check_pipeline_privileges,
    check_queue,
    check_role_grants,
    check_storage,
    declared_cli_version,
    job_mismatches,
    model_minimums,
)

from lakeshard.bundle import Bundle, load_bundle, plan_target
from lakeshard.pipelines import Pipeline, lakeshard_pipeline

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "databricks.md"


@pytest.fixture(scope="module")
def bundle() -> Bundle:
    return load_bundle(ROOT)


def declared_jobs(pipeline: Pipeline) -> dict[str, list[tuple[str, list[str], str]]]:
    """Return each job's tasks as the declaration gives them: key, the same job's flows it follows, notebook."""
    out = {}
    for job, flows in pipeline.jobs().items():
        out[job] = [(f, sorted(u for u in pipeline.upstream(f) if u in flows), pipeline.flow(f).notebook)
                    for f in flows]
    return out


def test_the_repository_bundle_is_valid() -> None:
    assert check_bundle(ROOT) == []


def test_every_target_validates_against_the_official_schema_of_the_pinned_cli(bundle: Bundle) -> None:
    version = declared_cli_version(bundle)
    assert version == "0.287.0"
    assert (SCHEMA_DIR / f"jsonschema-v{version}.json").is_file()
    assert f"v{version}" in (SCHEMA_DIR / "README.md").read_text(encoding="utf-8")  # it names its source
    assert bundle.targets == ("dev", "prod")
    assert check_official_schema(bundle) == []


def test_the_cli_is_pinned_at_the_first_release_of_every_feature_the_bundle_uses(bundle: Bundle) -> None:
    # Pipelines run as the service principal (v0.267.0), prevent_destroy (v0.269.0), CREATE_MATERIALIZED_VIEW
    # grants (v0.287.0): an older CLI must refuse the bundle rather than deploy it otherwise.
    assert check_cli_version(bundle) == []


def test_a_development_deploy_leaves_every_trigger_and_schedule_paused(bundle: Bundle) -> None:
    assert check_dev_triggers(bundle) == []
    starts = {r.key: r.trigger for r in plan_target(bundle, "dev").resources if r.kind == "job"}
    assert starts["ingest"].startswith("file arrival on /Volumes/main/dev_<user>_lakeshard_dev/landing/: PAUSED")
    assert starts["maintenance"].startswith("schedule 0 10 * * * ? UTC: PAUSED")
    live = {r.key: r.trigger for r in plan_target(bundle, "prod").resources if r.kind == "job"}
    assert live["ingest"].startswith("file arrival on /Volumes/main/lakeshard/landing/: UNPAUSED")
    assert live["maintenance"].startswith("schedule 0 10 * * * ? UTC: UNPAUSED")


def test_each_developer_s_tables_and_landing_files_have_storage_of_their_own(bundle: Bundle) -> None:
    assert check_storage(bundle) == []
    dev = plan_target(bundle, "dev")
    assert dev.not_owned[0].startswith("the lakehouse at s3://lakeshard-dev/<user>/lakehouse:")
    [landing] = [r for r in dev.resources if r.kind == "volume"]
    assert landing.storage.endswith("external storage s3://lakeshard-dev/<user>/landing")


def test_production_declares_every_grant_the_product_needs_and_the_guide_grants_none_in_sql(bundle: Bundle) -> None:
    # Bundle grants are a securable's whole grant list: a grant made in SQL on the schema or the volume is revoked by
    # the next deploy, so the bundle holds them all and the guide never tells anyone to make one.
    assert check_role_grants(bundle) == []
    guide = GUIDE.read_text(encoding="utf-8")
    assert not re.findall(r"GRANT [^;]* ON (?:SCHEMA|VOLUME)\b", guide, re.IGNORECASE)
    assert "never in SQL" in guide


def test_the_pipeline_s_run_as_principal_holds_what_creating_its_datasets_needs(bundle: Bundle) -> None:
    assert check_pipeline_privileges(bundle) == []
    [schema] = [r for r in plan_target(bundle, "prod").resources if r.kind == "schema"]
    [runner] = [g for g in schema.grants if g.principal.startswith("<lookup service_principal")]
    assert "CREATE_MATERIALIZED_VIEW" in runner.privileges  # closed_bucket_events is a materialized view


def test_the_guide_says_production_is_deployed_only_as_its_service_principal(bundle: Bundle) -> None:
    # prod's root_path is the service principal's own folder: nobody else can write there.
    assert "lakeshard-prod" in plan_target(bundle, "prod").deployed_by
    production = GUIDE.read_text(encoding="utf-8").split("## 7. Production", 1)[1].split("\n## ", 1)[0]
    assert "must deploy as the service principal" in " ".join(production.split())
    assert "best from CI" not in production


def test_landing_files_and_tables_outlive_a_destroy(bundle: Bundle) -> None:
    assert check_destroy_protection(bundle) == []
    prod = {r.kind: r for r in plan_target(bundle, "prod").resources if r.kind != "job"}
    assert all(r.protected for r in prod.values())
    assert prod["volume"].on_destroy.endswith("drops the volume; its files at s3://lakeshard-prod/landing stay")


def test_the_first_maintenance_run_after_a_fresh_deploy_finds_the_tables_its_pipeline_reads(bundle: Bundle) -> None:
    assert check_first_run(bundle) == []


def test_a_run_triggered_while_one_is_running_is_queued(bundle: Bundle) -> None:
    assert check_queue(bundle) == []


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


def _without_privilege(kind: str, name: str, principal: str, privilege: str) -> Callable[[Any], None]:
    def change(doc: Any) -> None:
        [grant] = [g for g in _prod(doc)["resources"][kind][name]["grants"] if g["principal"] == principal]
        grant["privileges"].remove(privilege)
    return change


def _maintenance_register(doc: Any) -> dict[str, Any]:
    [task] = [t for t in doc["resources"]["jobs"]["maintenance"]["tasks"] if t["task_key"] == "register_tables"]
    found: dict[str, Any] = task
    return found


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
    ("run-as principal without USE_SCHEMA", "bundles/lakeshard.schema.yml", _drop_grant("schemas", "lakeshard"),
     "resources.schemas.lakeshard: the run_as principal ${var.service_principal} lacks ['USE_SCHEMA']"),
    ("run-as principal without volume grants", "bundles/landing.volume.yml", _drop_grant("volumes", "landing"),
     "resources.volumes.landing: the run_as principal ${var.service_principal} lacks ['READ_VOLUME', "
     "'WRITE_VOLUME']"),
    ("unknown key in a task", "bundles/ingest.job.yml",
     lambda d: _route_task(d).update(notebok_task=_route_task(d).pop("notebook_task")),
     "resources.jobs.ingest: Unexpected field 'notebok_task' for class Task"),
    ("a development trigger armed on every deploy", "bundles/ingest.job.yml",
     lambda d: _ingest(d)["trigger"].update(pause_status="UNPAUSED"),
     "target dev: resources.jobs.ingest.trigger.pause_status: 'UNPAUSED' in a development target runs on every "
     "developer's deploy"),
    ("one development lakehouse for every developer", "databricks.yml",
     _set("targets.dev.variables.lakehouse_location", "s3://lakeshard-dev/lakehouse"),
     "target dev: resources.jobs.ingest.parameters[0]: 's3://lakeshard-dev/lakehouse' is one path for every developer"),
    ("the landing volume inside the lakehouse", "databricks.yml",
     _set("targets.prod.variables.landing_location", "s3://lakeshard-prod/lakehouse/landing"),
     "target prod: 's3://lakeshard-prod/lakehouse/landing' lies inside 's3://lakeshard-prod/lakehouse'"),
    ("readers left to a grant in SQL", "bundles/lakeshard.schema.yml",
     lambda d: _prod(d)["resources"]["schemas"]["lakeshard"]["grants"].pop(),
     "target prod: resources.schemas.lakeshard: grants give ${var.readers} no ['SELECT', 'USE_SCHEMA']; bundle grants "
     "replace every other grant"),
    ("producers left to a grant in SQL", "bundles/landing.volume.yml",
     lambda d: _prod(d)["resources"]["volumes"]["landing"]["grants"].pop(),
     "target prod: resources.volumes.landing: grants give ${var.producers} no ['READ_VOLUME', 'WRITE_VOLUME']"),
    ("a materialized view its runner may not create", "bundles/lakeshard.schema.yml",
     _without_privilege("schemas", "lakeshard", "${var.service_principal}", "CREATE_MATERIALIZED_VIEW"),
     "target prod: resources.schemas.lakeshard: the run_as principal ${var.service_principal} lacks "
     "['CREATE_MATERIALIZED_VIEW'], which pipeline downstream needs"),
    ("a managed landing volume", "bundles/landing.volume.yml",
     lambda d: (d["resources"]["volumes"]["landing"].update(volume_type="MANAGED"),
                d["resources"]["volumes"]["landing"].pop("storage_location")),
     "target dev: resources.volumes.landing: a managed volume's files are deleted with it"),
    ("a production schema a destroy may drop", "bundles/lakeshard.schema.yml",
     lambda d: _prod(d)["resources"]["schemas"]["lakeshard"].pop("lifecycle"),
     "target prod: resources.schemas.lakeshard: no lifecycle.prevent_destroy: true"),
    ("a first run whose pipeline finds no table", "bundles/maintenance.job.yml",
     lambda d: _maintenance_register(d)["python_wheel_task"]["parameters"].remove("--create-missing"),
     "target prod: resources.jobs.maintenance.register_tables: pass --create-missing"),
    ("arrivals during a run skipped", "bundles/ingest.job.yml", lambda d: _ingest(d).pop("queue"),
     "target dev: resources.jobs.ingest: a run triggered while max_concurrent_runs (1) runs are active is skipped"),
    ("no CLI version pinned", "databricks.yml", _set("bundle.databricks_cli_version", None),
     "databricks.yml: bundle.databricks_cli_version: pin the oldest CLI that deploys this bundle"),
    ("a CLI pinned below what the bundle uses", "databricks.yml", _set("bundle.databricks_cli_version", ">= 0.267.0"),
     "'>= 0.267.0' admits CLIs without CREATE_MATERIALIZED_VIEW among schema grant privileges (first in v0.287.0"),
    ("a CLI version whose schema is not kept", "databricks.yml", _set("bundle.databricks_cli_version", ">= 0.300.0"),
     "tests/bundles/schema holds no jsonschema-v0.300.0.json"),
    ("a target key the official schema does not know", "databricks.yml", _set("targets.prod.workspace.root_pth", "/x"),
     "target prod (merged): workspace: Additional properties are not allowed ('root_pth' was unexpected)"),
    ("a privilege the official schema does not know", "bundles/landing.volume.yml",
     lambda d: _prod(d)["resources"]["volumes"]["landing"]["grants"][0]["privileges"].append("WRITE_FILES"),
     "target prod (merged): resources.volumes.landing.grants.0.privileges.2: 'WRITE_FILES' is not one of"),
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
