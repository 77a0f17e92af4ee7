"""Which buckets a compaction run looks at: the ones that changed since the last run, not every bucket ever.

A bucket compaction left with nothing to do stays that way until something happens to it: a commit adds or
removes one of its files, or the completionist closes it (a sealed bucket merges all its small files at once),
or time lets its newest files settle while it is still open. So after a run that finished its work, the
compactor records the ``events`` version it planned at as the app transaction
:data:`~lakeshard.tables.COMPACTOR_APP_ID` (a commit without files: app transactions survive checkpoints), and
the next run plans only

* the buckets a commit after that version touched (their partition values in the log since then),
* the buckets a closing fence after that version named (``closing_fence`` in the fence commit's metadata,
  :mod:`lakeshard.buckets.fence`: a bucket just closed merges now),
* the buckets still open by the size-tiered planner's clock (the current hours: their files settle with time).

A run that left work behind (rounds exhausted, a bucket given up or failed) does not move the watermark, so the
next run sees the same buckets again; nor does a run that found nothing changed (no commit for nothing). With
no watermark yet, or a log that no longer holds the commits since it
(cleaned up after a checkpoint), the run plans over every bucket.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from lakeshard.compaction.planner import Bucket, SizeTieredPlanner
from lakeshard.errors import TableStoreError
from lakeshard.lake import AppTransaction, FileInfo, TableStore
from lakeshard.tables import COMPACTOR_APP_ID

__all__ = ["CompactionScope", "compaction_scope", "record_compacted"]


@dataclass(frozen=True)
class CompactionScope:
    """The buckets a run plans over (None: all) and the watermark it started from (None: none yet)."""

    buckets: frozenset[Bucket] | None
    since: int | None
    reason: str


def compaction_scope(store: TableStore, table: str, files: Collection[FileInfo], version: int, *,
                     now: datetime, size_tiered: SizeTieredPlanner) -> CompactionScope:
    """Return the buckets of ``table`` (at ``version``, whose live ``files`` are given) that changed since the
    last compaction's watermark, were closed since, or are still open; all buckets when there is no watermark."""
    since = store.transaction_version(table, COMPACTOR_APP_ID)
    if since is None or since > version:
        return CompactionScope(None, since, "no compaction watermark yet")
    changed: set[Bucket] = set()
    try:
        entries = store.log_entries(table, start=since + 1, end=version) if since < version else []
    except TableStoreError as exc:
        return CompactionScope(None, since, f"the log since the watermark is gone: {exc}")
    for entry in entries:
        for change in entry.changes:
            values = change.file.partition_values
            tenant, hour = values.get("tenant_id"), values.get("hour")
            if tenant is None or hour is None:
                return CompactionScope(None, since, f"version {entry.version} changed a file outside any bucket")
            changed.add((tenant, hour))
        for name in _closing(entry.custom_metadata.get("closing_fence")):
            tenant, _, hour = name.rpartition("/")
            changed.add((tenant, hour))
    live = {(str(f.partition_values.get("tenant_id")), str(f.partition_values.get("hour"))) for f in files}
    # Openness depends on the hour alone: decided once per hour, not once per bucket ever written.
    open_hours = {h for h in {h for _, h in live} if size_tiered.is_open(("", h), now)}
    changed |= {b for b in live if b[1] in open_hours}
    return CompactionScope(frozenset(changed & live), since, f"changed since version {since}")


def _closing(value: object) -> list[str]:
    """Return the ``tenant/hour`` names a fence's ``closing_fence`` metadata lists (the log keeps it as JSON text)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return []
    return [str(v) for v in value] if isinstance(value, list) else []


def record_compacted(store: TableStore, table: str, version: int) -> bool:
    """Record ``version`` as the compaction watermark of ``table`` (a commit without files); return whether it
    was committed (False: the watermark was already there or past it)."""
    result = store.append(table, None, app_transactions=[AppTransaction(COMPACTOR_APP_ID, version)],
                          metadata={"compaction_watermark": version})
    return not result.skipped
