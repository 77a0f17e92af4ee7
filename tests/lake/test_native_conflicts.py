"""Lost commit races as delta-spark's Python package hands them over: its own exception conversion, run here.

Importing ``delta.tables`` / ``delta.exceptions`` makes PySpark convert Delta's concurrent-modification errors
into ``delta.exceptions`` classes (classic sessions) and registers them for Spark Connect; neither carries a
``java_exception``. These tests build the converted exceptions with delta-spark's own code and check that the
native adapter still recognises a lost race (and only a lost race).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql import SparkSession

from lakeshard.errors import CommitConflict
from lakeshard.lake.native.conflicts import conflict_or_raise, is_concurrent_modification

_APPEND = "io.delta.exceptions.ConcurrentAppendException"
_MESSAGE = ("[DELTA_CONCURRENT_APPEND.WITHOUT_HINT] ConcurrentAppendException: Files were added to the root of the "
            "table by a concurrent update. Please try the operation again.")


class _DeltaJavaException:
    """A real Java Throwable whose ``toString`` reads as Delta's ``io.delta.exceptions`` class would.

    delta-spark's converter inspects ``toString()`` and asks the JVM for the stack trace of the object itself;
    py4j passes this wrapper on as the real Throwable underneath (``_get_object_id``).
    """

    def __init__(self, spark: SparkSession, class_name: str, message: str) -> None:
        self._java = spark.sparkContext._jvm.java.lang.RuntimeException(message)
        self._text = f"{class_name}: {message}"

    def toString(self) -> str:
        return self._text

    def getCause(self) -> Any:
        return None

    def _get_object_id(self) -> str:
        return str(self._java._get_object_id())


def test_delta_sparks_classic_conversion_is_a_conflict(spark: SparkSession) -> None:
    from delta.exceptions.captured import _convert_delta_exception

    for name in ("ConcurrentAppendException", "ConcurrentTransactionException", "ConcurrentDeleteDeleteException",
                 "MetadataChangedException", "ProtocolChangedException"):
        converted = _convert_delta_exception(_DeltaJavaException(spark, f"io.delta.exceptions.{name}", _MESSAGE))
        assert converted is not None and not hasattr(converted, "java_exception")
        assert is_concurrent_modification(converted), name
        with pytest.raises(CommitConflict, match="ConcurrentAppendException"):
            conflict_or_raise(converted, "/t", 3, ("writer/1",))
    other = _convert_delta_exception(_DeltaJavaException(spark, "java.io.FileNotFoundException", "gone"))
    assert other is None


def _connect_error(classes: list[str], error_class: str | None, message: str) -> BaseException:
    """Return the exception PySpark's Spark Connect client raises for a server error with these classes."""
    import delta.connect.exceptions  # noqa: F401  (registers Delta's classes, as importing delta.tables does)
    from google.rpc.error_details_pb2 import ErrorInfo
    from pyspark.errors.exceptions.connect import convert_exception

    info = ErrorInfo(reason=classes[0], domain="org.apache.spark")
    info.metadata["classes"] = json.dumps(classes)
    if error_class:
        info.metadata["errorClass"] = error_class
    return convert_exception(info, message, None)


def test_delta_sparks_connect_conversion_is_a_conflict() -> None:
    converted = _connect_error([_APPEND, "org.apache.spark.sql.delta.ConcurrentAppendException",
                                "io.delta.exceptions.DeltaConcurrentModificationException",
                                "java.util.ConcurrentModificationException"],
                               "DELTA_CONCURRENT_APPEND.WITHOUT_HINT", _MESSAGE)
    assert type(converted).__module__.startswith("delta.")
    assert is_concurrent_modification(converted)
    with pytest.raises(CommitConflict):
        conflict_or_raise(converted, "/t", 3, ())


def test_an_error_class_alone_is_enough_and_other_errors_are_not_conflicts() -> None:
    # A server that reports only the error class (no Delta classes registered on the client).
    bare = _connect_error(["org.apache.spark.SparkException"], "DELTA_CONCURRENT_TRANSACTION", "lost")
    assert is_concurrent_modification(bare)
    missing = _connect_error(["java.io.FileNotFoundException"], "PATH_NOT_FOUND", "[PATH_NOT_FOUND] gone")
    assert not is_concurrent_modification(missing)
    assert not is_concurrent_modification(ValueError("plain Python"))
    with pytest.raises(ValueError, match="plain"):
        conflict_or_raise(ValueError("plain Python"), "/t", 3, ())
