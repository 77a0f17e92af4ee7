"""What a shard writer does when a step fails: faults are retried with exponential backoff, never turned into data.

A step can fail for two kinds of reasons. An *infrastructure fault* — an I/O or storage error, a
:class:`~lakeshard.errors.TableStoreError`, a ``MemoryError``, a Spark or py4j error, anything not proven to be
about specific rows — says nothing about the events: the step is retried after a delay that doubles each time
(:class:`RetryPolicy`), and when the time budget is spent the run stops with :class:`WriterStepFailed`, naming
the shards, the routed version and the cause. Nothing of the batch is committed or quarantined, so the
committed progress stays where it was and a later run, with the fault gone, writes the batch exactly once.

A *record-level failure* is one a row causes by itself: when writing a step's files fails, the writer writes
the same rows again to a scratch directory, bisecting (:func:`unwritable_rows`); rows that fail alone while
the rest writes are record-level (:class:`RecordLevelFailure`), and only they go to the dead-letter table.
Anything else (the whole batch fails, no row fails alone) is an infrastructure fault. A deliberate stop (another
:class:`~lakeshard.errors.LakeshardError`, e.g. a failed expectation) is raised at once, not retried.

A *programming error* is raised at once too: one of Python's own error kinds raised as such (``ValueError``,
``TypeError``, ``AttributeError``, ``KeyError``, ...: :data:`PROGRAMMING_ERRORS`) says the code and the library
versions it runs on disagree (a pyarrow older than a call expects, say), and the same step fails the same way after
any wait. The command then stops with one line naming it and its traceback saved. The engines' own subclasses of
those kinds (pyarrow's ``ArrowInvalid``, pyspark's and delta-rs' errors) stay infrastructure faults: a file torn by a
crashing writer or a server's refusal raises them too, and waiting can mend those.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from lakeshard.dedupe.errors import DedupeError
from lakeshard.errors import ConfigError, DamagedDataFile, LakeshardError, TableStoreError
from lakeshard.tables import EVENT_KEY

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "PROGRAMMING_ERRORS", "RecordLevelFailure", "RetryPolicy", "WriterStepFailed", "event_keys",
    "is_infrastructure_fault", "record_level_failure", "retry_step", "unwritable_rows", "write_or_blame",
]

T = TypeVar("T")

PROGRAMMING_ERRORS: frozenset[type[BaseException]] = frozenset({
    AssertionError, AttributeError, ImportError, IndexError, KeyError, ModuleNotFoundError, NameError,
    NotImplementedError, TypeError, UnboundLocalError, ValueError, ZeroDivisionError,
})
"""Python's error kinds that, raised as themselves (not as a library's subclass), mean a bug: never retried."""


class WriterStepFailed(DedupeError):
    """A shard writer step kept failing on an infrastructure fault; nothing of its batch was committed.

    Attributes:
        shards: the shards the step wrote.
        routed_version: the routed version it was consuming.
        attempts: how many times it was tried.
        seconds: how long the attempts and the waits between them took.
        cause: the last error, as ``Type: first line``.
    """

    def __init__(self, shards: Sequence[int], routed_version: int, attempts: int, seconds: float,
                 cause: str) -> None:
        self.shards = tuple(shards)
        self.routed_version = routed_version
        self.attempts = attempts
        self.seconds = seconds
        self.cause = cause
        super().__init__(
            f"shard writer for shards {list(self.shards)} could not commit routed version {routed_version}: "
            f"{attempts} attempts over {seconds:.1f} s failed, the last with {cause}. Nothing of this batch was "
            f"committed or quarantined and the shards' progress is unchanged; fix the cause and run again "
            f"(dedupe.retry_total_seconds sets how long a step keeps retrying)."
        )


class RecordLevelFailure(DedupeError):
    """Specific rows of a step cannot be written as such (proven row by row); only they may be dead-lettered.

    Attributes:
        reason: why those rows cannot be written.
        keys: the ``(tenant_id, event_id, ts)`` of those rows; empty: every row of the step.
    """

    def __init__(self, reason: str, keys: Sequence[tuple[object, ...]] = ()) -> None:
        self.reason = reason
        self.keys = tuple(keys)
        super().__init__(reason)


def unwritable_rows(rows: pa.Table, write: Callable[[pa.Table], object]) -> list[int]:
    """Return the indices of the rows that ``write`` fails on by themselves while the other rows write.

    Bisection: a slice that fails is split until single rows remain. Empty when the whole table writes, when
    no single row fails (the failure is about the batch, e.g. its size), when every row fails alone, or when
    the rows left without the failing ones still fail: then it is not about rows.
    """
    import numpy as np
    import pyarrow as pa

    def failing(start: int, stop: int) -> list[int]:
        try:
            write(rows.slice(start, stop - start))
            return []
        except Exception:
            if stop - start == 1:
                return [start]
            middle = (start + stop) // 2
            return failing(start, middle) + failing(middle, stop)

    found = failing(0, rows.num_rows) if rows.num_rows else []
    if not found or len(found) == rows.num_rows:
        return []
    keep = np.ones(rows.num_rows, dtype=bool)
    keep[found] = False
    try:
        write(rows.filter(pa.array(keep)))
    except Exception:
        return []
    return found


def record_level_failure(rows: pa.Table, error: Exception, write: Callable[[pa.Table], object]) -> Exception:
    """Return a :class:`RecordLevelFailure` naming the rows ``write`` proves unwritable (see
    :func:`unwritable_rows`), or ``error`` itself when the failure is not about specific rows."""
    bad = unwritable_rows(rows, write)
    if not bad:
        return error
    cause = f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:500]}"
    return RecordLevelFailure(f"row cannot be written: {cause}", event_keys(rows.take(bad)))


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff of a failing step: ``initial_seconds``, doubling up to ``max_delay_seconds``,
    until ``total_seconds`` have passed since the first attempt (then one last attempt is not made)."""

    initial_seconds: float = 0.5
    max_delay_seconds: float = 10.0
    total_seconds: float = 60.0

    def __post_init__(self) -> None:
        if self.initial_seconds < 0 or self.max_delay_seconds < 0 or self.total_seconds < 0:
            raise ConfigError("dedupe.retry_initial_seconds, retry_max_delay_seconds and retry_total_seconds must "
                              f"not be negative, found {self.initial_seconds}, {self.max_delay_seconds} and "
                              f"{self.total_seconds}")

    def delays(self, elapsed: Callable[[], float]) -> Iterator[float]:
        """Yield the wait before each retry; stop when the next wait would end past the time budget."""
        delay = self.initial_seconds
        while elapsed() + delay <= self.total_seconds:
            yield delay
            delay = min(max(delay * 2, 0.001), self.max_delay_seconds)


def is_infrastructure_fault(exc: BaseException) -> bool:
    """Return whether a step's error is retried as an infrastructure fault (see the module's docstring).

    Storage errors of the store (:class:`~lakeshard.errors.TableStoreError`) are, but for a damaged data file
    (:class:`~lakeshard.errors.DamagedDataFile`: waiting does not mend it); other lakeshard errors are
    deliberate stops, and a :class:`RecordLevelFailure` is about rows; a programming error
    (:data:`PROGRAMMING_ERRORS`) is a bug; ``BaseException``\\s that are not ``Exception``\\s (a crash, an
    interrupt) are never caught.
    """
    if type(exc) in PROGRAMMING_ERRORS:
        return False
    if isinstance(exc, DamagedDataFile):
        return False  # a damaged file stays damaged: its flow isolates it instead of waiting for it
    if isinstance(exc, TableStoreError):
        return True
    return isinstance(exc, Exception) and not isinstance(exc, LakeshardError)


def retry_step(attempt: Callable[[], T], policy: RetryPolicy, *, shards: Sequence[int], routed_version: int,
               on_fault: Callable[[BaseException], None] = lambda exc: None,
               sleep: Callable[[float], None] = time.sleep) -> T:
    """Return ``attempt()``'s result, retrying it on infrastructure faults with the policy's backoff.

    Raises:
        WriterStepFailed: the faults outlasted ``policy.total_seconds``; raised from the last one.
    """
    started = time.monotonic()
    attempts = 0
    waits = policy.delays(lambda: time.monotonic() - started)
    while True:
        attempts += 1
        try:
            return attempt()
        except Exception as exc:
            if not is_infrastructure_fault(exc):
                raise
            on_fault(exc)
            delay = next(waits, None)
            if delay is None:
                cause = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:500]}"
                raise WriterStepFailed(shards, routed_version, attempts, time.monotonic() - started,
                                       cause) from exc
            sleep(delay)


def write_or_blame(rows: pa.Table, target: str, write: Callable[[pa.Table, str], T]) -> T:
    """Return what ``write`` returns, writing ``rows`` under ``target``; when that fails, raise the
    :class:`RecordLevelFailure` of the rows that fail alone (written again, bisected, to a local scratch
    directory), else the error itself."""
    import itertools
    import tempfile

    try:
        return write(rows, target)
    except Exception as exc:
        with tempfile.TemporaryDirectory(prefix="lakeshard-probe-") as scratch:
            n = itertools.count()
            failure = record_level_failure(rows, exc, lambda part: write(part, f"{scratch}/{next(n)}"))
        if failure is exc:
            raise
        raise failure from exc


def event_keys(rows: pa.Table) -> list[tuple[object, ...]]:
    """Return each row's event key ``(tenant_id, event_id, ts)`` as Python values."""
    return list(zip(*(rows.column(c).to_pylist() for c in EVENT_KEY), strict=True))
