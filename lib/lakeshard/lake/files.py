"""Where a table's files live: the pyarrow filesystem behind a local path or a URI."""

from __future__ import annotations

import pyarrow.fs as pafs

__all__ = ["filesystem"]


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """Return the filesystem holding ``uri`` and the path on it (a plain path is local)."""
    if "://" in uri:
        fs, path = pafs.FileSystem.from_uri(uri)
        return fs, path
    return pafs.LocalFileSystem(), uri
