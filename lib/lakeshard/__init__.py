"""lakeshard: exactly-once multi-tenant event ingestion into a Delta lakehouse.

The library is organised by capability (``lake``, ``runtime``, ``landing``, ``synth`` ...); import from
the submodules. Nothing here starts Spark or touches storage at import time.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
