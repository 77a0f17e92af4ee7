"""py4j's replies without Nagle's 40 ms wait: ``TCP_NODELAY`` on both ends of a thread's py4j connection.

A classic PySpark session talks to its JVM over a local socket per Python thread (py4j's pinned-thread mode). py4j
0.10.9.9, the version pyspark 4 bundles, leaves Nagle's algorithm on at both ends, and its JVM side writes a reply
longer than its 8 KB buffer in two writes: the second waits for the acknowledgement of the first, which the Python
side's kernel delays by up to 40 ms (py4j issue 516; fixed upstream by py4j PR 592, not in a pyspark release yet).
Every listing of a Delta log of more than about 30 files, and every commit file of more than 8 KB, the native
adapter reads paid it (measured here: a 135-file log listing 47 ms a call, 2-20 ms with the fix).

:func:`quick_replies` switches Nagle's algorithm off on the current thread's connection: on the Python socket
directly, on the JVM's through the thread that serves the connection (its ``Runnable`` is py4j's connection object,
whose ``getSocket()`` is public; reading the ``Runnable`` needs reflection on ``java.lang.Thread``, which Spark's
launcher opens to unnamed modules). Anything that does not fit (Spark Connect, a JVM that refuses the reflection, a
py4j without per-thread connections) leaves the connection as it was: only the speed differs.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

__all__ = ["quick_replies", "thread_runnable"]

_LOG = logging.getLogger(__name__)
_MARK = "_lakeshard_quick_replies"  # set on py4j's Python connection object once both ends are done


def quick_replies(jvm: Any) -> bool:
    """Switch Nagle's algorithm off on the py4j connection of this thread; return whether it is off.

    ``jvm`` is a classic session's py4j view (``spark._jvm``). Cheap after the first call on a connection (an
    attribute look-up): callers make it before their py4j calls, on whichever thread they run.
    """
    client = getattr(jvm, "_gateway_client", None)
    thread_connection = getattr(client, "get_thread_connection", None)
    if thread_connection is None:  # py4j without pinned threads: connections are pooled, not one per thread
        return False
    connection = thread_connection()
    if connection is None:  # this thread has not talked to the JVM yet: ask once, which opens its connection
        jvm.java.lang.System.nanoTime()
        connection = thread_connection()
    if connection is None or getattr(connection, _MARK, None) is not None:
        return bool(getattr(connection, _MARK, False))
    done = False
    try:
        connection.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        served_by = thread_runnable(jvm, jvm.java.lang.Thread.currentThread())
        served_by.getSocket().setTcpNoDelay(True)
        done = True
    except Exception as exc:  # the reflection refused, another py4j or Java: the connection stays as it was
        _LOG.debug("py4j replies keep Nagle's algorithm: %s", str(exc).splitlines()[0][:200] if str(exc) else exc)
    setattr(connection, _MARK, done)
    return done


def thread_runnable(jvm: Any, thread: Any) -> Any:
    """Return the ``Runnable`` a JVM thread runs: ``Thread.target`` up to Java 18, ``Thread.holder.task`` after."""
    thread_class = jvm.java.lang.Class.forName("java.lang.Thread")
    try:
        field = thread_class.getDeclaredField("target")
        field.setAccessible(True)
        return field.get(thread)
    except Exception:
        holder_field = thread_class.getDeclaredField("holder")
        holder_field.setAccessible(True)
        holder = holder_field.get(thread)
        task = holder.getClass().getDeclaredField("task")
        task.setAccessible(True)
        return task.get(holder)
