"""How many cores this process may use, for the driver's thread pools (parse, Parquet writes)."""

from __future__ import annotations

import os

__all__ = ["driver_threads"]


def driver_threads(at_most: int = 4) -> int:
    """Return the cores this process may run on (its CPU affinity, else the machine's), at most ``at_most``."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(at_most, cores))
