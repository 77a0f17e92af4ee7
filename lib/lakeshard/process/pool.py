"""How many cores this process may use, and the pool of threads the driver's short parallel jobs (Parquet writes)
run on."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["close_worker_pool", "driver_threads", "worker_pool"]

_pool: tuple[int, ThreadPoolExecutor] | None = None  # (the process that made it, the pool)
_pool_lock = threading.Lock()


def driver_threads(at_most: int = 4) -> int:
    """Return the cores this process may run on (its CPU affinity, else the machine's), at most ``at_most``."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(at_most, cores))


def worker_pool() -> ThreadPoolExecutor:
    """Return this process's pool of :func:`driver_threads` threads for short jobs that release the GIL.

    The threads live as long as the process: a pool made per call started new threads each time, each with an
    allocator heap and a stack of new memory (bench/results/ingest-profile.md). A process forked from this one
    gets a pool of its own (the parent's threads do not exist in the child). A job must not wait for other jobs
    of this pool: with every thread waiting, none would be left to run them.
    """
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(driver_threads(), thread_name_prefix="lakeshard-worker"))
        return _pool[1]


def close_worker_pool() -> None:
    """Stop this process's worker pool once the jobs given to it are done (a later :func:`worker_pool` makes a new
    one)."""
    global _pool
    with _pool_lock:
        made, _pool = _pool, None
    if made is not None and made[0] == os.getpid():
        made[1].shutdown(wait=True)
