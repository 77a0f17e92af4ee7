"""The closing fence: serialises a bucket's close with the shard writers' commits through the ``events`` log.

``buckets`` and ``events`` are different Delta tables, so nothing in a ``buckets`` commit conflicts with a
writer's ``events`` commit. The fence is a commit to ``events`` that adds no file and carries the app
transactions ``writer/<shard>`` of every shard at their current values (unchanged), prepared at the version
``V`` the closing check read. Delta's conflict detection then orders it against every writer commit after ``V``:

* a writer commit that landed after ``V`` makes the fence fail (both carry ``writer/<shard>``): the check at
  ``V`` missed its rows, so the bucket does not close on that check;
* a writer commit prepared before the fence landed and committed after it fails with
  :class:`~lakeshard.errors.CommitConflict`: the writer redoes its batch and reads the bucket states again.

Together with the ``closing`` state, committed to ``buckets`` before the check (writers treat ``closing`` as
closed), no writer commits into a bucket after the check that closes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from lakeshard.errors import CommitConflict
from lakeshard.lake import AppTransaction, TableStore
from lakeshard.tables import FENCE_APP_ID, writer_app_id

__all__ = ["FENCE_APP_ID", "fence_writers"]


def fence_writers(store: TableStore, events: str, shards: Iterable[int], *, read_version: int, fence_version: int,
                  closing: Sequence[str]) -> int | None:
    """Return the ``events`` version of the fence committed at ``read_version``, or None when a writer committed
    after ``read_version``: the check at it is stale.

    ``shards``: every shard that may write into the closing buckets; ``closing``: the buckets, as
    ``tenant/hour``, named in the commit's metadata for whoever reads the log.

    Raises:
        UnsupportedByAdapter: the store cannot commit a fence in this session (the native adapter under Spark
            Connect): a close is never left unordered against the writers.
    """
    ids = [writer_app_id(s) for s in sorted(set(shards))]
    current = store.transaction_versions(events, ids)
    txns = [AppTransaction(FENCE_APP_ID, fence_version), *(AppTransaction(a, current[a] or 0) for a in ids)]
    try:
        result = store.fence(events, txns, read_version=read_version, metadata={"closing_fence": list(closing)})
    except CommitConflict:
        return None
    return result.version
