"""A Delta table's files as Spark sees them: the native adapter's view of storage.

:class:`SparkFiles` lists and reads files with Spark's ``binaryFile`` source, so it works on a classic session
and under Spark Connect alike, on every filesystem the cluster reaches (cloud URIs, Unity Catalog volumes,
DBFS) with the cluster's own credentials, exactly the storage Delta itself writes to. Spark leaves out names
starting with ``_`` or ``.`` (``_last_checkpoint``, ``_sidecars``, ``.crc`` files), which the log reader
does not need.

Each of its calls is a Spark job (60 ms on two local cores, more on a cluster), and a writer step looks at the
log some thirty times. Where the session has py4j, :func:`log_files` gives
:class:`~lakeshard.lake.native.jvm.HadoopFiles` instead: the same filesystem and configuration, the same names
left out, a listing of a few milliseconds (80 to 100 ms for 2,000 files, where ``binaryFile`` takes ~500).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from lakeshard.lake.protocol.datafiles import is_hidden
from lakeshard.lake.protocol.log import is_temporary_commit

if TYPE_CHECKING:
    from pyspark.sql import Column, Row, SparkSession

__all__ = ["LogFiles", "SparkFiles", "log_files"]


class LogFiles(Protocol):
    """What the native adapter asks of storage: list a directory, read small files, list a table's data files."""

    def list_dir(self, location: str) -> list[tuple[str, str, int]]: ...

    def read_texts(self, locations: Sequence[str]) -> dict[str, str]: ...

    def read_text(self, location: str) -> str: ...

    def list_files(self, root: str) -> list[str]: ...

    def remove_uncommitted_log(self, location: str) -> bool: ...


def log_files(spark: SparkSession) -> LogFiles:
    """Return the session's Hadoop filesystem through py4j where it has one, else Spark's ``binaryFile`` source
    (Spark Connect)."""
    from lakeshard.lake.native.jvm import HadoopFiles

    hadoop = HadoopFiles.of(spark)
    return hadoop if hadoop is not None else SparkFiles(spark)


class SparkFiles:
    """Lists and reads files through ``spark.read.format("binaryFile")``.

    Args:
        spark: any session (classic or Spark Connect) whose cluster reaches the table's storage.
    """

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def _collect(self, paths: Sequence[str], *columns: Column | str, recursive: bool = False) -> list[Row]:
        """Return ``columns`` of each file under ``paths``; [] when a path does not exist (no table there yet).

        The whole read is guarded: a classic session reports a missing path when the read is defined, a Spark
        Connect session only when it runs.
        """
        reader = self.spark.read.format("binaryFile")
        if recursive:
            reader = reader.option("recursiveFileLookup", "true")
        try:
            return reader.load(list(paths)).select(*columns).collect()
        except Exception as exc:
            if "PATH_NOT_FOUND" in str(exc) or "does not exist" in str(exc):
                return []
            raise

    def list_dir(self, location: str) -> list[tuple[str, str, int]]:
        """Return (name, location, modification millis) of each file of a directory; [] when it is absent."""
        from pyspark.sql import functions as F

        rows = self._collect([location], "path", F.unix_millis("modificationTime").alias("mtime"))
        return [(str(r.path).rstrip("/").rsplit("/", 1)[-1], str(r.path), int(r.mtime)) for r in rows]

    def read_texts(self, locations: Sequence[str]) -> dict[str, str]:
        """Return each file's UTF-8 text by the location it was asked for, read in one Spark job."""
        if not locations:
            return {}
        by_name = {str(r.path).rsplit("/", 1)[-1]: bytes(r.content).decode("utf-8")
                   for r in self._collect(locations, "path", "content")}
        return {loc: by_name[loc.rsplit("/", 1)[-1]] for loc in locations if loc.rsplit("/", 1)[-1] in by_name}

    def read_text(self, location: str) -> str:
        """Return one file's UTF-8 text.

        Raises:
            FileNotFoundError: the file is not there.
        """
        found = self.read_texts([location])
        if location not in found:
            raise FileNotFoundError(location)
        return found[location]

    def list_files(self, root: str) -> list[str]:
        """Return every data file under ``root`` (recursively; ``_delta_log`` and hidden files left out), relative."""
        prefix = _bare(root).rstrip("/") + "/"
        out = []
        for r in self._collect([root], "path", recursive=True):
            full = _bare(str(r.path))
            relative = full[len(prefix):] if full.startswith(prefix) else full
            if not is_hidden(relative):
                out.append(relative)
        return out

    def remove_uncommitted_log(self, location: str) -> bool:
        """Remove the log folder ``location`` when it holds nothing but empty folders and temporary commit files
        (:func:`is_temporary_commit`); return whether it is gone.

        Spark has no call that removes a file, so this works where the folder is on this process's own
        filesystem (a local path, or a Unity Catalog volume mounted at ``/Volumes``); elsewhere it returns False.
        Folders are removed with ``os.rmdir``, so a file written into one meanwhile stays.
        """
        local = _bare(location)
        if local.startswith("dbfs:/Volumes/"):  # how a Databricks runtime spells a volume path
            local = local[len("dbfs:"):]
        if not local.startswith("/"):  # another filesystem (s3:, abfss:, dbfs: outside volumes), out of reach
            return False
        try:
            entries = list(os.scandir(local))
            if any(not e.is_dir(follow_symlinks=False) and not is_temporary_commit(e.name) for e in entries):
                return False
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    os.rmdir(entry.path)  # a folder that is not empty raises
                else:
                    os.remove(entry.path)
            os.rmdir(local)
        except FileNotFoundError:
            pass
        except OSError:
            return False
        return not os.path.lexists(local)


def _bare(location: str) -> str:
    """Return a location without a ``file:`` scheme (Spark writes ``file:/x``, users ``/x`` or ``file:///x``)."""
    if location.startswith("file:"):
        return "/" + location[len("file:"):].lstrip("/")
    return location
