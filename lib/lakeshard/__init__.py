"""lakeshard: exactly-once multi-tenant event ingestion into a Delta lakehouse.

The library is organised by capability (``lake``, ``runtime``, ``landing``, ``synth`` ...); import from
the submodules. Nothing here starts Spark or touches storage at import time.
"""

from __future__ import annotations

__all__ = ["__version__"]

# The one place to move the version at a release: pyproject.toml reads it from here. Asking the installed
# distribution instead (importlib.metadata) scanned sys.path on every command's start, 20-40 ms.
__version__ = "0.12.0"
