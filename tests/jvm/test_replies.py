"""py4j's replies without Nagle's delay (``lakeshard.jvm.replies``): both ends of a thread's connection get
``TCP_NODELAY``, on every thread that asks, and a JVM that refuses leaves the connection as it was without an error."""

from __future__ import annotations

import socket
import threading
from typing import Any

from pyspark.sql import SparkSession

from lakeshard.jvm.replies import quick_replies


def _ends(spark: SparkSession) -> tuple[bool, bool]:
    """Return (Python end, JVM end) of this thread's py4j connection: is Nagle's algorithm off?"""
    from lakeshard.jvm.replies import thread_runnable

    jvm = spark._jvm
    connection = jvm._gateway_client.get_thread_connection()
    python_end = bool(connection.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
    jvm_end = bool(thread_runnable(jvm, jvm.java.lang.Thread.currentThread()).getSocket().getTcpNoDelay())
    return python_end, jvm_end


def test_each_thread_gets_its_connection_without_nagle_at_both_ends(spark: SparkSession) -> None:
    seen: dict[str, Any] = {}

    def fresh_thread() -> None:
        try:
            spark._jvm.java.lang.System.nanoTime()  # this thread's own connection, as py4j opens it
            seen["before"] = _ends(spark)
            seen["returned"] = quick_replies(spark._jvm)
            seen["after"] = _ends(spark)
            seen["again"] = quick_replies(spark._jvm)
        except BaseException as exc:  # reported below, not lost in the thread
            seen["error"] = exc

    worker = threading.Thread(target=fresh_thread)
    worker.start()
    worker.join(60)
    assert "error" not in seen, seen.get("error")
    assert seen["before"] == (False, False)  # py4j's own default: the test would not show the change otherwise
    assert seen["returned"] is True and seen["after"] == (True, True) and seen["again"] is True
    assert quick_replies(spark._jvm) and _ends(spark) == (True, True)  # the session's thread, set by get_spark


def test_a_reply_longer_than_py4js_buffer_comes_back_whole(spark: SparkSession) -> None:
    quick_replies(spark._jvm)
    text = "é漢🦆\n\\x" * 20_000  # escapes, non-ASCII and a surrogate pair, well over 8 KB
    built = spark._jvm.java.lang.StringBuilder(text)  # kept in the JVM: only toString's reply carries the text
    assert built.length() == len(text.encode("utf-16-le")) // 2
    assert str(built.toString()) == text


class _Refusing:
    """A py4j view whose JVM refuses the reflection (a locked-down cluster): ``Class.forName`` raises."""

    def __init__(self, connection: Any) -> None:
        self._gateway_client = type("Client", (), {"get_thread_connection": lambda _self: connection})()
        refuse = type("Refuse", (), {"forName": staticmethod(self._refuse),
                                     "currentThread": staticmethod(lambda: object())})
        self.java = type("Java", (), {"lang": type("Lang", (), {"Class": refuse, "Thread": refuse})})()

    @staticmethod
    def _refuse(name: str) -> Any:
        raise PermissionError(f"py4j security: {name} is not allowed")


def test_a_jvm_that_refuses_the_reflection_keeps_its_connection_and_raises_nothing() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
        connection = type("Connection", (), {"socket": tcp})()
        assert quick_replies(_Refusing(connection)) is False
        assert quick_replies(_Refusing(connection)) is False  # decided once per connection
    assert quick_replies(object()) is False  # no py4j at all (a Spark Connect session's view)
