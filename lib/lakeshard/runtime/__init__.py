"""Where lakeshard runs: the Spark session factory and the checks behind ``lakeshard doctor``."""

from __future__ import annotations

from lakeshard.runtime.session import (
    CONNECT_PYTHON,
    RuntimeKind,
    arrow_dataframe,
    databricks_connect_scope,
    describe_mode,
    detect_runtime,
    find_java,
    get_spark,
    is_spark_connect,
    local_spark_conf,
    on_databricks,
    runtime_name,
    session_sql_conf,
)

__all__ = [
    "CONNECT_PYTHON", "RuntimeKind", "arrow_dataframe", "databricks_connect_scope", "describe_mode", "detect_runtime",
    "find_java", "get_spark", "is_spark_connect", "local_spark_conf", "on_databricks", "runtime_name",
    "session_sql_conf",
]
