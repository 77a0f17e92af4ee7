"""What lakeshard gives a session: Delta's jars installed by ``make env`` (``scripts/install-delta-jars.sh`` into
``.delta-jars/``) as ``spark.jars`` with Delta's SQL extension and catalog, without any resolver at session start;
and its session settings (UTC first) on sessions it did not start (Databricks, databricks-connect)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lakeshard.config import load_config
from lakeshard.runtime import (
    DELTA_JARS_ENV,
    DELTA_SQL_CONF,
    LOCAL_LOG_STORE_CLASS,
    LOCAL_LOG_STORE_JAR,
    delta_jars,
    local_spark_conf,
)


def _folder(tmp_path: Path, *names: str) -> Path:
    for name in names:
        (tmp_path / name).write_bytes(b"PK")
    return tmp_path


def test_the_installed_jars_are_found_in_their_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _folder(tmp_path, "delta-storage-4.4.0.jar", "delta-spark_4.2_2.13-4.4.0.jar", "notes.txt")
    monkeypatch.setenv(DELTA_JARS_ENV, str(folder))
    assert delta_jars() == f"{folder / 'delta-spark_4.2_2.13-4.4.0.jar'},{folder / 'delta-storage-4.4.0.jar'}"


@pytest.mark.parametrize("names", [(), ("delta-storage-4.4.0.jar",)])
def test_a_folder_without_delta_spark_gives_no_jars(names: tuple[str, ...], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DELTA_JARS_ENV, str(_folder(tmp_path, *names)))
    assert delta_jars() == ""


def test_the_native_adapter_gets_the_installed_jars_and_deltas_sql_extension(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _folder(tmp_path, "delta-spark_4.2_2.13-4.4.0.jar")
    monkeypatch.setenv(DELTA_JARS_ENV, str(folder))
    native = local_spark_conf(load_config(overrides={"spark": {"adapter": "native"}}, env={}))
    auto = local_spark_conf(load_config(env={}))
    assert native["spark.jars"] == str(folder / "delta-spark_4.2_2.13-4.4.0.jar")
    assert {k: native[k] for k in DELTA_SQL_CONF} == DELTA_SQL_CONF
    assert "spark.jars" not in auto and "spark.sql.extensions" not in auto  # the embedded default stays lean
    assert "spark.delta.logStore.file.impl" not in native  # no log store built: Delta's default


def test_the_log_store_built_beside_deltas_jars_takes_file_tables(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _folder(tmp_path, "delta-spark_4.2_2.13-4.4.0.jar", LOCAL_LOG_STORE_JAR)
    monkeypatch.setenv(DELTA_JARS_ENV, str(folder))
    native = local_spark_conf(load_config(overrides={"spark": {"adapter": "native"}}, env={}))
    assert native["spark.delta.logStore.file.impl"] == LOCAL_LOG_STORE_CLASS
    assert str(folder / LOCAL_LOG_STORE_JAR) in native["spark.jars"].split(",")


class _Conf:
    """A session's runtime settings that refuse some keys, as serverless compute does."""

    def __init__(self, refused: set[str]) -> None:
        self.values = {"spark.sql.session.timeZone": "America/New_York"}
        self.refused = refused

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        if key in self.refused:
            raise RuntimeError(f"[CONFIG_NOT_AVAILABLE] Configuration {key} is not available.")
        self.values[key] = value


class _ListingConf(_Conf):
    """Settings that list what was set in one request (``getAll``, Spark 4), counting the single gets."""

    gets = 0

    @property
    def getAll(self) -> dict[str, str]:
        return dict(self.values)

    def get(self, key: str, default: str | None = None) -> str | None:
        self.gets += 1
        return super().get(key, default)


class _Session:
    def __init__(self, refused: set[str], listing: bool = False) -> None:
        self.conf = (_ListingConf if listing else _Conf)(refused)


@pytest.mark.parametrize("listing", [False, True])
def test_a_session_lakeshard_did_not_start_gets_its_settings_utc_first(listing: bool) -> None:
    from lakeshard.runtime import apply_session_settings, session_sql_conf

    cfg = load_config(env={})
    session = _Session(refused={"spark.sql.execution.arrow.pyspark.enabled"}, listing=listing)
    assert apply_session_settings(session, cfg) is session  # type: ignore[arg-type]
    if listing:  # one request lists the settings made: none is asked for alone (a request each under Connect)
        assert isinstance(session.conf, _ListingConf) and session.conf.gets == 0
    wanted = session_sql_conf(cfg)
    assert session.conf.values["spark.sql.session.timeZone"] == "UTC"
    assert {k: v for k, v in session.conf.values.items() if k in wanted} == {
        k: v for k, v in wanted.items() if k != "spark.sql.execution.arrow.pyspark.enabled"}


def test_a_session_refusing_the_utc_time_zone_is_an_environment_problem() -> None:
    from lakeshard.errors import EnvironmentProblem
    from lakeshard.runtime import apply_session_settings

    with pytest.raises(EnvironmentProblem, match=r"spark\.sql\.session\.timeZone = 'UTC'"):
        apply_session_settings(_Session(refused={"spark.sql.session.timeZone"}), load_config(env={}))  # type: ignore[arg-type]


# Run in a process of its own: the test process's JVM is the shared session's.
_JARS_AFTER_START = """
import sys
from lakeshard.config import load_config
from lakeshard.errors import EnvironmentProblem
from lakeshard.runtime import get_spark

def cfg(jars):
    return load_config(overrides={"spark": {"master": "local[1]", "shuffle_partitions": 1, "adapter": "embedded",
                                            "jars": jars}}, env={})

first = get_spark(cfg(""))
try:
    get_spark(cfg(sys.argv[1]))
except EnvironmentProblem as exc:
    print("refused:", exc)
first.sql("SHOW TABLES").collect()  # the session still works: nobody set a catalog it cannot load
first.stop()
try:  # nor does a new session on the same JVM get them
    get_spark(cfg(sys.argv[1]))
except EnvironmentProblem as exc:
    print("refused after stop:", exc)
get_spark(cfg("")).sql("SHOW TABLES").collect()
print("usable")
"""


def test_deltas_jars_asked_of_a_jvm_already_started_without_them_are_refused_and_the_session_still_works(
        tmp_path: Path) -> None:
    jar = _folder(tmp_path, "delta-spark_4.2_2.13-4.4.0.jar") / "delta-spark_4.2_2.13-4.4.0.jar"
    run = subprocess.run([sys.executable, "-c", _JARS_AFTER_START, str(jar)], capture_output=True, text=True,
                         timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    [refused] = [line for line in run.stdout.splitlines() if line.startswith("refused:")]
    assert "already runs Spark's JVM" in refused and "without Delta's jars" in refused and "new process" in refused
    assert any(line.startswith("refused after stop:") for line in run.stdout.splitlines())
    assert run.stdout.splitlines()[-1] == "usable"


def _fake_java(folder: Path, version_line: str) -> Path:
    java = folder / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(0o755)
    return java


def test_java_is_looked_up_in_java_home_first_and_its_version_checked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lakeshard.errors import EnvironmentProblem
    from lakeshard.jvm.classdata import java_executable
    from lakeshard.runtime import find_java

    new = _fake_java(tmp_path / "new", 'openjdk version "21.0.3" 2024-04-16')
    monkeypatch.setenv("JAVA_HOME", str(new.parent.parent))
    assert java_executable() == new
    assert find_java() == (str(new), 21)

    old = _fake_java(tmp_path / "old", 'java version "1.8.0_392"')
    monkeypatch.setenv("JAVA_HOME", str(old.parent.parent))
    with pytest.raises(EnvironmentProblem, match=r"needs Java 17\+, found Java 8"):
        find_java()

    # A JAVA_HOME without a java in it is not silently replaced by another Java on PATH: the launcher would not.
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "empty"))
    assert java_executable() is None
    with pytest.raises(EnvironmentProblem, match=r"JAVA_HOME=.*empty"):
        find_java()
