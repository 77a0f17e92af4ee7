"""Java's class-data archive of Spark's classes: a local Spark JVM that maps it starts in about half the time.

A local session spends most of its start reading, verifying and linking some 13,000 classes from Spark's jars.
Java (13 and later) can write the classes a run loaded to one file as it exits (``-XX:ArchiveClassesAtExit``) and
map that file into every later JVM (``-XX:SharedArchiveFile``). ``make env`` makes the archive once per Java and
pyspark (:func:`main`, a short local Spark run, about a minute), and
:func:`~lakeshard.runtime.local_spark_conf` hands it to every local driver JVM lakeshard starts: the demo's, the
notebooks', the command line's, a local Spark Connect server's. Measured here (2 cores): a session with Delta's jars
started in 5.7-7.1 s with it, 8.8-9.2 s without.

The archive only fits the Java that wrote it and the class path it saw: Spark's jars and its configuration folder
(``$SPARK_CONF_DIR``, else ``$SPARK_HOME/conf``; Java refuses to write an archive while a folder with files in it is
on the class path). The file name carries those, so another Java or pyspark looks for an archive of its own; a JVM
the archive does not fit anyway runs without it, silently, as it would have before. Delta's jars (``spark.jars``)
are loaded by Spark's own class loader and are not in it: an archive written by a run that also committed through
Delta made the same sessions start later, not sooner (6.5-7.5 s against 5.4-6.0 s).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["archive_options", "archive_path", "java_executable", "make_archive"]

# Where archives are kept: in the virtual environment, else (read-only) in the temporary folder.
_FOLDERS = (Path(sys.prefix), Path(tempfile.gettempdir()))
_FOLDER_NAME = "lakeshard-jvm"
# A run of the archive's JVM takes about 45 s on two cores; one that hangs is stopped, and there is no archive.
_TIMEOUT_S = 300
_RUN = """
import sys
from pyspark.sql import SparkSession
out = sys.argv[1]
spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
df = spark.range(2000).selectExpr("id % 7 AS k", "CAST(id AS STRING) AS s", "current_timestamp() AS ts")
df.write.mode("overwrite").partitionBy("k").parquet(out)
spark.read.parquet(out).groupBy("k").agg({"s": "max", "ts": "min"}).orderBy("k").collect()
jvm = spark.sparkContext._gateway.proc  # the JVM writes the archive as it exits: wait for that
spark.stop()
jvm.stdin.close()
jvm.wait()
"""


def java_executable() -> Path | None:
    """Return the ``java`` pyspark's launcher runs (``$JAVA_HOME/bin/java``, else the one on ``PATH``), if any.

    The one lookup of Java in lakeshard: :func:`~lakeshard.runtime.find_java` checks its version.
    """
    java_home = os.environ.get("JAVA_HOME", "")
    if java_home:
        java = Path(java_home) / "bin" / "java"
        return java if java.exists() else None
    found = shutil.which("java")
    return Path(found) if found else None


def _name() -> str:
    """Return the archive's file name for this Java, pyspark and Spark configuration folder."""
    import pyspark

    java = java_executable() or Path("java")
    home = os.environ.get("SPARK_HOME") or str(Path(pyspark.__file__ or "").parent)
    conf = os.environ.get("SPARK_CONF_DIR") or str(Path(home) / "conf")  # as Spark's launcher puts it
    key = "|".join([os.path.realpath(java), pyspark.__version__, os.path.realpath(home), os.path.realpath(conf)])
    return f"spark-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def archive_path(name: str | None = None) -> Path | None:
    """Return the archive made for this Java and pyspark, or None when there is none."""
    name = name or _name()
    for base in _FOLDERS:
        candidate = base / _FOLDER_NAME / name
        if candidate.is_file() and candidate.stat().st_size:
            return candidate
    return None


def archive_options() -> list[str]:
    """Return the JVM options that map the archive (Java's notes on it silenced), or none when there is none."""
    archive = archive_path()
    return [f"-XX:SharedArchiveFile={archive}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"] if archive else []


def make_archive(java_options: Sequence[str] = (), timeout_s: float = _TIMEOUT_S) -> Path | None:
    """Return the archive, made first when missing by one short local Spark run in a child process.

    ``java_options`` go to that JVM as well (system properties a caller's JVMs all get). The archive is written
    under a temporary name and renamed into place, so processes starting together never read half of one. None
    when it cannot be made (no folder to write, Java refused, the run failed or took longer than ``timeout_s``):
    the JVMs then start without one.
    """
    name = _name()
    existing = archive_path(name)
    if existing is not None:
        return existing
    for base in _FOLDERS:
        folder = base / _FOLDER_NAME
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(folder, os.W_OK):
            break
    else:
        return None
    archive = folder / name
    partial = folder / f".{archive.name}.{os.getpid()}"
    # Not with -Xlog:cds=off: Java 17 then writes no archive. Its warnings (a line per class it leaves out) go
    # nowhere.
    env = {**os.environ, "SPARK_SUBMIT_OPTS": " ".join([*java_options, f"-XX:ArchiveClassesAtExit={partial}"])}
    with tempfile.TemporaryDirectory(prefix="lakeshard-jvm-archive-") as scratch:
        try:
            subprocess.run([sys.executable, "-c", _RUN, str(Path(scratch) / "out")], env=env, cwd=scratch,
                           timeout=timeout_s, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        except (OSError, subprocess.TimeoutExpired):
            pass
    if partial.is_file() and partial.stat().st_size:
        os.replace(partial, archive)
    partial.unlink(missing_ok=True)
    return archive_path(name)


def main() -> None:
    """Make the archive if missing, saying where it was made or why there is none; quiet when it exists (never a
    failure: it only saves time)."""
    if java_executable() is None:
        print("no Java class-data archive for Spark: no Java found (JAVA_HOME unset or wrong, no 'java' on PATH)")
        return
    had = archive_path()
    archive = make_archive()
    if archive is None:
        print("no Java class-data archive for Spark: the archive run did not write one (local Spark sessions "
              "start without it)")
    elif had is None:
        print(f"Java class-data archive of Spark's classes made: {archive} (local Spark sessions start sooner)")
