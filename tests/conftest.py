"""Shared fixtures: one local Spark session for the whole test session, a TableStore over it, and a Spark
Connect server for the tests that ask for one.

Classic and Spark Connect sessions cannot share one Python process (pyspark picks its Column and function
implementations process-wide, and refuses a Connect session beside a classic one), so the tests that run
under Spark Connect run in a pytest subprocess whose ``spark`` fixture is a Connect session: set
``LAKESHARD_TEST_SPARK_REMOTE=sc://host:port`` and ``spark`` connects there (``tests/runtime/test_connect.py``).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

from bench.connect import local_connect_server
from lakeshard.config import LakeshardConfig, load_config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakeshard.lake import TableStore

# No time limit per generated example, and no complaint about slow generation: a test's speed is a benchmark's
# business, and two pytest workers on two cores make an example's time depend on what runs beside it.
settings.register_profile("lakeshard", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("lakeshard")

# Set to a Spark Connect URL, the ``spark`` fixture is a Connect session to that server.
TEST_REMOTE_ENV = "LAKESHARD_TEST_SPARK_REMOTE"
# Set (CI does, in .ci/run), a test that needs Delta's JVM fails where it would otherwise skip.
REQUIRE_DELTA_JVM_ENV = "LAKESHARD_REQUIRE_DELTA_JVM"


# Defaults of every local JVM a test starts (the Spark Connect test server's included), given as system properties
# (:func:`pytest_configure`).
# The ``dbfs:`` scheme served over this machine: ``dbfs:/x`` is the local ``/x``, as on a Databricks runtime, where
# ``dbfs:/Volumes/c/s/v/x`` is the volume's FUSE path ``/Volumes/c/s/v/x``. Hadoop's view file system serves the
# scheme with the local file system as the fallback of an empty mount table; Delta commits to it with its local
# log store (a runtime ships its own for dbfs). And no ``.crc`` file after each Delta commit: on two shared cores
# its computation made a commit of a few rows take seconds; nothing lakeshard does reads it. And Spark evaluates
# expressions without generating and compiling Java for each query plan: on the tests' few hundred rows the
# compiling cost more CPU than it saved (a sample of native, writer and notebook tests: 266 -> 206 s), and the
# results are the same.
TEST_JVM_DEFAULTS = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.databricks.delta.writeChecksumFile.enabled": "false",
    "spark.hadoop.fs.dbfs.impl": "org.apache.hadoop.fs.viewfs.ViewFileSystemOverloadScheme",
    "spark.hadoop.fs.viewfs.overload.scheme.target.dbfs.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "spark.hadoop.fs.viewfs.mounttable.default.linkFallback": "file:///",
    "spark.delta.logStore.dbfs.impl": "io.delta.storage.LocalLogStore",
}

# The temporary folder of the processes the tests start, made per test session (per pytest-xdist worker) and removed
# when it ends.
_CHILD_TMP = pytest.StashKey[Path]()
def pytest_configure(config: pytest.Config) -> None:
    """Give every local JVM a test starts (notebook kernels, the command line, Spark's JVMs, the Spark Connect test
    server) the tests' defaults (:data:`TEST_JVM_DEFAULTS`) and Java's class-data archive of Spark's classes, and
    point those processes at a temporary folder of this session.

    Spark's launcher adds ``SPARK_SUBMIT_OPTS`` to every local JVM it starts: the defaults go there as system
    properties, which Spark reads as it reads ``spark-defaults.conf``. Not in a ``spark-defaults.conf``: the launcher
    puts its configuration folder on the JVM's class path, and Java shares no class data with a process whose class
    path holds a folder with files in it. So the tests run on the virtual environment's pyspark with no Spark
    configuration folder of the machine's, and share the archive ``make env`` made (:mod:`lakeshard.jvm.classdata`;
    made here when missing): it saves each JVM about half of its start (a local session and its first query: 14 s ->
    8 s here).

    Each notebook makes a ``tempfile.mkdtemp`` folder for its local defaults, as it should when a person runs it;
    run by the tests, those folders (14 of them, about 45 MB a ``make test``) would stay in ``/tmp`` for good. This
    process's own temporary folder stays where it was (``tempfile`` read it already), and pytest's ``tmp_path`` too.
    """
    import pyspark

    from lakeshard.jvm.classdata import archive_options, make_archive

    os.environ.pop("SPARK_CONF_DIR", None)
    os.environ["SPARK_HOME"] = str(Path(pyspark.__file__).parent)  # whose configuration folder does not exist
    defaults = [f"-D{k}={v}" for k, v in TEST_JVM_DEFAULTS.items()]
    if not hasattr(config, "workerinput"):  # pytest-xdist's controller (or the only process): before any worker
        make_archive(defaults)
    children = Path(tempfile.mkdtemp(prefix="lakeshard-test-tmp-"))
    os.environ["TMPDIR"] = str(children)
    # Java reads java.io.tmpdir, not TMPDIR: Spark's scratch folders, the native libraries its codecs unpack and the
    # Connect server's artifacts (about 70 MB a run, and a killed JVM cannot remove its own) go there too.
    base = os.environ.setdefault("SPARK_SUBMIT_OPTS_OUTSIDE_TESTS", os.environ.get("SPARK_SUBMIT_OPTS", ""))
    os.environ["SPARK_SUBMIT_OPTS"] = " ".join(
        [base, *defaults, *archive_options(), f"-Djava.io.tmpdir={children}"]).strip()
    config.stash[_CHILD_TMP] = children


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the temporary folder :func:`pytest_configure` made."""
    shutil.rmtree(config.stash[_CHILD_TMP], ignore_errors=True)


def no_delta_jvm() -> None:
    """Skip the calling test because the session has no Delta JVM engine, saying where the jars were looked for
    and how to get them, or fail it when ``$LAKESHARD_REQUIRE_DELTA_JVM`` asks for Delta's engine (CI)."""
    from lakeshard.runtime import delta_jars_folder

    reason = (f"Delta Lake's JVM engine (io.delta.tables.DeltaTable) is not in this Spark session: no delta-spark "
              f"jar in {delta_jars_folder()}. 'make env' resolves it with mvn from Maven Central "
              "(scripts/install-delta-jars.sh); without mvn or network it cannot")
    if os.environ.get(REQUIRE_DELTA_JVM_ENV, "") in ("", "0"):  # a user's machine: say what is missing
        pytest.skip(reason)
    pytest.fail(f"{reason} ({REQUIRE_DELTA_JVM_ENV} is set: Delta's JVM is required here)", pytrace=False)


@pytest.fixture
def delta_jars_installed() -> None:
    """Skip a test that starts Spark with Delta's jars itself (a benchmark's own process) when ``make env`` could
    not install them, saying why; fail it under ``$LAKESHARD_REQUIRE_DELTA_JVM`` (CI). A fixture, not an import
    of this module: every folder's conftest is a module named ``conftest``, so ``from conftest import`` gets
    whichever pytest loaded last."""
    from lakeshard.runtime import delta_jars

    if not delta_jars():
        no_delta_jvm()


@pytest.fixture(scope="session")
def test_config() -> LakeshardConfig:
    """Return a config for tests: two local cores, few partitions, a small driver, the embedded adapter, and the
    Delta jars ``make env`` installed (so the native adapter's tests share the one session)."""
    from lakeshard.runtime import delta_jars

    return load_config(
        overrides={"spark": {"master": "local[2]", "shuffle_partitions": 2, "driver_memory": "2g",
                             "app_name": "lakeshard-tests", "adapter": "embedded",
                             "jars": os.environ.get("LAKESHARD_SPARK_JARS") or delta_jars()}},
    )


@pytest.fixture(scope="session")
def spark(test_config: LakeshardConfig) -> Iterator[SparkSession]:
    """Return the one Spark session shared by every test (started once, stopped at the end): a local classic
    session, or a Spark Connect session to ``$LAKESHARD_TEST_SPARK_REMOTE`` when that is set."""
    from lakeshard.runtime import get_spark

    remote = os.environ.get(TEST_REMOTE_ENV, "")
    cfg = dataclasses.replace(test_config, spark=dataclasses.replace(test_config.spark, remote=remote))
    session = get_spark(cfg)
    yield session
    session.stop()


@pytest.fixture(scope="session", autouse=True)
def _shared_session_first(spark: SparkSession) -> None:
    """Start the shared session before any test runs. A command a test runs in this process (the CLI with the
    Spark dedupe engine) otherwise may launch the process's one JVM first, without Delta's jars, and the shared
    session could not have them (lakeshard refuses: ``runtime.session._local_session``)."""


@pytest.fixture(scope="session")
def store(spark: SparkSession, test_config: LakeshardConfig) -> TableStore:
    """Return the embedded TableStore over the shared session."""
    from lakeshard.lake import open_store

    return open_store(spark, test_config)


@pytest.fixture
def native_store(spark: SparkSession) -> TableStore:
    """Return the native TableStore (Delta's own engine) over the shared session; skipped without Delta's jars
    (failed under ``$LAKESHARD_REQUIRE_DELTA_JVM``)."""
    from lakeshard.lake.native import NativeTableStore
    from lakeshard.lake.native.jvm import has_delta_jvm
    from lakeshard.runtime import DELTA_SQL_CONF, is_spark_connect

    if is_spark_connect(spark):  # no py4j to ask: the server says whether it runs Delta's SQL extension
        extension = DELTA_SQL_CONF["spark.sql.extensions"]
        if extension not in (spark.conf.get("spark.sql.extensions", "") or ""):
            no_delta_jvm()
    elif not has_delta_jvm(spark):
        no_delta_jvm()
    return NativeTableStore(spark)


@pytest.fixture(scope="session")
def connect_server() -> Iterator[str]:
    """Return the ``sc://`` URL of a local Spark Connect server, one per test session, started by the first
    test that asks for it (in its own process, ``scripts/connect_server.py``) and stopped at the end."""
    with local_connect_server() as server:
        yield server.url


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Return the list that gets, per data file read with a filter, the rows of the row groups its statistics let
    through (:func:`lakeshard.lake.protocol.rowgroups.matching_row_groups`): what a pruned read decodes."""
    from lakeshard.lake.protocol import rowgroups

    counts: list[int] = []
    real = rowgroups.matching_row_groups

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        kept = real(*args, **kwargs)
        counts.append(sum(g.num_rows for g in kept.row_groups))
        return kept

    monkeypatch.setattr(rowgroups, "matching_row_groups", counted)
    return counts


@pytest.fixture(scope="session")
def demo_lakehouse(spark: SparkSession, store: TableStore, test_config: LakeshardConfig,
                   tmp_path_factory: pytest.TempPathFactory) -> LakeshardConfig:
    """Return the config of a small demo lakehouse (300 events of 4 tenants, routed, written, buckets closed),
    built once by the real pipeline on the shared session."""
    from lakeshard.app.demo import run_demo
    from lakeshard.synth import SynthSpec

    root = tmp_path_factory.mktemp("demo-lakehouse")
    cfg = dataclasses.replace(test_config, lakehouse=str(root / "lakehouse"), landing=str(root / "landing"))
    report = run_demo(spark, store, cfg, SynthSpec(events=300, tenants=4, hours=0.5, seed=3), out=root / "out",
                      say=lambda _: None, progress=False)
    assert report.ok, report.render()
    return cfg
