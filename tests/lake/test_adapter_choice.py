"""Which adapter a Spark Connect session gets, and the embedded adapter's refusal of FUSE mounts.

On Databricks (its runtime, databricks-connect, or a ``sc://`` remote to a workspace) ``auto`` means native: the
embedded adapter's delta-rs commits need an atomic put-if-absent that Databricks' FUSE paths (``/Volumes``,
``/dbfs``) lack. Locally a Spark Connect session gets the embedded adapter.
"""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql.types import LongType, StructField, StructType

from lakeshard.config import load_config
from lakeshard.errors import UnsupportedByAdapter
from lakeshard.lake import adapter_choice, choose_adapter
from lakeshard.lake.embedded import EmbeddedTableStore
from lakeshard.runtime import on_databricks


class _ConnectSession:
    """What adapter choice sees of a Spark Connect session: no SparkContext, hence no py4j gateway."""

    @property
    def sparkContext(self) -> Any:
        raise RuntimeError("[JVM_ATTRIBUTE_NOT_SUPPORTED] sparkContext is not supported in Spark Connect")


@pytest.mark.parametrize(("databricks", "expected", "why"), [
    (True, "native", "Spark Connect session on Databricks"),
    (False, "embedded", "Spark Connect session outside Databricks"),
])
def test_auto_on_a_connect_session_is_native_only_on_databricks(databricks: bool, expected: str, why: str) -> None:
    choice = choose_adapter("auto", delta_jvm=False, gateway=False, databricks=databricks)
    assert choice.name == expected and why in choice.reason


@pytest.mark.parametrize(("env", "remote", "expected"), [
    ({"DATABRICKS_RUNTIME_VERSION": "17.3"}, "", True),
    ({}, "sc://adb-1234.5.azuredatabricks.net:443/;token=abc", True),
    ({}, "sc://dbc-a1b2.cloud.databricks.com", True),
    ({}, "sc://127.0.0.1:15002", False),
    ({}, "sc://databricks.com.evil.example:443", False),
    ({}, "", False),
])
def test_on_databricks_by_runtime_or_connect_host(env: dict[str, str], remote: str, expected: bool,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert on_databricks(load_config(overrides={"spark": {"remote": remote}}, env={})) is expected


def test_a_connect_session_to_a_workspace_gets_native_and_a_local_one_embedded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    workspace = load_config(overrides={"spark": {"remote": "sc://adb-1.2.azuredatabricks.net:443"}}, env={})
    local = load_config(overrides={"spark": {"remote": "sc://127.0.0.1:15002"}}, env={})
    assert adapter_choice(_ConnectSession(), workspace).name == "native"  # type: ignore[arg-type]
    assert adapter_choice(_ConnectSession(), local).name == "embedded"  # type: ignore[arg-type]


@pytest.mark.parametrize("location", ["/Volumes/main/lakeshard/lake/events", "/dbfs/mnt/lake/events",
                                      "dbfs:/mnt/lake/events"])
def test_the_embedded_adapter_refuses_fuse_paths_naming_the_native_adapter(location: str) -> None:
    store = EmbeddedTableStore(None)
    schema = StructType([StructField("n", LongType())])
    for attempt in (lambda: store.exists(location), lambda: store.create(location, schema),
                    lambda: store.version(location), lambda: store.files(location)):
        with pytest.raises(UnsupportedByAdapter, match="native adapter") as refused:
            attempt()
        assert "put-if-absent" in str(refused.value)
