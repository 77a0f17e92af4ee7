"""Opt-in phase tracing for crash tests: which phase of a write a process was in when it died.

When the environment variable ``LAKESHARD_TRACE_PHASES`` names a file, :func:`phase` appends one line when
a phase starts and one when it ends::

    <pid> enter <phase> <table>
    <pid> exit <phase> <table>

The embedded store traces ``write`` (the Parquet files of a commit being written) and ``commit`` (the delta-rs
call, or the blind append's own put-if-absent, that writes the next log entry). A test that SIGKILLs the process
reads the last line the process left:
``enter commit`` means the kill landed inside a Delta commit. Each line is one unbuffered ``os.write`` on an
``O_APPEND`` descriptor, so it is on disk before the phase starts and lines of concurrent processes do not
interleave. Unset, :func:`phase` costs one environment lookup.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["COMMIT", "TRACE_ENV", "WRITE", "hold", "phase"]

TRACE_ENV = "LAKESHARD_TRACE_PHASES"
WRITE = "write"
COMMIT = "commit"

_fds: dict[str, int] = {}  # per trace file, this process's descriptor (opened once, kept for the process's life)


@contextmanager
def phase(name: str, table: str) -> Iterator[None]:
    """Return a context that records entering and leaving phase ``name`` of ``table`` (nothing when unset)."""
    path = os.environ.get(TRACE_ENV)
    if not path:
        yield
        return
    _line(path, f"{os.getpid()} enter {name} {table}\n")
    try:
        yield
    finally:  # a phase left by an exception (a lost commit race) is left too: only a kill leaves "enter" last
        _line(path, f"{os.getpid()} exit {name} {table}\n")


def hold(seconds: float = 0.001) -> None:
    """Wait ``seconds`` when tracing is on (nothing otherwise): a step of a commit that is over in microseconds.

    A blind append (:mod:`lakeshard.lake.embedded.append`) writes its log entry in well under a millisecond, less
    than the time a crash test needs to aim a kill after reading ``enter commit``. Traced, it holds before and
    after the moment its commit file becomes visible, so kills aimed inside the commit land on both sides of it.
    """
    if os.environ.get(TRACE_ENV):
        time.sleep(seconds)


def _line(path: str, text: str) -> None:
    fd = _fds.get(path)
    if fd is None:
        fd = _fds[path] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, text.encode("utf-8"))
