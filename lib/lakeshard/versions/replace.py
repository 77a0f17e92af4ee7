"""Replace a chunk's files — with new rows, or with nothing — in one Delta commit under its replace lock.

Druid needs a tombstone segment to say "this chunk is now empty". With versions as ADD/DROP deltas it
does not: replacing a chunk with nothing is a commit that DROPs the chunk's files and ADDs none, and
every query at that version or later sees the chunk empty. Files appended to the chunk after the
replacer read it are not dropped: the commit carries them forward (Druid's "carries forward all other
segments"), so ingestion and replacement end with the same rows whichever finishes first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from lakeshard.lake import CommitResult, TableStore
from lakeshard.versions.chunks import Chunk
from lakeshard.versions.errors import VersionsError
from lakeshard.versions.locks import ChunkLease, ChunkLocks, LockLost

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["replace_chunk"]


def replace_chunk(
    store: TableStore,
    table: str,
    chunk: Chunk,
    df: DataFrame | None,
    *,
    locks: ChunkLocks | None = None,
    lease: ChunkLease | None = None,
    read_version: int | None = None,
    data_change: bool = True,
    metadata: Mapping[str, Any] | None = None,
    before_commit: Callable[[], None] | None = None,
) -> CommitResult:
    """Return the commit that swapped the chunk's files at ``read_version`` for ``df``'s rows (None: no rows).

    Give either ``locks`` (the lock is taken and released around the commit) or a ``lease`` the caller
    already holds. ``read_version`` is the table version ``df`` was computed from (default: the latest);
    exactly the chunk's files live at that version are dropped. ``data_change=False`` marks a compaction
    (same rows, rearranged). ``before_commit`` runs right before the commit (crash tests stop there).

    Raises:
        ChunkLocked: ``locks`` was given and another holder has the chunk.
        LockLost: the lease ran out, or a newer holder already replaced the chunk (nothing committed).
        VersionsError: ``df`` holds rows of another tenant or hour, or both/neither of locks and lease.
        CommitConflict: a concurrent commit removed files this replacement drops.

    Example::

        replace_chunk(store, events_uri, Chunk("acme", "2026-01-01T10"), None, locks=locks)  # empty it
    """
    if (locks is None) == (lease is None):
        raise VersionsError("replace_chunk needs exactly one of locks= (take the lock) or lease= (already held)")
    if lease is not None:
        if lease.chunk != chunk:
            raise VersionsError(f"the lease is on chunk {lease.chunk}, not on {chunk}")
        return _replace(store, table, chunk, df, lease, read_version, data_change, metadata, before_commit)
    assert locks is not None
    with locks.lock(chunk.tenant_id, chunk.hour) as held:
        return _replace(store, table, chunk, df, held, read_version, data_change, metadata, before_commit)


def _replace(
    store: TableStore,
    table: str,
    chunk: Chunk,
    df: DataFrame | None,
    lease: ChunkLease,
    read_version: int | None,
    data_change: bool,
    metadata: Mapping[str, Any] | None,
    before_commit: Callable[[], None] | None,
) -> CommitResult:
    version = store.version(table) if read_version is None else read_version
    dropped = [f.path for f in store.files(table, version=version) if chunk.holds(f)]
    if df is not None:
        _check_rows_belong(df, chunk, table)
    fence = lease.fence()
    meta = {"lakeshard.chunk": str(chunk), "lakeshard.replace": "compaction" if not data_change else "replacement",
            "lakeshard.lockHolder": lease.state.holder, "lakeshard.lockGeneration": lease.state.generation,
            **(metadata or {})}
    if before_commit is not None:
        before_commit()
    result = store.replace_files(table, dropped, df, data_change=data_change, app_transactions=[fence],
                                 metadata=meta, read_version=version)
    if result.skipped:
        raise LockLost(f"chunk {chunk} was already replaced under a newer lock generation than "
                       f"{lease.state.generation} of {lease.state.holder}; this replacement was not committed")
    return result


def _check_rows_belong(df: DataFrame, chunk: Chunk, table: str) -> None:
    from pyspark.sql import functions as F

    stray = df.where(~((F.col("tenant_id") == chunk.tenant_id) & (F.col("hour") == chunk.hour)))
    found = stray.select("tenant_id", "hour").limit(3).collect()
    if found:
        where = ", ".join(f"{r['tenant_id']}/{r['hour']}" for r in found)
        raise VersionsError(f"replacement rows for chunk {chunk} of {table} include rows of other chunks: {where}")
