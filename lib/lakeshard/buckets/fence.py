"""The closing fence: serialises a bucket's close with the shard writers' commits through the ``events`` log.

``buckets`` and ``events`` are different Delta tables, so nothing in a ``buckets`` commit conflicts with a
writer's ``events`` commit. The fence is a commit to ``events``, prepared at the version ``V`` the closing check
read, that must (a) fail when a writer committed after ``V`` (the check missed its rows) and (b) make a writer that
read the bucket states before ``closing`` unable to commit afterwards. How depends on the store
(:meth:`~lakeshard.lake.TableStore.fence`):

* **embedded**: a commit that adds no file and carries the app transactions ``writer/<shard>`` of every shard at
  their current values. A writer commit after ``V`` makes the fence fail (both carry ``writer/<shard>``); a writer
  commit prepared before the fence landed fails against it, its conflicts counted from the writer's read version.
* **native**: a metadata change (``ALTER TABLE ... SET TBLPROPERTIES``), then a look at the log between ``V`` and
  the fence for writer commits or changed data. Delta fails every transaction that overlaps a metadata change,
  lakeshard fails a writer commit when one landed after the ``events`` version the writer read, and a writer
  whose Delta transaction starts after the fence is stopped by its own check of bucket states inside the write
  (:mod:`lakeshard.buckets.guard`, :attr:`~lakeshard.lake.TableStore.writes_guard_closing`).

Either way a writer that loses redoes its batch and reads the bucket states again. Together with the ``closing``
state, committed to ``buckets`` before the check (writers treat ``closing`` as closed), no writer commits into a
bucket after the check that closes it.
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
        UnsupportedByAdapter: the store cannot commit a fence: a close is never left unordered against the writers.
    """
    ids = [writer_app_id(s) for s in sorted(set(shards))]
    current = store.transaction_versions(events, ids)
    txns = [AppTransaction(FENCE_APP_ID, fence_version), *(AppTransaction(a, current[a] or 0) for a in ids)]
    try:
        result = store.fence(events, txns, read_version=read_version, metadata={"closing_fence": list(closing)})
    except CommitConflict:
        return None
    return result.version
