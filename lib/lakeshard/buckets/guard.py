"""The writers' in-write check of bucket states, on a store whose closing fence is a metadata change.

On the native adapter the closing fence (:mod:`lakeshard.buckets.fence`) is ``ALTER TABLE ... SET TBLPROPERTIES``
on ``events``: Delta fails every transaction that overlaps it, and lakeshard fails a writer commit when a metadata
change landed after the ``events`` version the writer read
(:meth:`~lakeshard.lake.native.commit.NativeCommits.replayed`).
What neither catches: a writer that read the bucket states before ``closing`` was committed and whose Delta
transaction starts after the fence landed (Delta's public writer starts its transaction itself, after lakeshard's
look at the log). So the rows handed to that writer carry a check, evaluated by the write's own query: each row's
``(tenant_id, hour)`` is looked up among the ``closing``/``closed`` rows of ``buckets``, read by Delta when the
write runs (not when the DataFrame was built), and a match raises.

Why that closes the gap: the write's query runs after its transaction started. If the read of ``buckets`` shows
the bucket open, ``closing`` was committed after it, hence after the transaction started; the fence comes after
``closing`` (after the closing check), so it lands while the transaction is open, and Delta fails the transaction
at commit. If the read shows the bucket closing or closed, the check fails the write. Either way the writer loses
its commit (:class:`~lakeshard.errors.CommitConflict`), redoes its step and reads the bucket states again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from lakeshard.errors import CommitConflict

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lakeshard.lake import TableStore

__all__ = ["GUARD_REFUSAL", "guard_open_buckets", "refused_by_guard"]

# What the check's error message starts with: how a failed write is told apart from any other failure.
GUARD_REFUSAL = "lakeshard: bucket closing while this write ran"
_MATCHED = "__lakeshard_closing"


def guard_open_buckets(store: TableStore, buckets_uri: str, rows: DataFrame,
                       hours: Sequence[str] | None = None) -> DataFrame:
    """Return ``rows`` (with ``tenant_id`` and ``hour`` columns) with the check that none of their buckets is
    ``closing`` or ``closed`` in ``buckets_uri`` when the write that consumes them runs (same columns, same order).

    ``buckets`` is created when missing, so that a completionist starting later closes buckets in the table
    this write reads. The lookup is a broadcast join on the distinct ``(tenant_id, hour)`` of the closing and
    closed rows: a few small rows per bucket. ``hours``, when the caller knows every hour of ``rows``, narrows
    the read of ``buckets`` to them (a bucket of another hour cannot match any row), so the lookup stays the
    size of a batch rather than of every bucket ever closed.
    """
    from pyspark.sql import functions as F

    from lakeshard.buckets.completionist import ensure_buckets

    if not store.exists(buckets_uri):
        ensure_buckets(store, buckets_uri)
    keys = ["tenant_id", "hour"]
    # store.read is Delta's reader at the latest version: resolved when the query runs, not here.
    states = store.read(buckets_uri).where(F.col("state").isin("closing", "closed"))
    if hours is not None:
        states = states.where(F.col("hour").isin(sorted(set(hours))))
    closing = states.select(*keys).distinct().withColumn(_MATCHED, F.lit(True))
    joined = rows.join(F.broadcast(closing), keys, "left")
    refusal = F.raise_error(F.concat(F.lit(f"{GUARD_REFUSAL}: "), F.col("tenant_id"), F.lit("/"), F.col("hour"),
                                     F.lit(f" is closing or closed in {buckets_uri}")))
    # The check is the value of a written column, so no optimisation drops it.
    checked = F.when(F.col(_MATCHED).isNull(), F.col("tenant_id")).otherwise(refusal).alias("tenant_id")
    return joined.select(*[checked if c == "tenant_id" else F.col(c) for c in rows.columns])


def refused_by_guard(exc: BaseException, table: str, read_version: int | None,
                     app_ids: tuple[str, ...]) -> CommitConflict | None:
    """Return the :class:`CommitConflict` a write failed by :func:`guard_open_buckets` means (None for any other
    failure): the writer redoes its step with the bucket states read again."""
    text = str(exc)
    at = text.find(GUARD_REFUSAL)
    if at < 0:
        return None
    reason = text[at:].splitlines()[0][:300]
    return CommitConflict(table, read_version, app_ids, reason)
