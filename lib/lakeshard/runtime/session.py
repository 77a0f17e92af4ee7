"""Return the right Spark session for where the code runs: Databricks, databricks-connect, or local JVM."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from collections.abc import Callable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from lakeshard.config import LakeshardConfig, load_config
from lakeshard.errors import EnvironmentProblem, ServerUnresponsive
from lakeshard.jvm import archive_options, java_executable, quick_replies

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "CONNECT_PYTHON", "DATABRICKS_DOMAINS", "DELTA_JARS_ENV", "DELTA_SQL_CONF", "LOCAL_LOG_STORE_CLASS",
    "LOCAL_LOG_STORE_JAR", "RuntimeKind",
    "apply_session_settings", "arrow_dataframe", "databricks_connect_scope", "delta_jars", "delta_jars_folder",
    "describe_mode", "detect_runtime", "find_java", "get_spark", "is_spark_connect", "local_spark_conf",
    "on_databricks", "runtime_name", "session_sql_conf",
]

MIN_JAVA = 17
# databricks-connect 17.x (serverless environment 4, Databricks Runtime 17.3) installs on Python 3.12 only.
CONNECT_PYTHON = (3, 12)
_CONNECT_INSTALL = ("a Python 3.12 virtual environment of its own with 'pip install \".[databricks]\"' "
                    "(without the local extra: databricks-connect replaces pyspark)")


class RuntimeKind(StrEnum):
    """Where the Spark session comes from."""

    DATABRICKS = "databricks"  # code runs on a Databricks cluster: use its active session
    DATABRICKS_CONNECT = "databricks-connect"  # a laptop driving a remote cluster
    SPARK_CONNECT = "spark-connect"  # spark.remote: pyspark's local Spark Connect server, or sc://host:port
    LOCAL = "local"  # a local JVM started by PySpark


def on_databricks_cluster() -> bool:
    """Return whether this process runs on a Databricks cluster (its runtime sets ``DATABRICKS_RUNTIME_VERSION``):
    the driver's Python, shared with the runtime, not a process of lakeshard's own."""
    return bool(os.environ.get("DATABRICKS_RUNTIME_VERSION"))


def detect_runtime(cfg: LakeshardConfig | None = None) -> RuntimeKind:
    """Return which kind of session :func:`get_spark` would give under ``cfg`` and the environment."""
    cfg = cfg or load_config()
    if on_databricks_cluster():
        return RuntimeKind.DATABRICKS
    if cfg.spark.databricks_connect:
        return RuntimeKind.DATABRICKS_CONNECT
    if cfg.spark.remote:
        return RuntimeKind.SPARK_CONNECT
    return RuntimeKind.LOCAL


# Hosts of Databricks workspaces (AWS, Azure, GCP): a Spark Connect server there is Databricks compute.
DATABRICKS_DOMAINS = (".cloud.databricks.com", ".azuredatabricks.net", ".gcp.databricks.com", ".databricks.com")


def on_databricks(cfg: LakeshardConfig | None = None) -> bool:
    """Return whether Spark runs on Databricks compute: its runtime (``DATABRICKS_RUNTIME_VERSION``),
    databricks-connect (``spark.databricks_connect``), or a ``sc://`` remote whose host is a Databricks workspace."""
    cfg = cfg or load_config()
    if on_databricks_cluster() or cfg.spark.databricks_connect:
        return True
    if not cfg.spark.remote.startswith("sc://"):
        return False
    host = urlparse("http://" + cfg.spark.remote.removeprefix("sc://").split(";")[0].split("/")[0]).hostname or ""
    return host.endswith(DATABRICKS_DOMAINS)


def describe_mode(cfg: LakeshardConfig | None = None) -> str:
    """Return one line saying where lakeshard runs: local embedded lakehouse, Databricks runtime, or databricks-connect.

    For databricks-connect it names the workspace the session would reach (``DATABRICKS_CONFIG_PROFILE``,
    else ``DATABRICKS_HOST``, else the DEFAULT profile of ``~/.databrickscfg``) and whether the package is there.
    """
    import importlib.util

    cfg = cfg or load_config()
    kind = detect_runtime(cfg)
    if kind is RuntimeKind.DATABRICKS:
        return f"Databricks runtime {os.environ['DATABRICKS_RUNTIME_VERSION']} (the cluster's Spark session)"
    if kind is RuntimeKind.DATABRICKS_CONNECT:
        profile, host = os.environ.get("DATABRICKS_CONFIG_PROFILE"), os.environ.get("DATABRICKS_HOST")
        target = f"profile {profile}" if profile else host or "the DEFAULT profile of ~/.databrickscfg"
        try:
            installed = importlib.util.find_spec("databricks.connect") is not None
        except ModuleNotFoundError:  # no ``databricks`` namespace package at all
            installed = False
        missing = "" if installed else " - PROBLEM: databricks-connect is not installed in this environment"
        return f"databricks-connect to {target} (Spark runs on the remote cluster){missing}"
    if kind is RuntimeKind.SPARK_CONNECT:
        remote = cfg.spark.remote
        if remote.startswith("local"):
            return (f"Spark Connect to a local server (Spark {remote} started in this process, reached over Spark "
                    "Connect on port 15002)")
        return f"Spark Connect to {remote} (Spark runs on that server)"
    return f"local embedded lakehouse (Spark {cfg.spark.master} in a local JVM, Delta commits by delta-rs)"


def databricks_connect_scope(python: tuple[int, int] | None = None) -> list[tuple[str, str]]:
    """Return (topic, answer) rows saying what a databricks-connect session can and cannot run from this process.

    A databricks-connect session is Spark Connect to remote compute: everything expressed as DataFrames and SQL
    runs there, but this process has no py4j and does not see the remote storage's files. ``python`` is the
    interpreter's (major, minor) (default: this one); databricks-connect 17 needs :data:`CONNECT_PYTHON`.
    """
    major, minor = python or sys.version_info[:2]
    wanted = ".".join(map(str, CONNECT_PYTHON))
    rows = [
        ("connect can run", "reads of lakeshard tables and queries by table name, the pipeline graph, "
                            "register_tables, and every flow on the native adapter's public Delta APIs "
                            "(reads, appends with app transactions, whole-bucket swaps)"),
        ("connect cannot run", "embedded (delta-rs) commits without direct access to the lakehouse storage "
                               "from this machine (a /Volumes path is not mounted here), Delta operations that "
                               "need py4j (the native adapter's shard-writer commits, the closing fence and "
                               "partial swaps: a job on a classic cluster runs them), local Spark settings "
                               "(spark.jars, master), and the downstream Lakeflow pipeline (a pipeline update "
                               "on Databricks runs it)"),
    ]
    if (major, minor) < CONNECT_PYTHON:
        rows.append(("connect python", f"PROBLEM: databricks-connect 17 needs Python {wanted}, this is "
                                       f"{major}.{minor}; use {_CONNECT_INSTALL}"))
    return rows


def find_java() -> tuple[str, int]:
    """Return the ``java`` executable PySpark will use and its major version.

    Raises:
        EnvironmentProblem: no Java, or one older than 17, with what to do about it.
    """
    found = java_executable()
    if found is None:
        java_home = os.environ.get("JAVA_HOME")
        raise EnvironmentProblem(
            f"Java {MIN_JAVA}+ is needed to run Spark locally and none was found "
            f"(JAVA_HOME={java_home or 'unset'}, no 'java' on PATH). Install it, e.g. "
            "'sudo apt-get install -y openjdk-17-jre-headless', or run 'make demo' as root to have it installed."
        )
    java = str(found)
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentProblem(f"cannot run {java} -version: {exc}") from None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        raise EnvironmentProblem(f"cannot tell the version of {java}: {out.stderr.strip()[:200]}")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8" style
        major = int(match.group(2))
    if major < MIN_JAVA:
        raise EnvironmentProblem(
            f"Spark 4 needs Java {MIN_JAVA}+, found Java {major} at {java}; install openjdk-17 and set JAVA_HOME"
        )
    return java, major


# A folder of Delta's jars to use in place of the project's ``.delta-jars/`` (scripts/install-delta-jars.sh).
DELTA_JARS_ENV = "LAKESHARD_DELTA_JARS"

# Delta's SQL extension and catalog: what a session started with delta-spark's jars needs to run Delta's commands.
DELTA_SQL_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


# Delta's log store for ``file:`` tables that lakeshard builds beside Delta's jars (scripts/install-delta-jars.sh from
# scripts/delta-jars/src): a commit file is hard-linked into place, which fails if another process's commit took the
# version. Delta's default for ``file:`` checks and renames, one step only within one JVM (docs/lake.md).
LOCAL_LOG_STORE_JAR = "lakeshard-delta-logstore.jar"
LOCAL_LOG_STORE_CLASS = "io.lakeshard.delta.LinkingLocalLogStore"


def delta_jars_folder() -> Path:
    """Return where Delta's jars are installed: ``$LAKESHARD_DELTA_JARS``, else ``.delta-jars/`` at the root of the
    source tree lakeshard runs from (where ``make env`` resolves them with ``mvn``)."""
    configured = os.environ.get(DELTA_JARS_ENV, "")
    return Path(configured) if configured else Path(__file__).resolve().parents[3] / ".delta-jars"


def delta_jars() -> str:
    """Return Delta's installed jars as a ``spark.jars`` value (comma-separated paths), or ``""`` when none are
    installed or the folder holds no delta-spark jar (an interrupted or failed install)."""
    folder = delta_jars_folder()
    jars = sorted(folder.glob("*.jar")) if folder.is_dir() else []
    if not any(j.name.startswith("delta-spark") for j in jars):
        return ""
    return ",".join(str(j) for j in jars)


def session_sql_conf(cfg: LakeshardConfig) -> dict[str, str]:
    """Return the runtime SQL settings lakeshard's results depend on (UTC, Parquet timestamps, Arrow, partitions).

    They are session settings, so a Spark Connect client sets them on a server it did not start, too.
    """
    return {
        "spark.sql.shuffle.partitions": str(cfg.spark.shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
        "spark.sql.parquet.int96RebaseModeInWrite": "CORRECTED",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.adaptive.enabled": "true",
    }


# Without these lakeshard's results are wrong, not just slower: hour buckets come from ``date_format`` in the
# session time zone.
_REQUIRED_SESSION_SETTINGS = ("spark.sql.session.timeZone",)


def apply_session_settings(spark: SparkSession, cfg: LakeshardConfig) -> SparkSession:
    """Set :func:`session_sql_conf` on a session lakeshard did not start (a Databricks cluster's, a
    databricks-connect one) and return it.

    A setting the compute refuses (serverless allows only some) is left as it is, except the ones the results
    depend on (the UTC time zone).

    Raises:
        EnvironmentProblem: the session refuses a setting lakeshard's results depend on.
    """
    try:  # one request for every setting made (under Spark Connect each get was a request of its own)
        made: dict[str, str] | None = dict(spark.conf.getAll)
    except Exception:  # a compute that does not list its settings: each is asked for
        made = None
    for key, value in session_sql_conf(cfg).items():
        try:
            if (made.get(key) if made is not None else spark.conf.get(key, None)) != value:
                spark.conf.set(key, value)
        except Exception as exc:
            if key in _REQUIRED_SESSION_SETTINGS:
                raise EnvironmentProblem(
                    f"the Spark session refused {key} = {value!r}, which lakeshard needs (event hours are computed "
                    f"in the session time zone): {str(exc).splitlines()[0][:200]}"
                ) from None
    return spark


def local_spark_conf(cfg: LakeshardConfig) -> dict[str, str]:
    """Return the Spark settings of a local session (classic or the local Spark Connect server) under ``cfg``.

    Tuned for a small machine: UI off, few shuffle partitions, driver memory from the config, loopback only,
    the JVM in UTC with lakeshard's log4j configuration at ``spark.log_level``, plus :func:`session_sql_conf`.
    Also sets the environment a local session's Python workers need (``PYSPARK_PYTHON``, ``SPARK_LOCAL_IP``).
    """
    # Executors' Python workers must be the interpreter that has lakeshard installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # A local session talks to itself only: bind to loopback (and skip the hostname lookup warning).
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log4j = Path(__file__).with_name("log4j2.properties")
    # The level reaches log4j as a system property its configuration reads, so no JVM call is needed after start.
    # The class-data archive ``make env`` made (lakeshard.jvm.classdata) saves about a third of the JVM's start.
    java_options = " ".join([f"-Duser.timezone=UTC -Dlog4j2.configurationFile={log4j.as_uri()}",
                             f"-Dlakeshard.log.level={cfg.spark.log_level.lower()}", *archive_options()])
    sc = cfg.spark
    conf = {
        "spark.app.name": sc.app_name,
        "spark.driver.memory": sc.driver_memory,
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.default.parallelism": str(max(2, sc.shuffle_partitions)),
        "spark.driver.extraJavaOptions": java_options,
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
        # Data files are committed by the Delta log, not by marker files or checksums beside them.
        "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
        "spark.hadoop.parquet.enable.summary-metadata": "false",
        "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
        "spark.hadoop.fs.file.impl.disable.cache": "true",
        **session_sql_conf(cfg),
    }
    # The native adapter forced without jars configured gets the installed ones; "auto" keeps the embedded default
    # on a local session unless jars are configured.
    jars = sc.jars or (delta_jars() if sc.adapter == "native" else "")
    if jars:
        conf["spark.jars"] = jars
        names = [Path(j.strip()).name for j in jars.split(",")]
        if any(name.startswith("delta-spark") for name in names):
            conf.update(DELTA_SQL_CONF)
            # Delta rebuilds a table's state after each commit in a Spark job of 50 partitions by default, sized
            # for clusters: on a few local cores those tasks made a commit of a few rows take seconds.
            conf["spark.databricks.delta.snapshotPartitions"] = str(sc.shuffle_partitions)
            if LOCAL_LOG_STORE_JAR in names:
                conf["spark.delta.logStore.file.impl"] = LOCAL_LOG_STORE_CLASS
    return conf


def _options(conf: Mapping[str, str]) -> dict[str, bool | float | int | str | None]:
    """Return ``conf`` typed as ``SparkSession.Builder.config(map=...)`` takes it."""
    return dict(conf)


def _jvm_without_delta() -> bool:
    """Return whether this process already launched Spark's JVM and that JVM cannot load Delta's catalog.

    pyspark launches one JVM per process and keeps it across ``spark.stop()``; jars join its class path only at
    launch. The class is looked up the way Spark loads a catalog plugin (the context class loader). The one py4j
    call outside :mod:`lakeshard.lake.native.jvm` (tests/test_jvm_internals.py allows it): it runs only where a
    local classic session starts, never under Spark Connect.
    """
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    return jvm is not None and not jvm.org.apache.spark.util.Utils.classIsLoadable(
        DELTA_SQL_CONF["spark.sql.catalog.spark_catalog"])


def _local_session(cfg: LakeshardConfig) -> SparkSession:
    """Return the local session under ``cfg``: the one running in this process, else one started on its JVM.

    Raises:
        EnvironmentProblem: ``cfg`` asks for Delta's jars and this process launched Spark's JVM without them.
            Setting Delta's catalog on that JVM's session would break every later query of the session ("Cannot
            find catalog plugin class").
    """
    find_java()
    from pyspark.sql import SparkSession

    conf = local_spark_conf(cfg)
    if "spark.sql.extensions" in conf and _jvm_without_delta():
        raise EnvironmentProblem(
            "this process already runs Spark's JVM, started without Delta's jars; jars join a JVM only when it "
            "starts, and pyspark keeps one JVM per process (spark.stop() does not end it): run lakeshard with "
            f"Delta's jars in a new process, or start this process's first session with them "
            f"(spark.jars = {conf['spark.jars']!r})"
        )
    return SparkSession.builder.master(cfg.spark.master).config(map=_options(conf)).getOrCreate()


def _connect_session(cfg: LakeshardConfig) -> SparkSession:
    remote = cfg.spark.remote
    try:
        import pyspark.sql.connect.session  # noqa: F401 (its import checks the client's dependencies)
    except ImportError as exc:
        raise EnvironmentProblem(
            f"spark.remote = {remote!r} needs the Spark Connect client's dependencies (grpcio, grpcio-status, "
            f"googleapis-common-protos, zstandard): install 'pyspark[connect]' (make test does): {exc}"
        ) from None
    from pyspark.sql import SparkSession

    if remote.startswith("local"):
        find_java()
        # pyspark starts a regular Spark driver in this process with the Connect server plugin (port 15002)
        # and hands back a Connect client session to it; the launch settings configure that driver.
        conf = local_spark_conf(cfg)
    else:
        conf = session_sql_conf(cfg)
        _probe(remote)
    with warnings.catch_warnings():
        # pyspark also replays the launch settings on the Connect session, where each one that is not a session
        # setting warns "Failed to set ..."; the server was started with them, so the warnings say nothing.
        warnings.filterwarnings("ignore", message="Failed to set", category=UserWarning)
        bounded = not remote.startswith("local") and not on_databricks(cfg)
        if bounded:  # the session first (no request yet), its retries bounded, then the settings sent to it
            _bound_retries(SparkSession.builder.remote(remote).getOrCreate())
        spark = SparkSession.builder.remote(remote).config(map=_options(conf)).getOrCreate()
    if bounded:  # the retries given up say so in the error lakeshard reports (connect_server_gone)
        warnings.filterwarnings("ignore", message=r"\[RETRIES_EXCEEDED\]", category=UserWarning)
    return spark


# A request to a Spark Connect server that takes no connections is retried for about this long, then fails
# (pyspark's own policy retries for at least ten minutes, for Databricks compute that may be starting; a server of
# one's own that refuses connections for a minute is gone).
_GONE_AFTER_S = 60


def _bound_retries(spark: SparkSession) -> None:
    """Make the requests of the Connect session ``spark`` give up after about :data:`_GONE_AFTER_S` of retries; once
    one has, the server counts as gone for the rest of the process: later requests (the run's failure event, the
    session's stop) fail at once instead of each retrying for another minute."""
    from pyspark.sql.connect.client.retries import DefaultPolicy, RetryPolicyState

    class GivesUpOnce(DefaultPolicy):
        gone = False

        def can_retry(self, exception: BaseException) -> bool:
            return not self.gone and bool(super().can_retry(exception))

        def to_state(self) -> RetryPolicyState:
            return Attempts(self)

    class Attempts(RetryPolicyState):
        def next_attempt(self, exception: BaseException | None = None) -> int | None:
            wait = super().next_attempt(exception)
            if wait is None:
                policy.gone = True
            return wait

    # Waits of 0.25, 0.5, 1 ... 8 s, then 10 s: about a minute over 10 retries.
    policy = GivesUpOnce(max_retries=10, backoff_multiplier=2.0, initial_backoff=250, max_backoff=10_000)
    spark.client.set_retry_policies([policy])


def connect_server_gone(exc: BaseException) -> str | None:
    """Return one line saying the Spark Connect server stopped taking connections when ``exc`` (or an error behind
    it) is a request that failed so (gRPC's ``UNAVAILABLE``, its retries spent); None for any other error."""
    seen: BaseException | None = exc
    while seen is not None:
        code = getattr(seen, "code", None)
        status = _quietly(code) if callable(code) else None
        if getattr(status, "name", "") == "UNAVAILABLE":
            details = getattr(seen, "details", None)
            said = str(_quietly(details) if callable(details) else "").split(";")[0]
            return (f"the Spark Connect server stopped answering ({said or 'UNAVAILABLE'}); a Delta commit is all "
                    "or nothing, so what this run wrote is committed whole or not at all: run again once the server "
                    "is back and every batch is finished exactly once")
        seen = seen.__cause__ or seen.__context__
    return None


def _quietly(call: Callable[[], object]) -> object:
    try:
        return call()
    except Exception:
        return None


_PROBE_WAIT_S = 10.0  # how long a Spark Connect server may take to accept a connection before a run starts


def _probe(remote: str) -> None:
    """Return once the Spark Connect server of ``remote`` (``sc://host[:port][/;params]``) accepts a connection.

    Raises:
        ServerUnresponsive: nothing accepted one within :data:`_PROBE_WAIT_S` (pyspark's client would otherwise retry
            for at least ten minutes before its first request failed, saying nothing meanwhile).
    """
    import socket

    address = remote.removeprefix("sc://").split("/")[0].split(";")[0]
    parsed = urlparse(f"//{address}")
    host, port = parsed.hostname or "localhost", parsed.port or 15002
    try:
        socket.create_connection((host, port), timeout=_PROBE_WAIT_S).close()
    except OSError as exc:
        # The address alone is named: spark.remote may carry a token.
        raise ServerUnresponsive(f"the Spark Connect server {host}:{port} (spark.remote) takes no connections "
                                 f"({exc.strerror or exc}): start it, or point spark.remote (LAKESHARD_SPARK_REMOTE) "
                                 "at one that runs; nothing was read or written") from None


def is_spark_connect(spark: object) -> bool:
    """Return whether ``spark`` is a Spark Connect session (pyspark's or databricks-connect's), not a classic one."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def arrow_dataframe(spark: SparkSession, table: pa.Table) -> DataFrame:
    """Return ``table`` as a Spark DataFrame of the same rows and columns.

    An empty table is handed over as an empty list with the Spark schema of its Arrow schema: pyspark's
    conversion of a table with no chunk and a timestamp column raises ``ArrowInvalid`` ("cannot construct
    ChunkedArray from empty vector"), and Spark Connect cannot infer a schema from an empty table at all.
    """
    if table.num_rows:
        return spark.createDataFrame(table)
    from pyspark.sql.pandas.types import from_arrow_schema

    return spark.createDataFrame([], from_arrow_schema(table.schema))


def runtime_name(spark: object) -> str:
    """Return the name of the session's runtime for reports: ``"Spark Connect"`` or ``"classic"`` (py4j driver)."""
    return "Spark Connect" if is_spark_connect(spark) else "classic"


def get_spark(cfg: LakeshardConfig | None = None) -> SparkSession:
    """Return the Spark session for this environment, starting one only when there is none to reuse.

    On a Databricks cluster this is the cluster's active session; with ``spark.databricks_connect``
    set it is a databricks-connect session (``databricks-connect`` must be installed in place of
    ``pyspark``); with ``spark.remote`` a Spark Connect session (``local[N]``: the server pyspark ships,
    started in this process; ``sc://host:port``: a running server, given lakeshard's session settings);
    otherwise a local JVM session tuned for a small machine (:func:`local_spark_conf`).

    Example::

        spark = get_spark(load_config(overrides={"spark": {"master": "local[2]"}}))

    Raises:
        EnvironmentProblem: Java or databricks-connect is missing, with how to fix it.
    """
    cfg = cfg or load_config()
    kind = detect_runtime(cfg)
    if kind is RuntimeKind.DATABRICKS:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        return _quick(apply_session_settings(active if active is not None else SparkSession.builder.getOrCreate(),
                                             cfg))
    if kind is RuntimeKind.SPARK_CONNECT:
        return _connect_session(cfg)
    if kind is RuntimeKind.DATABRICKS_CONNECT:
        try:
            from databricks.connect import DatabricksSession
        except ImportError:
            raise EnvironmentProblem(
                f"spark.databricks_connect is set but databricks-connect is not installed; install it in "
                f"{_CONNECT_INSTALL} (docs/databricks.md, 'The laptop path')"
            ) from None
        return apply_session_settings(DatabricksSession.builder.getOrCreate(), cfg)
    return _quick(_local_session(cfg))


def _quick(spark: SparkSession) -> SparkSession:
    """Return a classic session with its py4j replies free of Nagle's delay on this thread (lakeshard.jvm.replies)."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is not None:
        quick_replies(jvm)
    return spark
