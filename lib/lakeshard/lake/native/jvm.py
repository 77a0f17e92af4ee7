"""Delta's JVM classes behind a classic session's py4j gateway: the one module that touches JVM internals.

The native adapter calls Delta through these helpers: :class:`DeltaJvm` (Delta's internal classes),
:func:`commit_path` (whether this session's Delta has every internal method :class:`DeltaJvm` calls, with the
signature it calls it with), :class:`HadoopFiles` (the table's Hadoop filesystem: the log listed and read without a
Spark job), :func:`scala_call` (Scala methods with defaulted parameters), :func:`java_class_names` (the Java classes
of an unconverted py4j error) and :func:`gateway` (a session's py4j view, None under Spark Connect).
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakeshard.errors import EnvironmentProblem
from lakeshard.jvm import quick_replies
from lakeshard.lake.protocol.datafiles import is_hidden
from lakeshard.lake.protocol.log import is_temporary_commit

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DELTA_PACKAGES", "INTERNAL_API", "INTERNAL_PATH", "PUBLIC_PATH", "CommitPath", "DeltaJvm", "HadoopFiles",
           "JvmMethod", "commit_path", "delta_package", "gateway", "has_delta_jvm", "java_class_names", "jvm_has_class",
           "scala_call"]

# Where Delta's internal classes live: delta-spark, then Databricks Runtime.
DELTA_PACKAGES = ("org.apache.spark.sql.delta", "com.databricks.sql.transaction.tahoe")


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


def java_class_names(exc: BaseException) -> list[str]:
    """Return the Java class names of a py4j error's Java exception, most derived first ([] for other errors).

    :func:`lakeshard.lake.native.conflicts.is_concurrent_modification` uses it for errors PySpark did not convert.
    """
    java = getattr(exc, "java_exception", None)
    names: list[str] = []
    try:
        cls = java.getClass() if java is not None else None
        while cls is not None:
            names.append(str(cls.getName()))
            cls = cls.getSuperclass()
    except Exception:  # the gateway is gone (session stopped): no Java view of the error left
        return names
    return names


@dataclass(frozen=True)
class JvmMethod:
    """A public JVM method the internal commit path calls, as Java reflection names it.

    ``cls`` and the type names may start with ``{delta}.``, Delta's package on the session's classpath
    (:data:`DELTA_PACKAGES`). ``params`` are the parameter types exactly, or, ending in ``"..."``, the first ones of
    an overload with any more (a Scala method called with its defaults filled in by :func:`scala_call`); ``None``
    takes any overload. ``returns`` is the return type (``None``: any).
    """

    cls: str
    name: str
    params: tuple[str, ...] | None = ()
    returns: str | None = None

    def text(self) -> str:
        params = "..." if self.params is None else ",".join(self.params)
        return f"{self.cls}.{self.name}({params})" + (f": {self.returns}" if self.returns else "")


_SEQ = "scala.collection.immutable.Seq"  # Scala 2.13's Seq, Spark 4's
# Every JVM method DeltaJvm and NativeCommits call on Delta's internal classes, with the signature they call it with.
INTERNAL_API: tuple[JvmMethod, ...] = (
    JvmMethod("{delta}.DeltaLog$", "forTable", ("org.apache.spark.sql.SparkSession", "java.lang.String"),
              "{delta}.DeltaLog"),
    JvmMethod("{delta}.DeltaLog", "startTransaction", (), "{delta}.OptimisticTransaction"),
    JvmMethod("{delta}.DeltaLog", "update", None, "{delta}.Snapshot"),
    JvmMethod("{delta}.DeltaLog", "checkpoint", ("{delta}.Snapshot", "...")),
    JvmMethod("{delta}.Snapshot", "version", (), "long"),
    JvmMethod("{delta}.OptimisticTransaction", "readVersion", (), "long"),
    JvmMethod("{delta}.OptimisticTransaction", "txnVersion", ("java.lang.String",), "long"),
    JvmMethod("{delta}.OptimisticTransaction", "writeFiles", ("org.apache.spark.sql.Dataset",), _SEQ),
    JvmMethod("{delta}.OptimisticTransaction", "commit", (_SEQ, "{delta}.DeltaOperations$Operation"), "long"),
    JvmMethod("{delta}.actions.Action$", "fromJson", ("java.lang.String",), "{delta}.actions.Action"),
    JvmMethod("{delta}.actions.Action", "json", (), "java.lang.String"),
    JvmMethod("{delta}.DeltaOperations$Write$", "apply", ("org.apache.spark.sql.SaveMode", "..."),
              "{delta}.DeltaOperations$Write"),
    JvmMethod("{delta}.DeltaOperations$ManualUpdate$", "parameters", None),
    JvmMethod("org.apache.spark.api.python.PythonUtils", "toSeq", ("java.util.List",), _SEQ),
)

INTERNAL_PATH = "internal OptimisticTransaction path"
PUBLIC_PATH = "public writer path"


@dataclass(frozen=True)
class CommitPath:
    """Which way the native adapter commits on a session, and why.

    ``internal``: through Delta's ``OptimisticTransaction`` over py4j (:class:`DeltaJvm`): every commit lakeshard
    makes. Otherwise Delta's public writer and SQL only (:mod:`lakeshard.lake.native.public`), as under Spark
    Connect: what needs the internal API raises :class:`~lakeshard.errors.UnsupportedByAdapter` naming the reason.
    """

    internal: bool
    reason: str

    @property
    def name(self) -> str:
        return INTERNAL_PATH if self.internal else PUBLIC_PATH


# A member of Java's Method.toString: "public long a.b.C.name(x.Y,z.W) throws ...".
_METHOD = re.compile(r"(?P<returns>[\w.$\[\]]+) [\w.$]+\.(?P<name>[\w$]+)\((?P<params>[^)]*)\)")
_PATHS: weakref.WeakKeyDictionary[Any, tuple[tuple[JvmMethod, ...], CommitPath]] = weakref.WeakKeyDictionary()


def commit_path(spark: Any) -> CommitPath:
    """Return which way the native adapter commits on ``spark`` (:class:`CommitPath`), found once per session.

    The internal path is taken only when every method of :data:`INTERNAL_API` is on Delta's classes with the
    signature lakeshard calls it with, as Java reflection reports them, so another Delta release (or Databricks'
    Delta) that renamed or changed one leads to the public path instead of a py4j error at the first commit. Nothing
    is called to find out, and nothing here raises: a session without py4j, without Delta's internal classes, or
    whose py4j refuses reflection gets the public path with that reason.
    """
    api = INTERNAL_API
    try:
        cached = _PATHS.get(spark)
    except TypeError:  # a session object that takes no weak reference: asked again each time
        cached = None
    if cached is not None and cached[0] == api:
        return cached[1]
    found = _probe(spark, api)
    try:
        _PATHS[spark] = (api, found)
    except TypeError:
        pass
    return found


def _probe(spark: Any, api: Sequence[JvmMethod]) -> CommitPath:
    jvm = gateway(spark)
    if jvm is None:
        return CommitPath(False, "no py4j gateway (a Spark Connect session): Delta's public API on the server only")
    package = delta_package(jvm)
    if package is None:
        return CommitPath(False, f"Delta's DeltaLog class is in none of {list(DELTA_PACKAGES)}")
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        arrays = getattr(getattr(jvm, "scala.collection.immutable.ArraySeq$"), "MODULE$")
        signatures: dict[str, list[tuple[str, str, tuple[str, ...]]]] = {}
        for method in api:
            cls = method.cls.replace("{delta}", package)
            if cls not in signatures:
                signatures[cls] = _methods(arrays, loader, cls)
            if not any(_matches(method, package, found) for found in signatures[cls]):
                have = sorted({f"{n}({','.join(p)})" for n, _, p in signatures[cls] if n == method.name})
                return CommitPath(False, f"{method.text().replace('{delta}', package)} is not on this Delta's classes"
                                         + (f" (it has {have})" if have else ""))
    except Exception as exc:  # a class that does not load, py4j's security manager on a shared-access cluster
        text = " ".join(str(exc).split())
        return CommitPath(False, f"Delta's internal classes could not be inspected: {text[:300]}")
    return CommitPath(True, f"Delta's internal transaction API in {package} has the {len(api)} methods lakeshard "
                            "calls, with the signatures it calls them with")


def _methods(arrays: Any, loader: Any, cls: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """Return (name, return type, parameter types) of each public method of ``cls``: three py4j calls a class.

    The methods' text is joined in the JVM by Scala's ``mkString`` over the array (``arrays``: Scala's ``ArraySeq``
    object), as :meth:`HadoopFiles._described` does: py4j passes a ``Method[]`` to no Java method taking an
    ``Object[]``.
    """
    text = str(arrays.unsafeWrapArray(loader.loadClass(cls).getMethods()).mkString("\n"))
    return [(m["name"], m["returns"], tuple(p for p in m["params"].split(",") if p)) for m in _METHOD.finditer(text)]


def _matches(method: JvmMethod, package: str, found: tuple[str, str, tuple[str, ...]]) -> bool:
    name, returns, params = found
    if name != method.name:
        return False
    if method.returns is not None and returns != method.returns.replace("{delta}", package):
        return False
    if method.params is None:
        return True
    wanted = tuple(p.replace("{delta}", package) for p in method.params)
    if wanted and wanted[-1] == "...":
        return params[:len(wanted) - 1] == wanted[:-1]
    return params == wanted


class DeltaJvm:
    """Delta's JVM classes behind the session's py4j gateway."""

    def __init__(self, spark: SparkSession) -> None:
        jvm = gateway(spark)
        if jvm is None:
            raise EnvironmentProblem(
                "this operation needs Delta's internal JVM classes through py4j, and this Spark session has no py4j "
                "gateway (Spark Connect / databricks-connect); run it on a classic cluster (a job or notebook)"
            )
        self.jvm = jvm
        self.jspark = spark._jsparkSession
        # The session's Hadoop configuration with its SQL settings (credentials set with spark.conf.set included).
        self.files = HadoopFiles(jvm, self.jspark.sessionState().newHadoopConf())
        self._package: str | None = None
        self._append: Any = None

    @property
    def package(self) -> str:
        """Return the package of Delta's internal classes on this classpath (looked up once)."""
        if self._package is None:
            self._package = self._find_package()
        return self._package

    def _find_package(self) -> str:
        package = delta_package(self.jvm)
        if package is not None:
            return package
        raise EnvironmentProblem(
            f"Delta's DeltaLog class is in none of {list(DELTA_PACKAGES)} on the Spark session's classpath; the native "
            "adapter needs delta-spark's jars or a Databricks runtime"
        )

    def object(self, name: str) -> Any:
        """Return the Scala ``object`` ``name`` (relative to Delta's package), i.e. its ``MODULE$``."""
        return getattr(getattr(self.jvm, f"{self.package}.{name}$"), "MODULE$")

    def delta_log(self, uri: str) -> Any:
        quick_replies(self.jvm)  # this thread's replies (a commit's actions, its files) without Nagle's delay
        return self.object("DeltaLog").forTable(self.jspark, uri)

    def action(self, action: Mapping[str, Any]) -> Any:
        return self.object("actions.Action").fromJson(json.dumps(action, separators=(",", ":")))

    def seq(self, items: Sequence[Any]) -> Any:
        java_list = self.jvm.java.util.ArrayList()
        for item in items:
            java_list.add(item)
        return self.jvm.org.apache.spark.api.python.PythonUtils.toSeq(java_list)

    def activate(self) -> None:
        """Make the store's session the active one of this thread's JVM thread.

        Delta's ``OptimisticTransaction`` reads ``userMetadata`` (and every other conf) from the thread's active
        session; a thread of a pool, or a second notebook session, may have none or another one, and its commit
        would silently lose lakeshard's metadata.
        """
        self.jvm.org.apache.spark.sql.SparkSession.setActiveSession(self.jspark)

    def manual_update(self) -> Any:
        """Return Delta's ``Manual Update`` operation: what a commit that removes files records.

        Delta derives no checksum incrementally for it: each such commit recomputes the table's whole state (a Spark
        job over the log) to write its ``.crc`` file.
        """
        return self.object("DeltaOperations$ManualUpdate")

    def append_operation(self) -> Any:
        """Return Delta's ``WRITE`` operation in ``Append`` mode (looked up once): what an append records.

        Unlike ``Manual Update`` it lets Delta derive the commit's checksum from the previous one, so an append
        costs no reconstruction of the table's state (measured: 0.27 s a commit against 1.4 s).
        """
        if self._append is None:
            mode = self.jvm.org.apache.spark.sql.SaveMode.Append
            self._append = scala_call(self.object("DeltaOperations$Write"), "apply", mode, max_defaults=16)
        return self._append

    @staticmethod
    def read_app_ids(txn: Any, app_ids: Sequence[str]) -> None:
        """Make ``txn`` depend on each app id: a concurrent commit carrying one of them then fails it.

        ``txn.txnVersion(id)`` does this by adding the id to the transaction's ``readTxn``, the set Delta's
        conflict check compares a winning commit's app ids with, and also answers the id's version from the
        table's whole state, which Delta computes for it (about 0.5 s a commit on a small table). lakeshard reads
        the versions from the log itself (:meth:`~lakeshard.lake.native.commit.NativeCommits.replayed`), so it
        adds the ids to ``readTxn`` directly (a Scala ``protected val``, public in the bytecode); where that field
        is not there (another Delta), ``txnVersion`` does the same at its cost.
        """
        try:
            reads = txn.readTxn()
            for app_id in app_ids:
                reads.addOne(app_id)
        except Exception as exc:
            if hasattr(exc, "java_exception") or "does not exist" not in str(exc):
                raise
            for app_id in app_ids:
                txn.txnVersion(app_id)

    def write_files(self, txn: Any, df: Any) -> list[dict[str, Any]]:
        """Return the protocol JSON of the actions ``txn.writeFiles`` made writing ``df`` (a classic DataFrame)."""
        return self.actions_json(txn.writeFiles(df._jdf))

    @staticmethod
    def actions_json(seq: Any) -> list[dict[str, Any]]:
        """Return the protocol JSON of each action in a Scala ``Seq[Action]``."""
        out = []
        iterator = seq.iterator()
        while iterator.hasNext():
            out.append(json.loads(iterator.next().json()))
        return out

    def delete(self, location: str) -> None:
        self.files.delete(location)


# One Hadoop FileStatus as its toString writes it (Hadoop 3: "...{path=P; isDirectory=B; ...; modification_time=N;").
_STATUS = re.compile(
    r"\{path=(?P<path>.+?); isDirectory=(?P<directory>true|false);(?:.*?;)? modification_time=(?P<mtime>\d+);")


class HadoopFiles:
    """Lists and reads files through the session's Hadoop filesystem over py4j: no Spark job per call.

    The same view of storage as Spark's ``binaryFile`` source (:class:`~lakeshard.lake.native.files.SparkFiles`):
    the session's Hadoop configuration with its SQL settings applied (``sessionState.newHadoopConf``, what a
    Spark read and Delta's own log use), and the names Spark leaves out (starting with ``_`` or ``.``) left out.

    Args:
        jvm: the session's py4j JVM view; conf: a Hadoop ``Configuration`` of the session.
    """

    def __init__(self, jvm: Any, conf: Any) -> None:
        self.jvm = jvm
        self.conf = conf
        self._arrays: Any = None  # Scala's ArraySeq object, looked up at the first listing

    @classmethod
    def of(cls, spark: SparkSession) -> HadoopFiles | None:
        """Return the session's Hadoop files, or None where py4j gives no Hadoop configuration (Spark Connect, a
        cluster whose py4j allows no such call)."""
        jvm = gateway(spark)
        if jvm is None:
            return None
        try:
            return cls(jvm, spark._jsparkSession.sessionState().newHadoopConf())
        except Exception:  # e.g. py4j's security manager on a shared-access cluster
            return None

    def _path(self, location: str) -> tuple[Any, Any]:
        quick_replies(self.jvm)  # a listing or a commit file over 8 KB would wait 40 ms for its reply otherwise
        path = self.jvm.org.apache.hadoop.fs.Path(location)
        return path.getFileSystem(self.conf), path

    def list_dir(self, location: str) -> list[tuple[str, str, int]]:
        """Return (name, location, modification millis) of each file of a directory; [] when it is absent."""
        fs, path = self._path(location)
        try:
            statuses = fs.listStatus(path)
        except Exception as exc:
            if _not_found(exc):
                return []
            raise
        described = self._described(statuses)
        if described is None:  # each py4j call costs ~0.2 ms: four a file
            described = [(str(s.getPath().toString()), not s.isDirectory(), int(s.getModificationTime()))
                         for s in statuses]
        out = []
        for location, is_file, mtime in described:
            name = location.rstrip("/").rsplit("/", 1)[-1]
            if is_file and not name.startswith(("_", ".")):
                out.append((name, location, mtime))
        return out

    def _described(self, statuses: Any) -> list[tuple[str, bool, int]] | None:
        """Return (location, is a file, modification millis) of each status, from one line of text per status made
        in the JVM (Hadoop's ``FileStatus.toString``, joined by Scala's ``mkString``): two py4j calls for a whole
        listing, where a log kept 30 days holds thousands of files. None when the text does not read back as
        exactly one status a line, or the first status asked directly disagrees with its line (another Hadoop's
        format, another Scala, a wrapping status class): then the statuses are asked one by one.
        """
        try:
            if self._arrays is None:
                self._arrays = getattr(getattr(self.jvm, "scala.collection.immutable.ArraySeq$"), "MODULE$")
            text = str(self._arrays.unsafeWrapArray(statuses).mkString("\n"))
            count = len(statuses)
        except Exception:
            return None
        lines = text.split("\n") if text else []
        if len(lines) != count:
            return None
        out = []
        for line in lines:
            found = _STATUS.search(line)
            if found is None:
                return None
            out.append((found["path"], found["directory"] == "false", int(found["mtime"])))
        # A status class that answers its getters from another object (viewfs' ViewFsFileStatus) prints empty fields
        # ("path=null"): the first status, asked directly, must say what its line says.
        if out:
            first = statuses[0]
            asked = (str(first.getPath().toString()), not first.isDirectory(), int(first.getModificationTime()))
            if asked != out[0]:
                return None
        return out

    def read_texts(self, locations: Sequence[str]) -> dict[str, str]:
        """Return each file's UTF-8 text by the location it was asked for; files not there are left out."""
        out = {}
        for location in locations:
            try:
                out[location] = self.read_text(location)
            except FileNotFoundError:
                continue
        return out

    def read_text(self, location: str) -> str:
        """Return one file's UTF-8 text.

        Raises:
            FileNotFoundError: the file is not there.
        """
        fs, path = self._path(location)
        try:
            stream = fs.open(path)
        except Exception as exc:
            if _not_found(exc):
                raise FileNotFoundError(location) from None
            raise
        try:
            return str(self.jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def list_files(self, root: str) -> list[str]:
        """Return every data file under ``root`` (recursively, ``_delta_log`` and hidden files left out), relative."""
        fs, path = self._path(root)
        if not fs.exists(path):
            return []
        prefix = str(fs.makeQualified(path).toString()).rstrip("/") + "/"
        out = []
        iterator = fs.listFiles(path, True)
        while iterator.hasNext():
            full = str(iterator.next().getPath().toString())
            relative = full[len(prefix):] if full.startswith(prefix) else full
            if not is_hidden(relative):
                out.append(relative)
        return out

    def delete(self, location: str) -> None:
        fs, path = self._path(location)
        fs.delete(path, True)

    def remove_uncommitted_log(self, location: str) -> bool:
        """Remove the log folder ``location`` when it holds nothing but empty folders and temporary commit files
        (:func:`~lakeshard.lake.protocol.log.is_temporary_commit`); return whether it is gone. Folders are deleted
        non-recursively, so a file written into one meanwhile stays."""
        fs, path = self._path(location)
        try:
            kinds = [(s.getPath(), s.isDirectory()) for s in fs.listStatus(path)]
            if any(not folder and not is_temporary_commit(str(p.getName())) for p, folder in kinds):
                return False
            for p, folder in kinds:
                if not fs.delete(p, False) and folder:  # a temporary file's checksum may go with the file
                    return False
            fs.delete(path, False)
        except Exception as exc:  # a folder not empty (the filesystem refuses), or gone meanwhile
            if not _not_found(exc):
                return False
        return not fs.exists(path)


def _not_found(exc: BaseException) -> bool:
    """Return whether a py4j error is Java's ``FileNotFoundException`` (a path that is not there)."""
    return any(n.endswith(".FileNotFoundException") for n in java_class_names(exc)) or \
        "java.io.FileNotFoundException" in str(exc)


def gateway(spark: Any) -> Any:
    """Return the session's py4j JVM view, or None for a session without one (Spark Connect)."""
    try:
        return getattr(spark.sparkContext, "_jvm", None)
    except Exception:  # a Spark Connect session raises on .sparkContext
        return None


def jvm_has_class(jvm: Any, name: str) -> bool:
    """Return whether the py4j JVM view can load the class ``name``.

    py4j resolves names with the thread's context class loader, which sees jars added with ``spark.jars``;
    ``Class.forName(name)`` called through py4j would use py4j's own loader and miss them.
    """
    from py4j.java_gateway import JavaClass

    try:
        return isinstance(getattr(jvm, name), JavaClass)
    except Exception:
        return False


def delta_package(jvm: Any) -> str | None:
    """Return which of :data:`DELTA_PACKAGES` holds Delta's internal classes (``DeltaLog``) on the py4j JVM view
    ``jvm``, or None."""
    return next((p for p in DELTA_PACKAGES if jvm_has_class(jvm, f"{p}.DeltaLog")), None)


def has_delta_jvm(spark: Any) -> bool:
    """Return whether the session can load Delta's JVM classes (Databricks, delta-spark jars); False for a
    session without a py4j gateway (Spark Connect)."""
    jvm = gateway(spark)
    return jvm is not None and jvm_has_class(jvm, "io.delta.tables.DeltaTable")
