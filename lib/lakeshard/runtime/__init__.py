"""Where lakeshard runs: the Spark session factory and the checks behind ``lakeshard doctor``.

The JVM's tuning lives in :mod:`lakeshard.jvm`, the process's threads and memory in :mod:`lakeshard.process`, the
notebooks' parameters in :mod:`lakeshard.notebook`.
"""

from __future__ import annotations

from lakeshard.runtime.environments import (
    TESTED_ENVIRONMENTS,
    EnvironmentVerdict,
    TestedEnvironment,
    tested_environment,
)
from lakeshard.runtime.session import (
    CONNECT_PYTHON,
    DELTA_JARS_ENV,
    DELTA_SQL_CONF,
    LOCAL_LOG_STORE_CLASS,
    LOCAL_LOG_STORE_JAR,
    RuntimeKind,
    apply_session_settings,
    arrow_dataframe,
    connect_server_gone,
    databricks_connect_scope,
    delta_jars,
    delta_jars_folder,
    describe_mode,
    detect_runtime,
    find_java,
    get_spark,
    is_spark_connect,
    local_spark_conf,
    on_databricks,
    on_databricks_cluster,
    runtime_name,
    session_sql_conf,
)

__all__ = [
    "CONNECT_PYTHON",
    "DELTA_JARS_ENV",
    "DELTA_SQL_CONF",
    "LOCAL_LOG_STORE_CLASS",
    "LOCAL_LOG_STORE_JAR",
    "TESTED_ENVIRONMENTS",
    "EnvironmentVerdict",
    "RuntimeKind",
    "TestedEnvironment",
    "apply_session_settings",
    "arrow_dataframe",
    "connect_server_gone",
    "databricks_connect_scope",
    "delta_jars",
    "delta_jars_folder",
    "describe_mode",
    "detect_runtime",
    "find_java",
    "get_spark",
    "is_spark_connect",
    "local_spark_conf",
    "on_databricks",
    "on_databricks_cluster",
    "runtime_name",
    "session_sql_conf",
    "tested_environment",
]
