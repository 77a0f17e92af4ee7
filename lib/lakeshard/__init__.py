"""lakeshard: exactly-once multi-tenant event ingestion into a Delta lakehouse.

The library is organised by capability (``lake``, ``runtime``, ``landing``, ``synth`` ...); import from
the submodules. Nothing here starts Spark or touches storage at import time.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    # The installed distribution's version, which pyproject.toml sets: one place to move it at a release.
    __version__ = version("lakeshard")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
