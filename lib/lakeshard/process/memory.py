"""How a lakeshard command's process treats the memory of batches that come and go.

A fused batch parses, gathers and writes a few hundred MiB of Arrow buffers and frees them again. Two settings of
the process decide what that costs (bench/results/ingest-profile.md):

* Arrow's allocator (mimalloc) keeps the pages it frees for the next batch instead of handing them back at once
  (``MIMALLOC_PURGE_DELAY=-1``), so each batch's buffers are not faulted in afresh;
* no transparent huge pages: mimalloc and numpy ask the kernel for them on their large regions, and the first touch
  of any byte of a huge page makes the kernel zero all 2 MiB of it. Buffers that are written once and freed pay that
  for memory they never use; on a virtual machine whose host reclaims freed memory it was up to a third of a run's
  CPU. The process's own flag (``prctl(PR_SET_THP_DISABLE)``) turns them off for this process and its children
  only, never the machine's setting.
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["HUGE_PAGES_ENV", "huge_pages_disabled", "prepare_process_memory"]

HUGE_PAGES_ENV = "LAKESHARD_HUGE_PAGES"  # "1": keep the machine's transparent huge pages for this process
_PR_SET_THP_DISABLE = 41
_PR_GET_THP_DISABLE = 42


def prepare_process_memory() -> None:
    """Set this process's memory settings for batch work, before its first large allocation.

    Arrow's allocator reads its options when pyarrow loads: where pyarrow is loaded already, only the huge pages are
    turned off. A value set in the environment wins (``MIMALLOC_PURGE_DELAY``; :data:`HUGE_PAGES_ENV` ``=1`` gives
    the process the machine's huge pages, even where its parent had turned them off). Where the kernel has no such
    flag (not Linux, or older than 3.15) nothing changes.
    """
    if "pyarrow" not in sys.modules:
        os.environ.setdefault("MIMALLOC_PURGE_DELAY", "-1")
    # Set either way: the flag is inherited, and a process started by one that turned huge pages off has them off.
    _prctl(_PR_SET_THP_DISABLE, 0 if os.environ.get(HUGE_PAGES_ENV, "") == "1" else 1)


def huge_pages_disabled() -> bool:
    """Return whether transparent huge pages are turned off for this process (False where it cannot be known)."""
    return _prctl(_PR_GET_THP_DISABLE, 0) == 1


def _prctl(option: int, value: int) -> int:
    """Return ``prctl(option, value, 0, 0, 0)``, or -1 where there is no such call."""
    if not sys.platform.startswith("linux"):
        return -1
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0))
    except (OSError, AttributeError):
        return -1
