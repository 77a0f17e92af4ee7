"""Table I/O: the ``TableStore`` port and its adapters (docs/design.md §1).

This is the face other packages use: the port (:mod:`.store`) and its values (:mod:`.types`), choosing and
opening an adapter (:mod:`.embedded`, :mod:`.native`), and the file helpers of the shared Delta protocol pieces
(:mod:`.protocol`). Nothing outside this package imports ``deltalake`` or ``delta`` directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakeshard._lazy import lazy_exports
from lakeshard.config import LakeshardConfig, load_config
from lakeshard.errors import EnvironmentProblem
from lakeshard.lake.protocol.datafiles import NO_STATS, check_data_file, damaged_in_spark, naming_damaged_files
from lakeshard.lake.protocol.filesystem import filesystem
from lakeshard.lake.protocol.partitions import partition_directory, partition_order, write_partitioned
from lakeshard.lake.store import TableStore
from lakeshard.lake.types import (
    BYTES_ADDED,
    ROWS_ADDED,
    AppTransaction,
    BeforeCommit,
    CommitInfo,
    CommitResult,
    FileChange,
    FileInfo,
    LogEntry,
    TableSpec,
    VacuumReport,
    WriteFiles,
    WrittenFile,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakeshard.lake.embedded import EmbeddedTableStore
    from lakeshard.lake.native import NATIVE_UNVERIFIED, NativeTableStore
    from lakeshard.lake.native import commit_path as native_commit_path

__all__ = [
    "BYTES_ADDED",
    "NATIVE_UNVERIFIED",
    "NO_STATS",
    "ROWS_ADDED",
    "AdapterChoice",
    "AppTransaction",
    "BeforeCommit",
    "CommitInfo",
    "CommitResult",
    "EmbeddedTableStore",
    "FileChange",
    "FileInfo",
    "LogEntry",
    "NativeTableStore",
    "TableSpec",
    "TableStore",
    "VacuumReport",
    "WriteFiles",
    "WrittenFile",
    "adapter_choice",
    "adapter_name",
    "check_data_file",
    "choose_adapter",
    "damaged_in_spark",
    "filesystem",
    "naming_damaged_files",
    "native_commit_path",
    "open_lazy_store",
    "open_store",
    "partition_directory",
    "partition_order",
    "write_partitioned",
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
    return AdapterChoice("embedded", f"auto: Delta's JVM classes ({_DELTA_CLASS}) are not on the Spark session's "
                                     "classpath; Spark writes Parquet, delta-rs commits")


def adapter_choice(spark: SparkSession, cfg: LakeshardConfig | None = None) -> AdapterChoice:
    """Return which adapter :func:`open_store` picks for this session under ``cfg``, and why."""
    from lakeshard.lake.native.jvm import gateway, has_delta_jvm
    from lakeshard.runtime import RuntimeKind, detect_runtime, on_databricks

    cfg = cfg or load_config()
    has_gateway = gateway(spark) is not None
    if cfg.spark.adapter == "auto" and not cfg.spark.jars.strip() and detect_runtime(cfg) is RuntimeKind.LOCAL:
        # A local session reused from elsewhere may carry Delta's jars; lakeshard was not asked for them.
        return AdapterChoice("embedded", "auto: a local session without spark.jars configured; Spark writes "
                                         "Parquet, delta-rs commits (spark.adapter = 'native' uses Delta's engine)")
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
    cfg = cfg or load_config()
    choice = adapter_choice(spark, cfg)
    if choice.name == "native":
        from lakeshard.lake.native import NativeTableStore
        from lakeshard.lake.native.connect import ConnectLimits

        return NativeTableStore(spark, ConnectLimits(request_bytes=cfg.spark.connect_request_mb * 1024 * 1024,
                                                     timeout_s=cfg.spark.connect_timeout_seconds))
    from lakeshard.lake.embedded import EmbeddedTableStore
    from lakeshard.lake.embedded.storage_options import storage_options

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
    from lakeshard.lake.embedded.storage_options import storage_options

    return EmbeddedTableStore(None, start_spark=lambda: get_spark(cfg),
                              storage_options=storage_options(cfg, cfg.lakehouse))


# The adapters load deltalake or Delta's Python package: on first use of their names only.
__getattr__, __dir__ = lazy_exports(globals())
