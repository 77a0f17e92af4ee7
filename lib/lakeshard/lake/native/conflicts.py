"""Lost optimistic commits on Delta's JVM, recognised through public error information only.

A Delta commit that loses a race raises one of ``io.delta.exceptions``' concurrent-modification exceptions.
How it reaches Python depends on the session and on what is imported:

- delta-spark's Python package (imported by ``delta.tables``) converts it into its own
  ``delta.exceptions`` classes (classic sessions) or registers those classes with the Spark Connect client:
  the Python exception's class is then named after Delta's (``ConcurrentAppendException``, ...);
- PySpark's own conversion keeps Delta's error class (``DELTA_CONCURRENT_APPEND...``,
  ``getCondition()`` / ``getErrorClass()``) and names the Java class in its message;
- an unconverted py4j error carries the Java exception itself (:func:`lakeshard.lake.native.jvm.java_class_names`).

:func:`is_concurrent_modification` accepts any of these, so the same check holds on a classic session, under
Spark Connect, with or without delta-spark's Python package imported.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

from lakeshard.errors import CommitConflict

__all__ = ["CONFLICT_ERROR_CLASSES", "conflict_or_raise", "is_concurrent_modification"]

# Delta's error classes for a lost optimistic commit (DeltaErrors: DELTA_CONCURRENT_APPEND, _DELETE_READ,
# _DELETE_DELETE, _TRANSACTION, _WRITE, and the metadata / protocol changes), matched as prefixes because
# Delta adds sub-classes (``DELTA_CONCURRENT_APPEND.WITH_PARTITION_HINT``).
CONFLICT_ERROR_CLASSES = ("DELTA_CONCURRENT_", "DELTA_METADATA_CHANGED", "DELTA_PROTOCOL_CHANGED")
# The Java and Python class names of the same exceptions (io.delta.exceptions.*, delta.exceptions.*).
_CONFLICT_CLASSES = frozenset({
    "DeltaConcurrentModificationException", "ConcurrentWriteException", "MetadataChangedException",
    "ProtocolChangedException", "ConcurrentAppendException", "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException", "ConcurrentTransactionException",
})
# Delta's Java packages: its lost-race exceptions extend java.util.ConcurrentModificationException, which the JVM
# also throws for a collection changed while iterated (nothing to do with a commit race).
_DELTA_PACKAGES = ("io.delta.", "org.apache.spark.sql.delta.")


def _error_class(exc: BaseException) -> str | None:
    """Return the exception's Spark error class (``getCondition`` in pyspark 4, ``getErrorClass`` before)."""
    for name in ("getCondition", "getErrorClass"):
        method = getattr(exc, name, None)
        if callable(method):
            try:
                value = method()
            except Exception:  # a converted exception without its JVM side; the other signals still count
                continue
            if value:
                return str(value)
    return None


def is_concurrent_modification(exc: BaseException) -> bool:
    """Return whether ``exc`` is Delta's report of a lost optimistic commit (a concurrent modification).

    True when the exception's class (or a base class) is one of Delta's concurrent-modification classes, its
    Spark error class is one of :data:`CONFLICT_ERROR_CLASSES`, its message names ``io.delta.exceptions``'
    classes or one of those error classes, or (py4j) its Java exception is one of Delta's and extends
    ``java.util.ConcurrentModificationException`` (that class alone, thrown by a collection changed while
    iterated, is not a lost race).

    Example::

        try:
            df.write.format("delta").mode("append").save(uri)
        except Exception as exc:
            if not is_concurrent_modification(exc):
                raise
    """
    if any(cls.__name__ in _CONFLICT_CLASSES for cls in type(exc).__mro__):
        return True
    error_class = _error_class(exc)
    if error_class is not None and error_class.startswith(CONFLICT_ERROR_CLASSES):
        return True
    text = str(exc)[:2000]
    if any(f"io.delta.exceptions.{name}" in text for name in _CONFLICT_CLASSES) or any(
            f"[{prefix}" in text for prefix in CONFLICT_ERROR_CLASSES):
        return True
    from lakeshard.lake.native.jvm import java_class_names

    names = java_class_names(exc)
    return bool(names) and names[0].startswith(_DELTA_PACKAGES) and "java.util.ConcurrentModificationException" in names


def conflict_or_raise(exc: BaseException, uri: str, based_on: int, app_ids: Sequence[str]) -> NoReturn:
    """Raise :class:`CommitConflict` for a lost commit race on ``uri``; re-raise ``exc`` when it is anything else."""
    if not is_concurrent_modification(exc):
        raise exc
    cause = str(exc).strip().splitlines()[0][:500] if str(exc).strip() else type(exc).__name__
    raise CommitConflict(uri, based_on, tuple(app_ids), f"{type(exc).__name__}: {cause}") from None
