"""Work one thread owns that another thread, which would only wait for it, can share (the router's look-ahead
parse, joined by the router once its batch in hand is done)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["SharedJobs"]

T = TypeVar("T")


class SharedJobs(Generic[T]):
    """Jobs run by their owner (:meth:`run`) that any thread waiting for the owner may join (:meth:`join`): each
    thread takes the next job nobody has taken until none is left, and :meth:`run` returns every job's result in
    the jobs' order, whichever thread ran it.

    Jobs are published once. A thread that joins before they are waits for them, so :meth:`close` must be
    called when none will come (the owner's work failed or was cancelled); it is harmless after :meth:`run`.

    Example::

        jobs = SharedJobs()
        pool.submit(lambda: jobs.run([partial(parse, f) for f in files]))  # the owner, on its thread
        jobs.join()                                                        # this thread: help, not wait
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._jobs: Sequence[Callable[[], T]] | None = None
        self._closed = False
        self._taken = 0
        self._finished = 0
        self._results: list[T | None] = []
        self._errors: dict[int, BaseException] = {}

    def run(self, jobs: Sequence[Callable[[], T]]) -> list[T]:
        """Return the results of ``jobs`` in their order, once every one has run here or on a joining thread.

        Raises:
            BaseException: the first job (in the jobs' order) that failed, with its own exception.
        """
        with self._changed:
            if self._jobs is not None or self._closed:
                raise RuntimeError("a SharedJobs runs one list of jobs")
            self._jobs, self._results = list(jobs), [None] * len(jobs)
            self._changed.notify_all()
        self._work()  # its interrupt, if any, is in self._errors and raised below
        with self._changed:
            self._changed.wait_for(lambda: self._finished == len(jobs))
            self._closed = True
        if self._errors:
            raise self._errors[min(self._errors)]
        return self._results  # type: ignore[return-value]  # every slot was filled above

    def join(self) -> None:
        """Run the published jobs nobody has taken yet, once they are published; return when none is left to take
        (jobs taken by other threads may still be running) or at once when the jobs were closed unpublished.

        A job's failure is the owner's to raise (from :meth:`run`); it does not escape here, unless it is no
        ``Exception`` (an interrupt of this thread), which is raised here too.
        """
        with self._changed:
            self._changed.wait_for(lambda: self._jobs is not None or self._closed)
        interrupt = self._work()
        if interrupt is not None:
            raise interrupt

    def close(self) -> None:
        """Say that no jobs will be published: a thread waiting in :meth:`join` returns."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _work(self) -> BaseException | None:
        """Run jobs until none is left to take; return the first failure that is no ``Exception``, if any."""
        interrupt = None
        while True:
            with self._changed:
                if self._jobs is None or self._taken >= len(self._jobs):
                    return interrupt
                i, job = self._taken, self._jobs[self._taken]
                self._taken += 1
            try:
                self._results[i] = job()
            except BaseException as exc:  # the owner raises it from run(), in the jobs' order
                self._errors[i] = exc
                if not isinstance(exc, Exception):
                    interrupt = interrupt or exc
            finally:
                with self._changed:
                    self._finished += 1
                    self._changed.notify_all()
