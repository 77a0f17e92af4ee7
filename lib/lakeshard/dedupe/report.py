"""What one shard writer step did (:class:`WriteReport`), and the two ways a report is built.

:func:`step_report` counts a step that deduplicated a batch (either engine); :func:`empty_report` a step that
wrote no events (a lost race found before dedupe, a batch sent to the dead letters).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

__all__ = ["IndexCheck", "WriteReport", "empty_report", "step_report"]


@dataclass(frozen=True)
class WriteReport:
    """One writer step: ``rows_in = written + duplicates_in_batch + duplicates_in_index + rejected +
    dead_lettered`` always holds (``rejected``: left out by the expectation gate; 0 without one).

    A lost commit race (``conflict``) writes nothing and counts nothing as a duplicate: the same rows come
    back in a later step, so they stay accounted for exactly once.
    """

    shards: tuple[int, ...]
    routed_version: int
    rows_in: int
    duplicates_in_batch: int
    duplicates_in_index: int
    written: int
    intervals_paged_in: int  # intervals missing from the ID cache, read from the event_ids table
    interval_hits: int  # intervals answered from the ID cache
    ids_paged_in: int
    page_in_seconds: float
    unchecked_expired: int  # events older than the ID retention: written without an index check
    conflict: bool  # lost a commit race: nothing written, progress re-read from the lakehouse
    ids_repaired: int  # IDs rebuilt from committed events before this step (after a crash)
    cache_bytes: int
    seconds: float
    rejected: int = 0
    dead_lettered: int = 0  # rows sent to quarantine: the step proved them unwritable (RecordLevelFailure)
    error: str = ""  # the last failure, when the step was dead-lettered
    engine: str = "spark"  # "arrow": the step ran in the driver process (pyarrow + numpy), no Spark job
    id_files_merged: int = 0  # ID files of sealed intervals merged into one per interval after the commits
    routed_files_expired: int = 0  # consumed files removed from ``routed`` after the commits (see expire_routed)


@dataclass(frozen=True)
class IndexCheck:
    """What the ID index said of a batch's unique keys (:meth:`lakeshard.dedupe.index.IdIndex.check`)."""

    duplicate: np.ndarray  # per unique batch key: already in the index
    expired: np.ndarray  # per unique batch key: older than the retention, not checked
    misses: int
    hits: int
    ids_paged_in: int
    page_in_seconds: float


def step_report(todo: tuple[int, ...], routed_version: int, *, rows_in: int, n_unique: int, n_new: int, kept: int,
                check: IndexCheck, conflict: bool, repaired: int, cache_bytes: int, started: float,
                engine: str) -> WriteReport:
    """Return the report of a step that deduplicated ``rows_in`` rows to ``n_unique`` keys, ``n_new`` of them
    new to the index, of which the gate ``kept`` some; a lost race (``conflict``) wrote and dropped nothing."""
    return WriteReport(
        shards=todo, routed_version=routed_version, rows_in=rows_in, duplicates_in_batch=rows_in - n_unique,
        duplicates_in_index=0 if conflict else n_unique - n_new, written=0 if conflict else kept,
        intervals_paged_in=check.misses, interval_hits=check.hits, ids_paged_in=check.ids_paged_in,
        page_in_seconds=check.page_in_seconds, unchecked_expired=int(check.expired.sum()), conflict=conflict,
        ids_repaired=repaired, cache_bytes=cache_bytes, seconds=time.perf_counter() - started,
        rejected=0 if conflict else n_new - kept, engine=engine,
    )


def empty_report(todo: tuple[int, ...], routed_version: int, rows_in: int, started: float, *, cache_bytes: int,
                 conflict: bool) -> WriteReport:
    """Return the report of a step over ``rows_in`` rows that wrote no events and found no duplicates."""
    return WriteReport(
        shards=todo, routed_version=routed_version, rows_in=rows_in, duplicates_in_batch=0,
        duplicates_in_index=0, written=0, intervals_paged_in=0, interval_hits=0, ids_paged_in=0,
        page_in_seconds=0.0, unchecked_expired=0, conflict=conflict, ids_repaired=0,
        cache_bytes=cache_bytes, seconds=time.perf_counter() - started,
    )
