"""Table I/O: the ``TableStore`` port and its adapters (DESIGN.md §1).

Nothing outside this package imports ``deltalake`` or ``delta`` directly.
"""

from __future__ import annotations

from dataclasses import dataclass
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
    "AdapterChoice",
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
    "adapter_choice",
    "adapter_name",
    "choose_adapter",
    "open_lazy_store",
    "open_store",
]


@dataclass(frozen=True)
class AdapterChoice:
    """Which TableStore adapter a session gets, and why (``lakeshard doctor`` prints both)."""

    name: str  # "embedded" or "native"
    reason: str


_DELTA_CLASS = "io.delta.tables.DeltaTable"


def choose_adapter(setting: str, *, delta_jvm: bool, gateway: bool = True, databricks: bool = False) -> AdapterChoice:
    """Return the adapter for the ``spark.adapter`` setting given what the session has.

    ``delta_jvm``: Delta's JVM classes load in the session; ``gateway``: the session has a py4j gateway
    (a Spark Connect / databricks-connect session has none, so whether Delta is there cannot be asked);
    ``databricks``: Spark runs on Databricks compute, which always has Delta (and whose storage, Unity Catalog
    volumes, the embedded adapter cannot commit to safely).

    Raises:
        EnvironmentProblem: ``native`` is forced and the session cannot run it, with what is missing.
    """
    if setting == "embedded":
        return AdapterChoice("embedded", "spark.adapter = 'embedded' (configured): Spark writes Parquet, "
                                         "delta-rs commits")
    if setting == "native":
        if gateway and not delta_jvm:
            raise EnvironmentProblem(
                f"spark.adapter = 'native' was asked for, but Delta's JVM classes ({_DELTA_CLASS}) are not on this "
                "session's classpath: start Spark with the delta-spark jars (spark.jars / spark.jars.packages) or "
                "run on a Databricks runtime, or use 'auto' / 'embedded'"
            )
        where = (f"{_DELTA_CLASS} loads" if gateway else "a Spark Connect session to Databricks, which has Delta"
                 if databricks else "a Spark Connect session: Delta's public writer and SQL on the server, which "
                 "must have Delta's jars and SQL extension")
        return AdapterChoice("native", f"spark.adapter = 'native' (configured); {where}")
    if not gateway:
        if databricks:
            return AdapterChoice("native", "auto: a Spark Connect session on Databricks, whose runtime has Delta "
                                           "(delta-rs cannot commit safely to its volumes)")
        return AdapterChoice("embedded", "auto: a Spark Connect session outside Databricks (Delta's JVM classes "
                                         "cannot be asked for); Spark writes Parquet, delta-rs commits from this "
                                         "process")
    if delta_jvm:
        return AdapterChoice("native", f"auto: Delta's JVM classes ({_DELTA_CLASS}) load in this session")
    return AdapterChoice("embedded", f"auto: Delta's JVM classes ({_DELTA_CLASS}) are not on this session's "
                                     "classpath; Spark writes Parquet, delta-rs commits")


def adapter_choice(spark: SparkSession, cfg: LakeshardConfig | None = None) -> AdapterChoice:
    """Return which adapter :func:`open_store` picks for this session under ``cfg``, and why."""
    from lakeshard.lake.jvm import gateway, has_delta_jvm
    from lakeshard.runtime import on_databricks

    cfg = cfg or load_config()
    has_gateway = gateway(spark) is not None
    return choose_adapter(cfg.spark.adapter, delta_jvm=has_gateway and has_delta_jvm(spark), gateway=has_gateway,
                          databricks=on_databricks(cfg))


def adapter_name(spark: SparkSession, cfg: LakeshardConfig | None = None) -> str:
    """Return which adapter :func:`open_store` picks: ``"embedded"`` (delta-rs) or ``"native"`` (Delta JVM)."""
    return adapter_choice(spark, cfg).name


def open_store(spark: SparkSession, cfg: LakeshardConfig | None = None) -> TableStore:
    """Return the TableStore for this session: native when Delta's JVM classes load, else embedded.

    ``spark.adapter`` in the config forces one (``"embedded"`` or ``"native"``); ``"auto"`` (the default)
    decides by the session, as :func:`choose_adapter` says.

    Raises:
        EnvironmentProblem: ``native`` is forced on a session that cannot run it.
    """
    from lakeshard.lake.storage import storage_options

    cfg = cfg or load_config()
    choice = adapter_choice(spark, cfg)
    if choice.name == "native":
        from lakeshard.lake.native import NativeTableStore

        return NativeTableStore(spark)
    from lakeshard.lake.embedded import EmbeddedTableStore

    return EmbeddedTableStore(spark, storage_options=storage_options(cfg, cfg.lakehouse))


def open_lazy_store(cfg: LakeshardConfig | None = None) -> TableStore:
    """Return a TableStore that starts its Spark session only when something needs Spark.

    Small routing and writer steps run in this process with pyarrow and delta-rs, so a process doing only
    those (a shard writer, ``lakeshard ingest`` on a trickle, a crash-test worker) never pays for a JVM.
    Only the embedded adapter on a local runtime can wait: which adapter a Databricks or databricks-connect
    session gets, or a session started with extra jars, depends on that session — there (and with
    ``spark.adapter = 'native'``) this is ``open_store(get_spark(cfg), cfg)``.

    Example::

        store = open_lazy_store(cfg)
        writer = ShardWriter(None, store, cfg, shards=[0, 1])   # Spark starts only for a big step
    """
    from lakeshard.runtime import RuntimeKind, detect_runtime, get_spark

    cfg = cfg or load_config()
    lazy = detect_runtime(cfg) is RuntimeKind.LOCAL and (
        cfg.spark.adapter == "embedded" or (cfg.spark.adapter == "auto" and not cfg.spark.jars.strip()))
    if not lazy:
        return open_store(get_spark(cfg), cfg)
    from lakeshard.lake.embedded import EmbeddedTableStore
    from lakeshard.lake.storage import storage_options

    return EmbeddedTableStore(None, start_spark=lambda: get_spark(cfg),
                              storage_options=storage_options(cfg, cfg.lakehouse))
