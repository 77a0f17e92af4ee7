"""``describe_mode`` and ``lakeshard doctor`` say which of the three modes lakeshard runs in."""

from __future__ import annotations

import importlib.util

import pytest

from lakeshard.app.cli import main
from lakeshard.config import load_config
from lakeshard.runtime import databricks_connect_scope, describe_mode


def _connect_installed() -> bool:
    try:
        return importlib.util.find_spec("databricks.connect") is not None
    except ModuleNotFoundError:
        return False


def test_local_mode_names_the_embedded_lakehouse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    cfg = load_config(overrides={"spark": {"master": "local[2]"}}, env={})
    assert describe_mode(cfg) == ("local embedded lakehouse (Spark local[2] in a local JVM, Delta commits by "
                                  "delta-rs)")


def test_on_a_cluster_the_runtime_version_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "17.3")
    cfg = load_config(overrides={"spark": {"databricks_connect": True}}, env={})  # the cluster wins
    assert describe_mode(cfg) == "Databricks runtime 17.3 (the cluster's Spark session)"


@pytest.mark.parametrize(("env", "target"), [
    ({"DATABRICKS_CONFIG_PROFILE": "staging"}, "profile staging"),
    ({"DATABRICKS_HOST": "https://adb-1.azuredatabricks.net"}, "https://adb-1.azuredatabricks.net"),
    ({}, "the DEFAULT profile of ~/.databrickscfg"),
])
def test_databricks_connect_names_the_workspace_and_whether_it_is_installed(
    env: dict[str, str], target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("DATABRICKS_RUNTIME_VERSION", "DATABRICKS_CONFIG_PROFILE", "DATABRICKS_HOST"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    mode = describe_mode(load_config(overrides={"spark": {"databricks_connect": True}}, env={}))
    assert mode.startswith(f"databricks-connect to {target} (Spark runs on the remote cluster)")
    assert mode.endswith("PROBLEM: databricks-connect is not installed in this environment") != _connect_installed()


@pytest.mark.skipif(_connect_installed(), reason="databricks-connect is installed here: doctor would reach a workspace")
def test_doctor_in_connect_mode_without_the_package_reports_it_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    monkeypatch.setenv("LAKESHARD_SPARK_DATABRICKS_CONNECT", "true")
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line for line in out}
    assert "databricks-connect to" in rows["mode"] and "java" not in rows
    assert "PROBLEM: spark.databricks_connect is set but databricks-connect is not installed" in rows["spark"]
    assert out[-1] == "problems found (see above)"


def test_the_connect_scope_names_what_runs_remotely_and_the_python_it_needs() -> None:
    scope = dict(databricks_connect_scope((3, 12)))
    assert "queries by table name" in scope["connect can run"]
    assert "py4j" in scope["connect cannot run"] and "/Volumes path is not mounted" in scope["connect cannot run"]
    assert "connect python" not in scope
    problem = dict(databricks_connect_scope((3, 11)))["connect python"]
    assert problem.startswith("PROBLEM: databricks-connect 17 needs Python 3.12, this is 3.11")
    assert '".[databricks]"' in problem


@pytest.mark.skipif(_connect_installed(), reason="databricks-connect is installed here: doctor would reach a workspace")
def test_doctor_in_connect_mode_says_what_the_session_can_and_cannot_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    monkeypatch.setenv("LAKESHARD_SPARK_DATABRICKS_CONNECT", "true")
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    for topic, answer in databricks_connect_scope():
        assert topic in out and answer in out
    assert "databricks-connect is not installed; install it in a Python 3.12 virtual environment" in out
