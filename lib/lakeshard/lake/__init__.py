"""Table I/O: the ``TableStore`` port and its adapters (DESIGN.md §1).

Nothing outside this package imports ``deltalake`` or ``delta`` directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakeshard.config import LakeshardConfig, load_config
from lakeshard.errors import EnvironmentProblem
from lakeshard.lake.store import (
    BYTES_ADDED,
    ROWS_ADDED,
    AppTransaction,
    BeforeCommit,
    CommitInfo,
    CommitResult,
    FileChange,
    FileInfo,
    LogEntry,
    TableStore,
    VacuumReport,
    WriteFiles,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "BYTES_ADDED",
    "ROWS_ADDED",
    "AppTransaction",
    "BeforeCommit",
    "CommitInfo",
    "CommitResult",
    "FileChange",
    "FileInfo",
    "LogEntry",
    "TableStore",
    "VacuumReport",
    "WriteFiles",
    "adapter_name",
    "open_store",
]


def adapter_name(spark: SparkSession, cfg: LakeshardConfig | None = None) -> str:
    """Return which adapter :func:`open_store` picks: ``"embedded"`` (delta-rs) or ``"native"`` (Delta JVM)."""
    from lakeshard.runtime import has_delta_jvm

    cfg = cfg or load_config()
    if cfg.spark.adapter != "auto":
        return cfg.spark.adapter
    return "native" if has_delta_jvm(spark) else "embedded"


def open_store(spark: SparkSession, cfg: LakeshardConfig | None = None) -> TableStore:
    """Return the TableStore for this session: native when Delta's JVM classes load, else embedded.

    The native adapter is not written yet (see docs/decisions.md); a session with Delta's JVM
    classes uses the embedded adapter unless ``spark.adapter = "native"`` is forced, which raises.
    """
    from lakeshard.lake.embedded import EmbeddedTableStore

    cfg = cfg or load_config()
    if cfg.spark.adapter == "native":
        raise EnvironmentProblem(
            "spark.adapter = 'native' was asked for, but the native (Delta JVM) adapter is not implemented "
            "yet; use 'auto' or 'embedded' (delta-rs commits, which Databricks and delta-spark read)"
        )
    return EmbeddedTableStore(spark)
