"""What a lakeshard process holds for its batch work: its pool of threads (:mod:`.pool`), the jobs one thread owns
and others may join (:mod:`.sharing`), and its memory settings (:mod:`.memory`)."""

from __future__ import annotations

from lakeshard.process.memory import HUGE_PAGES_ENV, huge_pages_disabled, prepare_process_memory
from lakeshard.process.pool import close_worker_pool, driver_threads, worker_pool
from lakeshard.process.sharing import SharedJobs

__all__ = [
    "HUGE_PAGES_ENV", "SharedJobs", "close_worker_pool", "driver_threads", "huge_pages_disabled",
    "prepare_process_memory", "worker_pool",
]
