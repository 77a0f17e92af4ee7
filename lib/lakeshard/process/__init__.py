"""What a lakeshard process holds for its batch work: its pool of threads (:mod:`.pool`), the jobs one thread owns
and others may join (:mod:`.sharing`), and its memory settings (:mod:`.memory`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakeshard._lazy import lazy_exports
from lakeshard.process.memory import HUGE_PAGES_ENV, huge_pages_disabled, prepare_process_memory

if TYPE_CHECKING:
    from lakeshard.process.pool import close_worker_pool, driver_threads, worker_pool
    from lakeshard.process.sharing import SharedJobs

# A command sets its memory first thing; the threads load with their first user.
__all__ = [
    "HUGE_PAGES_ENV", "SharedJobs", "close_worker_pool", "driver_threads", "huge_pages_disabled",
    "prepare_process_memory", "worker_pool",
]

__getattr__, __dir__ = lazy_exports(globals())
