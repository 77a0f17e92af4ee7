"""Java's class-data archive of Spark's classes (``lakeshard.jvm.classdata``): the JVMs lakeshard starts map it,
and a JVM it does not fit, or a machine where it cannot be made, goes on without it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lakeshard.jvm import classdata

# A local session started by lakeshard (get_spark), Java logging where each class came from.
_START = """
import sys
from lakeshard.config import load_config
from lakeshard.runtime import get_spark
spark = get_spark(load_config(overrides={"spark": {"master": "local[1]"}}, env={}))
spark.range(3).count()
jvm = spark.sparkContext._gateway.proc
spark.stop()
jvm.stdin.close()
jvm.wait()
"""


@pytest.mark.slow
def test_a_local_session_lakeshard_starts_loads_sparks_classes_from_the_archive(tmp_path: Path) -> None:
    archive = classdata.archive_path()
    assert archive is not None, "no class-data archive: make env (or this test session's start) makes one"
    log = tmp_path / "classes.log"
    # The tests' JVM options (the archive among them) are left out: only what lakeshard itself passes counts here.
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"-Xlog:class+load=info:file={log}"}
    done = subprocess.run([sys.executable, "-c", _START], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    spark_classes = [line for line in log.read_text().splitlines() if " org.apache.spark." in line]
    shared = [line for line in spark_classes if "shared objects file (top)" in line]
    assert len(spark_classes) > 1000, len(spark_classes)
    # About 60% here; none where the archive is not mapped (the rest: classes the archive run never loaded).
    assert len(shared) > 0.5 * len(spark_classes), (len(shared), len(spark_classes), spark_classes[:5])


def test_a_jvm_with_another_configuration_folder_gets_no_archive(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # Spark's launcher puts the configuration folder on the class path: an archive written without it does not fit.
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert classdata.archive_path() is None
    assert classdata.archive_options() == []


def test_without_a_folder_to_write_there_is_no_archive_and_no_error(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setattr(classdata, "_FOLDERS", (blocked, blocked / "below"))
    assert classdata.make_archive(timeout_s=5) is None
    assert classdata.archive_options() == []
