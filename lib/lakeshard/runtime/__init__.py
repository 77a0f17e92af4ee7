"""Where lakeshard runs: the Spark session factory and the checks behind ``lakeshard doctor``."""

from __future__ import annotations

from lakeshard.runtime.session import (
    RuntimeKind,
    describe_mode,
    detect_runtime,
    find_java,
    get_spark,
)

__all__ = [
    "RuntimeKind", "describe_mode", "detect_runtime", "find_java", "get_spark",
]
