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
Without py4j (Spark Connect) it gives :class:`LocalFirstFiles`: a log folder that this process's own filesystem
shows exactly as Spark lists it (a Connect server on this machine) is then listed and read with ``os`` calls.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from lakeshard.lake.protocol.datafiles import is_hidden
from lakeshard.lake.protocol.log import is_temporary_commit

if TYPE_CHECKING:
    from pyspark.sql import Column, Row, SparkSession

__all__ = ["LocalFirstFiles", "LogFiles", "SparkFiles", "log_files"]

# Mounts of cloud storage (Unity Catalog volumes, DBFS) whose local view of a file the cluster just wrote may lag
# behind the cluster's: their folders are always listed through Spark.
_MOUNTED = ("/Volumes/", "/dbfs/")
# One file's modification time as Spark and as this process's filesystem give it differ by rounding, never more.
_MTIME_SLACK_MS = 1000


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
    return hadoop if hadoop is not None else LocalFirstFiles(spark)


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


class LocalFirstFiles(SparkFiles):
    """:class:`SparkFiles`, except that a log folder this process's own filesystem shows as Spark does is listed and
    read locally: no Spark job for it (under Spark Connect a writer step lists a table's log some thirty times,
    each listing a job of ~70 ms on a local server, more on a cluster).

    A folder is served locally only once one of Spark's listings of it, not empty, named exactly the files a local
    listing names, each with the same modification time (within a second): the proof that both views are one
    filesystem (a Connect server on this machine), which a server elsewhere whose paths happen to exist here too
    cannot give. Until then, and for every folder outside this process's reach (cloud URIs, ``dbfs:``) or on a
    mount of cloud storage (``/Volumes``, ``/dbfs``, whose local view may lag behind the cluster's writes), every
    call goes to Spark. A log's commit files are never rewritten, so one that is listed can be read locally.
    """

    def __init__(self, spark: SparkSession) -> None:
        super().__init__(spark)
        self._local: dict[str, tuple[str, str]] = {}  # folder asked -> (its local path, Spark's spelling of it)

    def list_dir(self, location: str) -> list[tuple[str, str, int]]:
        """Return (name, location, modification millis) of each file of a directory; [] when it is absent."""
        known = self._local.get(location)
        if known is not None:
            served, spelled = known
            return [(name, f"{spelled}/{name}", mtime) for name, mtime in _scan(served)]
        listing = super().list_dir(location)
        folder = _local_folder(location)
        if listing and folder is not None:
            local = dict(_scan(folder))
            if local.keys() == {n for n, _, _ in listing} and all(
                    abs(local[n] - mtime) <= _MTIME_SLACK_MS for n, _, mtime in listing):
                self._local[location] = (folder, listing[0][1].rsplit("/", 1)[0])
        return listing

    def read_texts(self, locations: Sequence[str]) -> dict[str, str]:
        """Return each file's UTF-8 text by the location it was asked for; files not there are left out. Files of a
        folder served locally are read here, the others in one Spark job."""
        served = {spelled: folder for folder, spelled in self._local.values()}
        out: dict[str, str] = {}
        rest = []
        for location in locations:
            spelled, _, name = location.rpartition("/")
            folder = served.get(spelled)
            if folder is None:
                rest.append(location)
                continue
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    out[location] = f.read()
            except FileNotFoundError:
                continue
        return {**out, **super().read_texts(rest)}


def _local_folder(location: str) -> str | None:
    """Return the path of folder ``location`` on this process's filesystem, or None where it is out of reach or on
    a mount of cloud storage (:data:`_MOUNTED`)."""
    local = _bare(location)
    if not local.startswith("/") or local.startswith(_MOUNTED):
        return None
    return local


def _scan(folder: str) -> list[tuple[str, int]]:
    """Return (name, modification millis) of each file of a local folder, the names Spark leaves out (starting with
    ``_`` or ``.``) left out; [] when the folder is absent."""
    try:
        with os.scandir(folder) as entries:
            return [(e.name, e.stat().st_mtime_ns // 1_000_000) for e in entries
                    if not is_hidden(e.name) and e.is_file()]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _bare(location: str) -> str:
    """Return a location without a ``file:`` scheme (Spark writes ``file:/x``, users ``/x`` or ``file:///x``)."""
    if location.startswith("file:"):
        return "/" + location[len("file:"):].lstrip("/")
    return location
