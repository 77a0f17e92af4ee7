"""Delta's jars installed by ``make env`` (``scripts/install-delta-jars.sh`` into ``.delta-jars/``) reach a local
session as ``spark.jars`` with Delta's SQL extension and catalog, without any resolver at session start."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakeshard.config import load_config
from lakeshard.runtime import DELTA_JARS_ENV, DELTA_SQL_CONF, delta_jars, local_spark_conf


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
