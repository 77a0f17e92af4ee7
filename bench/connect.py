"""A local Spark Connect server with Delta's engine, in a process of its own, for the benchmarks and tests.

:func:`local_connect_server` runs ``scripts/connect_server.py`` (a local Spark driver with lakeshard's settings,
Delta's jars and the Spark Connect plugin) and gives its ``sc://`` address while the block runs: the shape of
serverless and databricks-connect (no py4j in the client) on this machine.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

__all__ = ["SERVER_SCRIPT", "LocalServer", "free_port", "local_connect_server", "start_server"]

SERVER_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "connect_server.py"


def free_port() -> int:
    """Return a TCP port of 127.0.0.1 nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LocalServer(NamedTuple):
    """A running local Connect server: its ``sc://`` URL and its process id."""

    url: str
    pid: int


def start_server(port: int, heap: str = "1g", *, own_session: bool = False) -> subprocess.Popen[str]:
    """Return the process of a Spark Connect server on ``port`` once it takes connections (it stops when its standard
    input closes).

    Raises:
        RuntimeError: the server did not start (its standard error is shown above, as it is not captured).
    """
    server = subprocess.Popen([sys.executable, str(SERVER_SCRIPT), str(port), heap], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, start_new_session=own_session)
    assert server.stdout is not None
    line = server.stdout.readline()
    if line.strip() != "ready":
        server.kill()
        server.wait()
        raise RuntimeError(f"the local Spark Connect server did not start (exit {server.poll()}, said {line!r}; "
                           "its stderr is above)")
    return server


@contextlib.contextmanager
def local_connect_server(heap: str = "1g", *, own_session: bool = False) -> Iterator[LocalServer]:
    """Start a Spark Connect server whose driver has ``heap`` of Java heap; yield it; stop it at the end.

    ``own_session``: the server leads a process group of its own (a test that signals it and its JVM together).

    Raises:
        RuntimeError: the server did not start (its standard error is shown above, as it is not captured).
    """
    port = free_port()
    server = start_server(port, heap, own_session=own_session)
    assert server.stdin is not None
    try:
        yield LocalServer(f"sc://127.0.0.1:{port}", server.pid)
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
