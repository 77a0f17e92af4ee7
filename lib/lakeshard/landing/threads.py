"""How the driver's landing parse spreads a batch over threads: how many, and which files each takes.

Arrow's JSON reader and compute kernels release the GIL, so a batch's files parsed on a thread per core go
about that much faster; the files stay in runs of consecutive files, so the batches come back in file order.
"""

from __future__ import annotations

from collections.abc import Sequence

from lakeshard.landing.listing import LandingFile
from lakeshard.process import driver_threads

__all__ = ["parse_threads", "split_by_bytes"]

# Below this many bytes a batch is parsed on one thread: a thread's start and the split cost more than they save.
_THREADED_MIN_BYTES = 4 * 1024 * 1024


def parse_threads(files: Sequence[LandingFile]) -> int:
    """Return how many threads parse ``files`` in the driver: one per core (at most 4), one for a small batch."""
    total = sum((f.end if f.end is not None else f.size_bytes) - f.start for f in files)
    if len(files) < 2 or total < _THREADED_MIN_BYTES:
        return 1
    return driver_threads()


def split_by_bytes(files: Sequence[LandingFile], parts: int) -> list[list[LandingFile]]:
    """Return ``files`` cut into at most ``parts`` runs of consecutive files holding about as many bytes each."""
    sizes = [max(1, (f.end if f.end is not None else f.size_bytes) - f.start) for f in files]
    share, held = sum(sizes) / max(1, parts), 0
    out: list[list[LandingFile]] = []
    run: list[LandingFile] = []
    for f, size in zip(files, sizes, strict=True):
        run.append(f)
        held += size
        if held >= share * (len(out) + 1) and len(out) < parts - 1:
            out.append(run)
            run = []
    if run or not out:
        out.append(run)
    return out
