"""The native adapter: Delta Lake's own JVM writer commits, in any Spark session that has Delta's classes.

This is the adapter for a Databricks cluster (jobs, notebooks on classic compute) and for any Spark session
started with the delta-spark jars (DESIGN.md §1). It drives Delta through the session's py4j gateway, so it
needs a classic session: a Spark Connect / databricks-connect session has no gateway and uses the embedded
adapter (see :func:`lakeshard.lake.choose_adapter`).

Which Delta API each operation uses, and why:

- **create, exists, snapshot reads, vacuum**: Delta's public API — ``DeltaTable.createIfNotExists`` (deletion
  vectors off, as the embedded adapter creates tables), ``DeltaTable.isDeltaTable``,
  ``spark.read.format("delta")`` with ``versionAsOf`` / ``timestampAsOf``, ``DeltaTable.vacuum``.
- **append with at most one app transaction and no read version**: the public writer,
  ``df.write.format("delta").mode("append")`` with ``txnAppId`` / ``txnVersion`` (Delta's documented
  idempotent writes: a version at or below the committed one is skipped by Delta itself) and
  ``userMetadata`` carrying lakeshard's commit metadata.
- **every other commit** — a file swap (remove exactly these files, add new ones, ``dataChange=false`` for
  compaction), an append carrying several app transactions (a writer's progress for several shards) or
  prepared against an older ``read_version``: Delta's ``OptimisticTransaction``
  (``DeltaLog.forTable(...).startTransaction()``, ``txn.writeFiles(df)`` for the data files with Delta's own
  statistics, ``txn.txnVersion(app_id)`` to make the commit depend on each app transaction, and
  ``txn.commit(actions, DeltaOperations.ManualUpdate)``). delta-spark's public API has no way to remove an
  exact set of files and add others in one commit (``replaceWhere`` removes every file matching a predicate,
  including files a size-tiered plan did not pick), nor to commit several app transactions at once. These
  classes are internal to Delta; they live in ``org.apache.spark.sql.delta`` (delta-spark) and
  ``com.databricks.sql.transaction.tahoe`` (Databricks Runtime), and both are looked up. Actions are built as
  the protocol's JSON and turned into Delta's objects with ``Action.fromJson``, the parser Delta reads its
  own log with, so no constructor signatures (which change between releases) are relied on.
- **live files, per-version deltas, checkpoints, history, app transaction versions**: the log files
  themselves, read through the session's Hadoop filesystem and replayed by :mod:`lakeshard.lake.deltalog`
  (the documented protocol, identical on delta-spark and Databricks). ``DeltaLog.update().transactions()``
  would give app transaction versions too, but it is an internal API whose package and signature differ
  between delta-spark and Databricks; the protocol does not. History timestamps are what Delta's time travel
  resolves timestamps against: the in-commit timestamp when the table has one, else the commit file's
  modification time, made increasing.

Lakeshard's commit metadata (:data:`~lakeshard.lake.store.ROWS_ADDED`, ``BYTES_ADDED``, ...) travels as one JSON
object in the commit's ``userMetadata`` (delta-spark keeps no other custom commitInfo keys); a public-writer
append records rows and bytes from Delta's own ``operationMetrics``.

Tables with deletion vectors, column mapping or V2 checkpoints cannot be read file by file or replayed this
way; the operations that need that raise :class:`~lakeshard.errors.UnsupportedByAdapter` naming the feature.

This module is **not exercised against a real Delta JVM in lakeshard's own CI** (delta-spark's jars come
from Maven, which that environment cannot reach); its contract tests run wherever the classes are present
(``pytest -m delta_jvm``), and its pure parts (log replay, metadata encoding, Scala call helpers) are unit
tested everywhere.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa

from lakeshard.errors import (
    CommitConflict,
    EnvironmentProblem,
    TableExists,
    TableNotFound,
    TableStoreError,
    UnsupportedByAdapter,
)
from lakeshard.lake.datafiles import (
    conform,
    footer_stats_and_values,
    is_hidden,
    read_data_files,
    stats_columns,
    written_partition_values,
)
from lakeshard.lake.deltalog import (
    COMMIT_ID,
    LogState,
    add_action,
    checkpoint_parts,
    commit_id_of,
    commit_versions,
    encode_user_metadata,
    file_from_action,
    parse_commit,
    remove_action,
    replay,
    state_from_checkpoint_rows,
    txn_action,
    typed_stats,
    unsupported_features,
)
from lakeshard.lake.files import filesystem, normalise_uri
from lakeshard.lake.store import (
    BYTES_ADDED,
    ROWS_ADDED,
    AppTransaction,
    BeforeCommit,
    CommitInfo,
    CommitResult,
    FileInfo,
    LogEntry,
    TableStore,
    VacuumReport,
    WriteFiles,
    check_new_columns,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructField, StructType

__all__ = ["DELTA_PACKAGES", "NativeTableStore", "commit_timestamps", "is_concurrent_modification", "scala_call"]

# Where Delta's internal classes live: delta-spark, then Databricks Runtime.
DELTA_PACKAGES = ("org.apache.spark.sql.delta", "com.databricks.sql.transaction.tahoe")
_DEFAULT_PROPERTIES = {"delta.enableDeletionVectors": "false"}
_PARTITION_TYPES = {"string", "integer", "long", "short", "byte", "date", "boolean"}
_USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
_RETENTION_CHECK_CONF = "spark.databricks.delta.retentionDurationCheck.enabled"
_WRITE_PREFIX = "w-"
_STATE_CACHE = 64
# The userMetadata session conf is read by Delta at commit time: commits of this process take turns.
_COMMIT_LOCK = threading.Lock()


def scala_call(obj: Any, name: str, *args: Any, max_defaults: int = 8) -> Any:
    """Return ``obj.name(*args)``, filling trailing Scala default arguments the call leaves out.

    Scala compiles a parameter's default value into a method ``name$default$N``; Java (and py4j) callers
    must pass every argument. When the call with ``args`` does not resolve, this adds the defaults of the
    following parameters one by one until it does, so a method that gained a defaulted parameter in a
    newer Delta release is still called the same way.

    Raises:
        AttributeError: no overload of ``name`` matched even with ``max_defaults`` defaults filled in.
    """
    method = getattr(obj, name)
    filled = list(args)
    last: Exception | None = None
    for _ in range(max_defaults + 1):
        try:
            return method(*filled)
        except Exception as exc:
            # py4j reports a missing overload as a Py4JError "Method name([...]) does not exist"; an exception
            # thrown by the Java method itself (Py4JJavaError, with ``java_exception``) is not retried.
            if hasattr(exc, "java_exception") or "does not exist" not in str(exc):
                raise
            last = exc
        default = getattr(obj, f"{name}$default${len(filled) + 1}", None)
        if default is None:
            break
        try:
            filled.append(default())
        except Exception as exc:
            last = exc
            break
    raise AttributeError(f"no overload of {name} accepts {len(args)} arguments plus Scala defaults: {last}")


def is_concurrent_modification(exc: BaseException) -> bool:
    """Return whether a py4j error wraps a Delta concurrent-commit failure (a lost optimistic commit).

    Delta's ``ConcurrentAppendException``, ``ConcurrentDeleteDeleteException``,
    ``ConcurrentTransactionException``, ... all extend ``java.util.ConcurrentModificationException``.
    """
    java = getattr(exc, "java_exception", None)
    cls = java.getClass() if java is not None else None
    while cls is not None:
        name = str(cls.getName())
        if name == "java.util.ConcurrentModificationException" or name.endswith("ConcurrentModificationException"):
            return True
        cls = cls.getSuperclass()
    return False


def commit_timestamps(commits: Sequence[tuple[int, int, int | None]]) -> dict[int, datetime]:
    """Return each commit's timestamp as Delta's time travel sees it, from (version, file mtime, ICT) triples.

    With in-commit timestamps the commit's own timestamp counts; otherwise the commit file's modification
    time, raised to one millisecond past the previous commit's where clocks or copies made it go backwards
    (Delta's history manager does the same), so versions and timestamps stay in the same order.
    """
    out: dict[int, datetime] = {}
    previous: int | None = None
    for version, mtime, ict in sorted(commits):
        millis = ict if ict is not None else mtime
        if ict is None and previous is not None and millis <= previous:
            millis = previous + 1
        previous = millis
        out[version] = datetime.fromtimestamp(millis / 1000, tz=UTC)
    return out


class _DeltaJvm:
    """Delta's JVM classes behind the session's py4j gateway."""

    def __init__(self, spark: SparkSession) -> None:
        jvm = _gateway(spark)
        if jvm is None:
            raise EnvironmentProblem(
                "the native adapter drives Delta's JVM classes through py4j, and this Spark session has no py4j "
                "gateway (Spark Connect / databricks-connect); use the embedded adapter here, or run on the "
                "cluster (a job or notebook), where the native adapter works"
            )
        self.jvm = jvm
        self.jspark = spark._jsparkSession
        self.hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()
        self._package: str | None = None

    @property
    def package(self) -> str:
        """Return the package of Delta's internal classes on this classpath (looked up once)."""
        if self._package is None:
            self._package = self._find_package()
        return self._package

    def _find_package(self) -> str:
        from lakeshard.runtime import jvm_has_class

        for package in DELTA_PACKAGES:
            if jvm_has_class(self.jvm, f"{package}.DeltaLog"):
                return package
        raise EnvironmentProblem(
            f"Delta's DeltaLog class is in none of {list(DELTA_PACKAGES)} on this session's classpath; the native "
            "adapter needs delta-spark's jars or a Databricks runtime"
        )

    def object(self, name: str) -> Any:
        """Return the Scala ``object`` ``name`` (relative to Delta's package), i.e. its ``MODULE$``."""
        return getattr(getattr(self.jvm, f"{self.package}.{name}$"), "MODULE$")

    def delta_log(self, uri: str) -> Any:
        return self.object("DeltaLog").forTable(self.jspark, uri)

    def action(self, action: Mapping[str, Any]) -> Any:
        return self.object("actions.Action").fromJson(json.dumps(action, separators=(",", ":")))

    def seq(self, items: Sequence[Any]) -> Any:
        java_list = self.jvm.java.util.ArrayList()
        for item in items:
            java_list.add(item)
        return self.jvm.org.apache.spark.api.python.PythonUtils.toSeq(java_list)

    def manual_update(self) -> Any:
        return self.object("DeltaOperations$ManualUpdate")

    @staticmethod
    def actions_json(seq: Any) -> list[dict[str, Any]]:
        """Return the protocol JSON of each action in a Scala ``Seq[Action]``."""
        out = []
        iterator = seq.iterator()
        while iterator.hasNext():
            out.append(json.loads(iterator.next().json()))
        return out

    # ------------------------------------------------------------------ Hadoop filesystem of the table
    def _path(self, location: str) -> tuple[Any, Any]:
        path = self.jvm.org.apache.hadoop.fs.Path(location)
        return path.getFileSystem(self.hadoop_conf), path

    def list_dir(self, location: str) -> list[tuple[str, str, int]]:
        """Return (name, location, modification millis) of each entry of a directory; [] when it is absent."""
        fs, path = self._path(location)
        if not fs.exists(path):
            return []
        return [(str(s.getPath().getName()), str(s.getPath().toString()), int(s.getModificationTime()))
                for s in fs.listStatus(path)]

    def list_files(self, root: str) -> list[str]:
        """Return every data file under ``root`` (recursively, ``_delta_log`` and hidden files left out), relative."""
        fs, path = self._path(root)
        prefix = str(fs.makeQualified(path).toString()).rstrip("/") + "/"
        out = []
        iterator = fs.listFiles(path, True)
        while iterator.hasNext():
            full = str(iterator.next().getPath().toString())
            relative = full[len(prefix):] if full.startswith(prefix) else full
            if not is_hidden(relative):
                out.append(relative)
        return out

    def read_text(self, location: str) -> str:
        fs, path = self._path(location)
        stream = fs.open(path)
        try:
            return str(self.jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def delete(self, location: str) -> None:
        fs, path = self._path(location)
        fs.delete(path, True)


def _gateway(spark: Any) -> Any:
    """Return the session's py4j JVM view, or None for a session without one (Spark Connect)."""
    try:
        return getattr(spark.sparkContext, "_jvm", None)
    except Exception:  # a Spark Connect session raises on .sparkContext
        return None


class NativeTableStore(TableStore):
    """A :class:`TableStore` whose commits are Delta Lake's own (delta-spark or Databricks Runtime).

    Args:
        spark: a classic (py4j) session with Delta's JVM classes on its classpath.

    Raises:
        EnvironmentProblem: the session has no py4j gateway or no Delta classes.

    Example::

        store = NativeTableStore(spark)          # or open_store(spark), which picks it when Delta's classes load
        store.create(uri, schema, partition_by=["tenant_id"])
        store.append(uri, df, app_transactions=[AppTransaction("writer/3", 17)])
    """

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self._jvm = _DeltaJvm(spark)
        self._jvm.package  # noqa: B018 (fail now, not at the first commit, when Delta's classes are missing)
        # (table, version) -> (replayed state, modification time of that version's commit file)
        self._states: OrderedDict[tuple[str, int], tuple[LogState, int | None]] = OrderedDict()

    @classmethod
    def for_log_reads(cls, spark: SparkSession) -> NativeTableStore:
        """Return a store for reading Delta logs only, on any classic session, Delta's classes or not.

        Its log reads (:meth:`files`, :meth:`log_entries`, :meth:`history`, :meth:`transaction_version`,
        checkpoints, :meth:`read_files`, schema and version) go through the session's Hadoop filesystem and
        the protocol; anything that needs Delta itself (writes, :meth:`read`, vacuum, checkpoints written)
        fails when Delta's classes are absent. The tests use
        it to check the native adapter's log reading against the embedded adapter where Delta's JVM is absent.
        """
        store = cls.__new__(cls)
        store.spark = spark
        store._jvm = _DeltaJvm(spark)
        store._states = OrderedDict()
        return store

    # ------------------------------------------------------------------------------- log reading
    def _listing(self, uri: str) -> list[tuple[str, str, int]]:
        return self._jvm.list_dir(f"{uri}/_delta_log")

    def _latest(self, uri: str, listing: list[tuple[str, str, int]] | None = None) -> int:
        listing = self._listing(uri) if listing is None else listing
        commits = commit_versions(n for n, _, _ in listing)
        checkpoints = [v for v, parts in checkpoint_parts((n, loc) for n, loc, _ in listing).items() if parts]
        latest = max([*commits, *checkpoints], default=-1)
        if latest < 0:
            raise TableNotFound(f"no Delta table at {uri}")
        return latest

    def _state(self, uri: str, version: int | None = None) -> LogState:
        """Return the table's state at ``version`` (latest by default), replayed from the log and cached."""
        listing = self._listing(uri)
        latest = self._latest(uri, listing)
        target = latest if version is None else version
        if target > latest or target < 0:
            raise TableStoreError(f"{uri}: no version {target} (the latest is {latest})")
        mtimes = {n: m for n, _, m in listing}
        # A cached state is only reused while its commit file is the same one (a table dropped and
        # created again at the same location starts over at version 0 with new commit files).
        for key in [k for k in self._states if k[0] == uri]:
            if self._states[key][1] != mtimes.get(f"{key[1]:020d}.json"):
                del self._states[key]
        cached = self._states.get((uri, target))
        if cached is not None:
            return cached[0]
        names = {n: loc for n, loc, _ in listing}
        parts = checkpoint_parts((n, loc) for n, loc, _ in listing)
        checkpoint = max((v for v, p in parts.items() if p and v <= target), default=-1)
        # Start from the newest state already replayed between the checkpoint and the target, if any: a
        # writer asking after every commit replays one commit, not all of them since the checkpoint.
        cached_at = max((v for (u, v) in self._states if u == uri and checkpoint <= v <= target), default=None)
        base: LogState | None = None
        if cached_at is not None:
            base = self._states[(uri, cached_at)][0]
        elif checkpoint >= 0:
            base = state_from_checkpoint_rows(checkpoint, self._checkpoint_rows(parts[checkpoint]))
        start = 0 if base is None else base.version + 1
        commits = []
        for v in range(start, target + 1):
            name = f"{v:020d}.json"
            if name not in names:
                raise TableStoreError(
                    f"{uri}: commit {v} is missing from the log and no checkpoint covers it; version {target} "
                    "cannot be reconstructed"
                )
            commits.append((v, parse_commit(self._jvm.read_text(names[name]), v)[1]))
        state = replay(commits, base=base)
        self._states[(uri, target)] = (state, mtimes.get(f"{target:020d}.json"))
        while len(self._states) > _STATE_CACHE:
            self._states.popitem(last=False)
        return state

    def _checkpoint_rows(self, parts: Sequence[str]) -> list[dict[str, Any]]:
        from pyspark.sql import functions as F

        df = self.spark.read.parquet(*parts)
        cols = [c for c in ("add", "remove", "txn", "metaData", "protocol") if c in df.columns]
        # One JSON object per row, null actions left out: the same shape as a commit file's lines.
        return [json.loads(row[0]) for row in df.select(F.to_json(F.struct(*cols))).collect()]

    def _supported(self, uri: str, state: LogState, operation: str) -> None:
        found = unsupported_features(state)
        if found:
            raise UnsupportedByAdapter(
                f"{operation} on {uri}: the table uses {found}; the native adapter reads live files and the log "
                "as plain Parquet and protocol JSON, which these features make wrong. Rewrite the table without "
                "them (e.g. REORG TABLE ... APPLY (PURGE) and disable the feature) or read it with Delta directly"
            )

    # ----------------------------------------------------------------------------------- lookup
    def exists(self, table: str) -> bool:
        """Return whether a Delta table exists at ``table`` (its log holds a commit or a checkpoint)."""
        try:
            self._latest(normalise_uri(table))
        except TableNotFound:
            return False
        return True

    def schema(self, table: str) -> StructType:
        """Return the table's schema (data and partition columns) as a Spark ``StructType``."""
        from pyspark.sql.types import StructType

        return StructType.fromJson(self._state(normalise_uri(table)).schema_json)

    def add_columns(self, table: str, fields: Sequence[StructField]) -> int:
        """Add nullable columns to an existing table with ``ALTER TABLE ... ADD COLUMNS``; return the new version."""
        uri = normalise_uri(table)
        check_new_columns(uri, self.schema(uri), fields)
        columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in fields)
        try:
            self.spark.sql(f"ALTER TABLE delta.`{uri}` ADD COLUMNS ({columns})")
        except Exception as exc:  # py4j or Spark Connect errors; the message names the cause
            raise TableStoreError(f"{uri}: cannot add the columns {[f.name for f in fields]}: {exc}") from None
        return self.version(uri)

    def partition_columns(self, table: str) -> list[str]:
        """Return the table's partition columns in order."""
        return self._state(normalise_uri(table)).partition_columns

    def version(self, table: str) -> int:
        """Return the table's latest version (from the log listing, without replaying it)."""
        return self._latest(normalise_uri(table))

    # ----------------------------------------------------------------------------------- create
    def create(
        self,
        table: str,
        schema: StructType,
        *,
        partition_by: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        description: str | None = None,
        exist_ok: bool = True,
    ) -> int:
        """Create the table with ``DeltaTable.createIfNotExists`` (or check an existing one's shape).

        Raises:
            TableExists: the table exists and ``exist_ok`` is False.
            TableStoreError: an existing table's schema or partitioning differs (both are shown), or a
                partition column has a type that cannot be a partition.
        """
        from delta.tables import DeltaTable

        uri = normalise_uri(table)
        fields = {f.name: f for f in schema.fields}
        for col in partition_by:
            if col not in fields:
                raise TableStoreError(f"{uri}: partition column {col!r} is not in the schema {list(fields)}")
            type_name = fields[col].dataType.typeName()
            if type_name not in _PARTITION_TYPES:
                raise TableStoreError(
                    f"{uri}: partition column {col!r} has type {type_name}; use one of {sorted(_PARTITION_TYPES)}"
                )
        if self.exists(uri):
            if not exist_ok:
                raise TableExists(f"a Delta table already exists at {uri}")
            self._check_same_shape(uri, schema, partition_by)
            return self.version(uri)
        builder = DeltaTable.createIfNotExists(self.spark).location(uri).addColumns(schema)
        if partition_by:
            builder = builder.partitionedBy(*partition_by)
        for key, value in {**_DEFAULT_PROPERTIES, **(properties or {})}.items():
            builder = builder.property(key, value)
        if description:
            builder = builder.comment(description)
        try:
            builder.execute()
        except Exception as exc:
            # createIfNotExists racing another creator: the loser may still fail; the same shape is fine.
            if not self.exists(uri):
                raise TableStoreError(f"cannot create the Delta table at {uri}: {exc}") from None
        self._check_same_shape(uri, schema, partition_by)
        return self.version(uri)

    def _check_same_shape(self, uri: str, schema: StructType, partition_by: Sequence[str]) -> None:
        found = self.schema(uri)
        found_parts = self.partition_columns(uri)
        expected = [(f.name, f.dataType.simpleString()) for f in schema.fields]
        actual = [(f.name, f.dataType.simpleString()) for f in found.fields]
        if expected != actual or list(partition_by) != found_parts:
            raise TableStoreError(
                f"{uri} exists with a different shape: expected columns {expected} partitioned by "
                f"{list(partition_by)}, found {actual} partitioned by {found_parts}"
            )

    # ------------------------------------------------------------------------------------- read
    def read(
        self, table: str, *, version: int | None = None, timestamp: datetime | str | None = None
    ) -> DataFrame:
        """Return a snapshot read by Delta itself (latest, ``versionAsOf`` or ``timestampAsOf``).

        Example::

            store.read(uri, version=3).count()
            store.read(uri, timestamp="2026-01-01T00:00:00Z")
        """
        if version is not None and timestamp is not None:
            raise TableStoreError("read: give a version or a timestamp, not both")
        uri = normalise_uri(table)
        latest = self._latest(uri)
        reader = self.spark.read.format("delta")
        if version is not None:
            if version > latest:
                raise TableStoreError(f"cannot load {uri} at version {version}: the latest is {latest}")
            reader = reader.option("versionAsOf", version)
        elif timestamp is not None:
            text = timestamp.astimezone(UTC).isoformat() if isinstance(timestamp, datetime) else timestamp
            reader = reader.option("timestampAsOf", text)
        try:
            return reader.load(uri)
        except Exception as exc:  # e.g. a version whose commit files were cleaned up, a timestamp before v0
            at = f" at version {version}" if version is not None else f" as of {timestamp}" if timestamp else ""
            raise TableStoreError(f"cannot load {uri}{at}: {str(exc).splitlines()[0][:300]}") from None

    def read_files(self, table: str, files: Sequence[FileInfo]) -> DataFrame:
        """Return the rows of exactly these data files (as :meth:`files` lists them), partition values included.

        Delta has no public "read these files" API; the files are read as Parquet with the table's schema
        and their partition values joined in, as the embedded adapter does.

        Raises:
            UnsupportedByAdapter: the table uses deletion vectors or column mapping.
        """
        from pyspark.sql.types import StructType

        uri = normalise_uri(table)
        state = self._state(uri)
        self._supported(uri, state, "read_files")
        return read_data_files(self.spark, uri, StructType.fromJson(state.schema_json), state.partition_columns,
                               files)

    def read_arrow(self, table: str, files: Sequence[FileInfo], columns: Sequence[str] | None = None) -> pa.Table:
        """Return the rows of exactly these data files as Arrow, typed as :meth:`arrow_schema` says.

        Read through Spark (``read_files`` then ``toArrow``): the files may live on any filesystem the cluster
        reaches, which pyarrow in the driver may not.
        """
        schema = self.arrow_schema(table)
        names = list(columns) if columns is not None else schema.names
        unknown = [c for c in names if c not in schema.names]
        if unknown:
            raise TableStoreError(f"{normalise_uri(table)}: no columns {unknown}; the table has {schema.names}")
        wanted = pa.schema([schema.field(c).with_nullable(True) for c in names])
        if not files:
            return wanted.empty_table()
        return self.read_files(table, files).select(*names).toArrow().cast(wanted)

    def arrow_schema(self, table: str) -> pa.Schema:
        """Return the table's schema as Arrow types (timestamps in microseconds, UTC), partition columns included."""
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(self.schema(table), timezone="UTC")

    def files(self, table: str, *, version: int | None = None) -> list[FileInfo]:
        """Return the live data files of the table (latest or at ``version``) with their typed statistics."""
        uri = normalise_uri(table)
        state = self._state(uri, version)
        self._supported(uri, state, "files")
        schema = state.schema_json
        return [replace(f, min_values=typed_stats(f.min_values, schema), max_values=typed_stats(f.max_values, schema))
                for f in state.files.values()]

    # ------------------------------------------------------------------------------------ write
    def append(
        self,
        table: str,
        df: DataFrame | None,
        *,
        app_transactions: Sequence[AppTransaction] = (),
        metadata: Mapping[str, Any] | None = None,
        read_version: int | None = None,
        write: WriteFiles | None = None,
    ) -> CommitResult:
        """Append ``df``'s rows in one Delta commit carrying ``app_transactions`` and ``metadata``.

        One app transaction (or none) and no ``read_version``: Delta's writer with ``txnAppId`` /
        ``txnVersion``. Otherwise Delta's ``OptimisticTransaction`` with one ``SetTransaction`` action per app
        transaction, each also read by the transaction so a concurrent commit of the same app id fails it.
        If every app transaction is already committed at or past its version the write is skipped.

        Raises:
            CommitConflict: a concurrent commit conflicts (e.g. it committed one of the same app
                transactions); nothing of this append is visible.
        """
        if df is not None and write is None and len(app_transactions) <= 1 and read_version is None:
            return self._append_with_writer(table, df, app_transactions, metadata)
        return self._commit(table, df, remove=(), data_change=True, app_transactions=app_transactions,
                            metadata=metadata, read_version=read_version, operation="append", write=write)

    def _append_with_writer(self, table: str, df: DataFrame, app_transactions: Sequence[AppTransaction],
                            metadata: Mapping[str, Any] | None) -> CommitResult:
        uri = normalise_uri(table)
        state = self._state(uri)
        if app_transactions and _already_committed(uri, state, app_transactions):
            return CommitResult(uri, state.version, skipped=True,
                                reason=f"app transactions {_txn_text(app_transactions)} already committed")
        from pyspark.sql.types import StructType

        commit_id = uuid.uuid4().hex
        writer = (conform(df, StructType.fromJson(state.schema_json), uri).write.format("delta").mode("append")
                  .option("userMetadata", encode_user_metadata({**(metadata or {}), COMMIT_ID: commit_id})))
        for t in app_transactions:
            writer = writer.option("txnAppId", t.app_id).option("txnVersion", t.version)
        try:
            writer.save(uri)
        except Exception as exc:
            if not is_concurrent_modification(exc):
                raise
            return self._lost(uri, state.version, app_transactions, exc)
        entry = self._find_commit(uri, state.version, commit_id)
        if entry is None:  # Delta skipped the write: the same app transaction committed meanwhile
            latest = self._state(uri)
            return CommitResult(uri, latest.version, skipped=True,
                                reason=f"app transactions {_txn_text(app_transactions)} committed concurrently")
        adds = [c for c in entry.changes if c.action == "add"]
        return CommitResult(uri, entry.version, files_added=len(adds),
                            rows_added=int(entry.custom_metadata.get(ROWS_ADDED, 0)),
                            bytes_added=sum(c.file.size_bytes for c in adds), reason="append")

    def replace_files(
        self,
        table: str,
        remove: Sequence[str],
        df: DataFrame | None,
        *,
        data_change: bool = False,
        app_transactions: Sequence[AppTransaction] = (),
        metadata: Mapping[str, Any] | None = None,
        read_version: int | None = None,
        before_commit: BeforeCommit | None = None,
        write: WriteFiles | None = None,
    ) -> CommitResult:
        """Remove the live files ``remove`` and add ``df``'s rows in one Delta commit (``dataChange`` as given).

        The new files are written by Delta's ``txn.writeFiles`` (or by ``write`` under a fresh directory of
        the table, their statistics read from the Parquet footers); removes are the files' exact log paths.
        Delta's conflict checker fails the commit when a concurrent commit removed one of the same files.

        Raises:
            CommitConflict: a file in ``remove`` is not live, or a concurrent commit removed it.
        """
        return self._commit(table, df, remove=remove, data_change=data_change, app_transactions=app_transactions,
                            metadata=metadata, read_version=read_version, before_commit=before_commit,
                            write=write, operation="replace")

    def _commit(
        self,
        table: str,
        df: DataFrame | None,
        *,
        remove: Sequence[str],
        data_change: bool,
        app_transactions: Sequence[AppTransaction],
        metadata: Mapping[str, Any] | None,
        read_version: int | None,
        operation: str,
        before_commit: BeforeCommit | None = None,
        write: WriteFiles | None = None,
    ) -> CommitResult:
        from pyspark.sql.types import StructType

        uri = normalise_uri(table)
        if df is not None and write is not None:
            raise TableStoreError(f"{uri}: give the rows to add as a DataFrame or as a write function, not both")
        txn = scala_call(self._jvm.delta_log(uri), "startTransaction")
        start = int(txn.readVersion())
        if start < 0:
            raise TableNotFound(f"no Delta table at {uri}")
        now = self._state(uri, start)
        self._supported(uri, now, operation)
        based_on = start if read_version is None else read_version
        for t in app_transactions:
            txn.txnVersion(t.app_id)  # the commit now depends on this app id: a concurrent commit of it fails ours
        if app_transactions:
            done = self._replayed(uri, now, based_on, app_transactions)
            if done is not None:
                return done
        gone = [p for p in remove if p not in now.files]
        if gone:
            raise CommitConflict(uri, based_on, tuple(t.app_id for t in app_transactions),
                                 f"files to remove are not live at version {start}: {gone[:5]}")
        millis = _now_ms()
        new_files: list[tuple[FileInfo, dict[str, Any]]] = []
        # Delta leaves the files of a failed commit to VACUUM; deleting them at once is only tidier.
        written_paths: list[str] = []
        if df is not None:
            written = self._jvm.actions_json(txn.writeFiles(
                conform(df, StructType.fromJson(now.schema_json), uri)._jdf))
            for action in written:
                if "add" in action:
                    action["add"]["dataChange"] = data_change
                    new_files.append((file_from_action(action["add"], action["add"].get("modificationTime")), action))
            written_paths = [f"{uri}/{unquote(f.path)}" for f, _ in new_files]
        elif write is not None:
            new_files, write_dir = self._write_with(uri, now, write, data_change)
            written_paths = [write_dir]

        def cleanup() -> None:
            for path in written_paths:
                self._jvm.delete(path)

        rows = sum(f.num_records or 0 for f, _ in new_files)
        size = sum(f.size_bytes for f, _ in new_files)
        extra: Mapping[str, Any] | None = None
        if before_commit is not None:
            try:
                extra = before_commit(uri, [replace(f, path=unquote(f.path)) for f, _ in new_files])
            except BaseException:
                cleanup()
                raise
        commit_id = uuid.uuid4().hex
        user_metadata = encode_user_metadata({
            **(metadata or {}), **(extra or {}), COMMIT_ID: commit_id, ROWS_ADDED: str(rows), BYTES_ADDED: str(size),
        })
        actions = [a for _, a in new_files]
        actions += [remove_action(now.files[p], data_change=data_change, deletion_millis=millis) for p in remove]
        actions += [txn_action(t, millis=millis) for t in app_transactions]
        try:
            with self._user_metadata(user_metadata):
                version = int(txn.commit(self._jvm.seq([self._jvm.action(a) for a in actions]),
                                         self._jvm.manual_update()))
        except Exception as exc:
            if not is_concurrent_modification(exc):
                raise
            cleanup()
            return self._lost(uri, based_on, app_transactions, exc)
        return CommitResult(uri, version, files_added=len(new_files), files_removed=len(remove), rows_added=rows,
                            bytes_added=size, reason=operation)

    def _write_with(self, uri: str, state: LogState, write: WriteFiles,
                    data_change: bool) -> tuple[list[tuple[FileInfo, dict[str, Any]]], str]:
        """Let ``write`` write Parquet under a fresh directory of the table; return its files and add actions.

        The writer runs in this (driver) process, so the table's storage is reachable from here; the
        footers are read the same way.
        """
        write_id = f"{_WRITE_PREFIX}{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:12]}"
        target = f"{uri}/{write_id}"
        try:
            write(target)
        except BaseException:
            self._jvm.delete(target)
            raise
        import pyarrow.fs as pafs

        fs, base = filesystem(target)
        indexed = stats_columns(state.metadata.get("configuration") or {},
                                [f["name"] for f in state.schema_json["fields"]])
        out: list[tuple[FileInfo, dict[str, Any]]] = []
        for info in fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True)):
            relative = info.path[len(base):].lstrip("/")
            if info.type != pafs.FileType.File or is_hidden(relative) or not relative.endswith(".parquet"):
                continue
            n, stats, values = footer_stats_and_values(fs, info.path, indexed)
            if n == 0:
                fs.delete_file(info.path)
                continue
            file = FileInfo(
                path=_log_path(f"{write_id}/{relative}"), size_bytes=int(info.size or 0), num_records=n,
                partition_values=written_partition_values(relative, state.partition_columns, values),
                modification_time=datetime.fromtimestamp(int(info.mtime_ns or 0) / 1e9, tz=UTC),
            )
            out.append((file, add_action(file, data_change=data_change, stats=stats)))
        return out, target

    def _replayed(self, uri: str, now: LogState, based_on: int,
                  app_transactions: Sequence[AppTransaction]) -> CommitResult | None:
        """Return a skipped result when the app transactions are already committed, None when they are new.

        Raises:
            CommitConflict: some are committed and some are not, or a commit after ``based_on`` (the version
                the caller read) carried one of them without reaching this commit's version.
        """
        if _already_committed(uri, now, app_transactions):
            return CommitResult(uri, now.version, skipped=True,
                                reason=f"app transactions {_txn_text(app_transactions)} already committed")
        if based_on < now.version:
            ours = {t.app_id for t in app_transactions}
            for entry in self.log_entries(uri, start=based_on + 1, end=now.version):
                touched = sorted(ours & {t.app_id for t in entry.app_transactions})
                if touched:
                    raise CommitConflict(uri, based_on, tuple(sorted(ours)),
                                         f"commit {entry.version} (after the version read) carried {touched}")
        return None

    def _lost(self, uri: str, based_on: int, app_transactions: Sequence[AppTransaction],
              exc: BaseException) -> CommitResult:
        latest = self._state(uri)
        if app_transactions and _already_committed(uri, latest, app_transactions):
            return CommitResult(uri, latest.version, skipped=True,
                                reason=f"app transactions {_txn_text(app_transactions)} committed concurrently")
        cause = str(getattr(exc, "java_exception", exc)).splitlines()[0][:500]
        raise CommitConflict(uri, based_on, tuple(t.app_id for t in app_transactions), cause) from None

    def _find_commit(self, uri: str, after: int, commit_id: str) -> LogEntry | None:
        listing = {n: loc for n, loc, _ in self._listing(uri)}
        version = after + 1
        while (name := f"{version:020d}.json") in listing:
            entry, actions = parse_commit(self._jvm.read_text(listing[name]), version)
            info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
            if commit_id_of(info) == commit_id:
                return entry
            version += 1
        return None

    @contextlib.contextmanager
    def _user_metadata(self, value: str) -> Iterator[None]:
        """Set Delta's session-wide ``userMetadata`` for one commit (the OptimisticTransaction API has no option)."""
        with _COMMIT_LOCK:
            previous = self.spark.conf.get(_USER_METADATA_CONF, None)
            self.spark.conf.set(_USER_METADATA_CONF, value)
            try:
                yield
            finally:
                if previous is None:
                    self.spark.conf.unset(_USER_METADATA_CONF)
                else:
                    self.spark.conf.set(_USER_METADATA_CONF, previous)

    # ------------------------------------------------------------------------------ log actions
    def log_entries(self, table: str, *, start: int | None = None, end: int | None = None) -> list[LogEntry]:
        """Return the commits ``start``..``end`` (inclusive) as their log files hold them, oldest first.

        Raises:
            TableStoreError: ``start`` is older than the oldest commit file left in the log, or a commit
                between ``start`` and ``end`` is missing.
        """
        return [e for e, _ in self._entries(normalise_uri(table), start, end)]

    def _entries(self, uri: str, start: int | None, end: int | None) -> list[tuple[LogEntry, dict[str, Any]]]:
        """Return the commits ``start``..``end`` with their commitInfo, timestamps as Delta's time travel has them."""
        listing = self._listing(uri)
        latest = self._latest(uri, listing)
        locations = {n: (loc, mtime) for n, loc, mtime in listing}
        commits = commit_versions(locations)
        first = min(commits, default=latest)
        start = first if start is None else start
        end = latest if end is None else min(end, latest)
        if start < first:
            raise TableStoreError(
                f"{uri}: the log holds commits from version {first} on (older ones were cleaned up after a "
                f"checkpoint); version {start} was asked for"
            )
        missing = [v for v in range(start, end + 1) if v not in commits]
        if missing:
            raise TableStoreError(f"{uri}: commit files for versions {missing[:5]} are missing from the log")
        parsed = []
        for v in range(start, end + 1):
            entry, actions = parse_commit(self._jvm.read_text(locations[f"{v:020d}.json"][0]), v)
            parsed.append((entry, next((dict(a["commitInfo"]) for a in actions if "commitInfo" in a), {})))
        times = commit_timestamps([
            (e.version, locations[f"{e.version:020d}.json"][1],
             None if info.get("inCommitTimestamp") is None else int(info["inCommitTimestamp"]))
            for e, info in parsed])
        return [(replace(e, timestamp=times[e.version]), info) for e, info in parsed]

    def checkpoint_versions(self, table: str) -> list[int]:
        """Return the versions with a complete classic checkpoint (single- or multi-part), oldest first."""
        listing = self._listing(normalise_uri(table))
        return sorted(v for v, parts in checkpoint_parts((n, loc) for n, loc, _ in listing).items() if parts)

    def checkpoint_files(self, table: str, version: int) -> list[FileInfo]:
        """Return the live data files the checkpoint at ``version`` records (its add actions)."""
        uri = normalise_uri(table)
        parts = checkpoint_parts((n, loc) for n, loc, _ in self._listing(uri)).get(version)
        if not parts:
            raise TableStoreError(f"{uri}: no complete checkpoint at version {version}")
        return [file_from_action(r["add"], r["add"].get("modificationTime"))
                for r in self._checkpoint_rows(parts) if r.get("add")]

    def create_checkpoint(self, table: str) -> int:
        """Write a checkpoint of the latest version with Delta's ``DeltaLog.checkpoint`` and return that version."""
        uri = normalise_uri(table)
        log = self._jvm.delta_log(uri)
        snapshot = scala_call(log, "update")
        scala_call(log, "checkpoint", snapshot)
        return int(snapshot.version())

    # --------------------------------------------------------------------------------- metadata
    def history(self, table: str, *, limit: int | None = None) -> list[CommitInfo]:
        """Return the commits still in the log, newest first, with lakeshard's metadata from ``userMetadata``.

        Read from the commit files (as ``DeltaTable.history()`` does); timestamps are the ones Delta's time
        travel resolves ``timestampAsOf`` against (see the module doc), as UTC datetimes.
        """
        uri = normalise_uri(table)
        listing = self._listing(uri)
        first = min(commit_versions(n for n, _, _ in listing), default=0)
        latest = self._latest(uri, listing)
        start = first if limit is None else max(first, latest - limit + 1)
        return [CommitInfo(version=e.version, timestamp=e.timestamp, operation=e.operation,
                           parameters=info.get("operationParameters") or {},
                           metrics=info.get("operationMetrics") or {}, custom_metadata=e.custom_metadata)
                for e, info in reversed(self._entries(uri, start, latest))]

    def transaction_versions(self, table: str, app_ids: Sequence[str]) -> dict[str, int | None]:
        """Return each app id's committed version from one replay of the log."""
        state = self._state(normalise_uri(table))
        return {a: state.app_versions.get(a) for a in app_ids}

    def transaction_version(self, table: str, app_id: str) -> int | None:
        """Return the latest committed version of app transaction ``app_id`` (the log's ``txn`` actions), or None."""
        return self._state(normalise_uri(table)).app_versions.get(app_id)

    def vacuum(self, table: str, *, retention_hours: float = 168.0, dry_run: bool = False) -> VacuumReport:
        """Delete data files no version within ``retention_hours`` needs, with Delta's VACUUM.

        ``DeltaTable.vacuum`` deletes; the files it deleted are the table's files before minus after (it
        returns no list). A dry run is ``VACUUM ... DRY RUN``, which needs Delta's SQL extension
        (``spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension``; always there on Databricks).
        Delta's own refusal of retentions under 7 days is switched off for this call, as the embedded
        adapter allows them too. Delta's VACUUM also removes files no commit ever named (orphans of failed
        writes) and the directories it empties.

        Raises:
            UnsupportedByAdapter: a dry run on a session without Delta's SQL extension.
        """
        from delta.tables import DeltaTable

        uri = normalise_uri(table)
        self._latest(uri)
        hours = max(0, math.ceil(retention_hours))
        with self._retention_check_off(hours):
            if dry_run:
                try:
                    listed = self.spark.sql(f"VACUUM delta.`{uri}` RETAIN {hours} HOURS DRY RUN").collect()
                except Exception as exc:
                    raise UnsupportedByAdapter(
                        f"vacuum dry run on {uri}: Delta's VACUUM ... DRY RUN did not run ({str(exc)[:200]}); it "
                        "needs spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension on the session"
                    ) from None
                return VacuumReport(uri, True, tuple(sorted(_relative(uri, str(r[0])) for r in listed)), ())
            before = set(self._jvm.list_files(uri))
            DeltaTable.forPath(self.spark, uri).vacuum(float(hours))
            after = set(self._jvm.list_files(uri))
        return VacuumReport(uri, False, tuple(sorted(before - after)), ())

    @contextlib.contextmanager
    def _retention_check_off(self, hours: int) -> Iterator[None]:
        if hours >= timedelta(days=7).total_seconds() / 3600:
            yield
            return
        previous = self.spark.conf.get(_RETENTION_CHECK_CONF, None)
        self.spark.conf.set(_RETENTION_CHECK_CONF, "false")
        try:
            yield
        finally:
            if previous is None:
                self.spark.conf.unset(_RETENTION_CHECK_CONF)
            else:
                self.spark.conf.set(_RETENTION_CHECK_CONF, previous)


def _already_committed(uri: str, state: LogState, txns: Sequence[AppTransaction]) -> bool:
    done = [(t, state.app_versions.get(t.app_id)) for t in txns]
    committed = [t for t, v in done if v is not None and v >= t.version]
    if committed and len(committed) != len(txns):
        # Another writer got part of this progress in first: a conflict, not a replay.
        raise CommitConflict(
            uri, state.version, tuple(t.app_id for t in txns),
            f"some app transactions of this commit are already committed ({_txn_text(committed)}) and some "
            f"are not ({_txn_text([t for t in txns if t not in committed])}); a commit must be all new or all "
            "replayed",
        )
    return bool(committed)


def _log_path(relative: str) -> str:
    """Return a path relative to the table root as the Delta log spells it (URI-encoded, '/' kept)."""
    from urllib.parse import quote

    return quote(relative, safe="/=")


def _relative(uri: str, path: str) -> str:
    """Return a file VACUUM names (an absolute path or URI) relative to the table root."""
    for root in (uri, f"file:{uri}", f"file://{uri}"):
        if path.startswith(root + "/"):
            return path[len(root) + 1:]
    return path


def _txn_text(txns: Sequence[AppTransaction]) -> str:
    return ", ".join(f"{t.app_id}@{t.version}" for t in txns)


def _now_ms() -> int:
    return int(datetime.now(UTC).timestamp() * 1000)
