"""SharedJobs: the owner's jobs, joined by a waiting thread, give the results in the jobs' order whoever ran them."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeshard.process import worker_pool
from lakeshard.process.sharing import SharedJobs


def _owned(jobs: SharedJobs[int], work: list, owner: ThreadPoolExecutor):
    started = owner.submit(jobs.run, work)
    started.add_done_callback(lambda _: jobs.close())
    return started


@settings(max_examples=40)
@given(st.lists(st.integers(0, 3), min_size=0, max_size=30))
def test_results_come_in_the_jobs_order_whichever_thread_ran_them(pauses: list[int]) -> None:
    ran_by: dict[int, str] = {}
    owner_began, gate = threading.Event(), threading.Event()

    def job(i: int, pause: int) -> int:
        if i == 0:  # the owner holds the first job until the joining thread has taken the others
            owner_began.set()
            gate.wait(5)
        ran_by[i] = threading.current_thread().name
        for _ in range(pause * 1000):
            pass
        return i * 7 + pause

    jobs: SharedJobs[int] = SharedJobs()
    with ThreadPoolExecutor(1, thread_name_prefix="owner") as owner:
        done = _owned(jobs, [lambda i=i, p=p: job(i, p) for i, p in enumerate(pauses)], owner)
        if pauses:
            assert owner_began.wait(5)
        threading.Timer(0.05, gate.set).start()
        jobs.join()
        assert done.result() == [i * 7 + p for i, p in enumerate(pauses)]
    assert sorted(ran_by) == list(range(len(pauses)))
    if len(pauses) > 1:  # the owner was held on job 0: this thread ran the others
        assert {ran_by[i] for i in range(1, len(pauses))} == {threading.current_thread().name}


def test_the_owner_raises_the_first_failure_in_the_jobs_order_after_every_job_ran() -> None:
    ran = []

    def job(i: int) -> int:
        ran.append(i)
        if i in (2, 4):
            raise ValueError(f"job {i} failed")
        return i

    jobs: SharedJobs[int] = SharedJobs()
    with ThreadPoolExecutor(1) as owner:
        done = _owned(jobs, [lambda i=i: job(i) for i in range(6)], owner)
        jobs.join()  # a joining thread's failures are the owner's to raise
        with pytest.raises(ValueError, match="job 2 failed"):
            done.result()
    assert sorted(ran) == list(range(6))


def test_a_thread_joining_jobs_never_published_returns_once_they_are_closed() -> None:
    jobs: SharedJobs[int] = SharedJobs()
    threading.Timer(0.05, jobs.close).start()
    jobs.join()  # would wait forever without the close
    with pytest.raises(RuntimeError, match="one list of jobs"):
        jobs.run([lambda: 1])


def test_the_worker_pool_is_one_per_process() -> None:
    assert worker_pool() is worker_pool()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's threads are not here, so the child makes a pool of its own
        ok = False
        try:
            ok = worker_pool().submit(lambda: 41 + 1).result(timeout=10) == 42
        finally:
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
