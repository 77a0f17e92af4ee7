"""Where a table's files live: the pyarrow filesystem behind a local path or a URI."""

from __future__ import annotations

import os
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs

__all__ = ["filesystem", "normalise_uri"]


def normalise_uri(table: str) -> str:
    """Return a local table location as a plain absolute path, and a remote one as its URI."""
    if table.startswith("file:"):
        # file:/x, file:///x and delta-rs' percent-encoded file:///odd%20names all mean a local path.
        return os.path.abspath(unquote(urlparse(table).path))
    if "://" in table:
        return table.rstrip("/")
    return os.path.abspath(table)


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """Return the filesystem holding ``uri`` and the path on it (a plain path is local)."""
    if "://" in uri:
        fs, path = pafs.FileSystem.from_uri(uri)
        return fs, path
    return pafs.LocalFileSystem(), uri
