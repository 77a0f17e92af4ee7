"""Errors as py4j hands over a Java exception PySpark did not convert: the Java class chain is all they carry."""

from __future__ import annotations

from typing import Any

# Delta's report of a lost commit race, most derived class first.
DELTA_LOST_RACE = ("io.delta.exceptions.ConcurrentTransactionException",
                   "org.apache.spark.sql.delta.DeltaConcurrentModificationException",
                   "java.util.ConcurrentModificationException", "java.lang.RuntimeException")


def java_class(*names: str) -> Any:
    """A py4j view of a Java class and its superclasses, most derived first."""
    parent = java_class(*names[1:]) if len(names) > 1 else None
    return type("C", (), {"getName": lambda _s: names[0], "getSuperclass": lambda _s: parent})()


def py4j_error(*names: str, message: str = "lost") -> Exception:
    """An unconverted py4j error (``Py4JJavaError: <message>``) whose Java exception has the classes ``names``."""
    error = type("Py4JJavaError", (Exception,), {})(message)
    error.java_exception = type("J", (), {"getClass": lambda _s: java_class(*names),
                                          "__str__": lambda _s: message})()
    return error
