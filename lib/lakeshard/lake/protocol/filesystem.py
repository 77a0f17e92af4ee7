"""Where a table's files live: the pyarrow filesystem behind a local path or a URI, a table location in one
spelling, and a commit file's text."""

from __future__ import annotations

import os
import re
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs

__all__ = ["filesystem", "normalise_uri", "read_commit_text"]


def normalise_uri(table: str) -> str:
    """Return a local table location as a plain absolute path, and a remote one as its URI.

    A URI with a scheme and a single slash (``dbfs:/Volumes/...``, as a Databricks runtime reports paths) stays a
    URI: it is not a relative local path.
    """
    if table.startswith("file:"):
        # file:/x, file:///x and delta-rs' percent-encoded file:///odd%20names all mean a local path.
        return os.path.abspath(unquote(urlparse(table).path))
    if "://" in table or _SCHEME_PATH.match(table):
        return table.rstrip("/")
    return os.path.abspath(table)


# A scheme of two or more characters then a path (``dbfs:/x``); one letter would be a Windows drive (``C:/x``).
_SCHEME_PATH = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:/")


def read_commit_text(uri: str, version: int) -> str | None:
    """Return the text of the table's commit file for ``version``, or None when the log no longer holds it."""
    fs, base = filesystem(uri)
    try:
        with fs.open_input_stream(f"{base}/_delta_log/{version:020d}.json") as stream:
            return str(stream.read().decode("utf-8"))
    except OSError:  # not found: never written, or removed by log cleanup after a checkpoint
        return None


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """Return the filesystem holding ``uri`` and the path on it (a plain path is local).

    ``dbfs:`` paths, as a Databricks runtime qualifies them, are read where the runtime mounts them for Python:
    a Unity Catalog volume's ``dbfs:/Volumes/x`` at ``/Volumes/x``, anything else ``dbfs:/x`` at ``/dbfs/x``.
    """
    if "://" in uri:
        fs, path = pafs.FileSystem.from_uri(uri)
        return fs, path
    if uri.startswith("dbfs:/"):
        path = uri[len("dbfs:"):]
        return pafs.LocalFileSystem(), path if path.startswith("/Volumes/") else f"/dbfs{path}"
    return pafs.LocalFileSystem(), uri
