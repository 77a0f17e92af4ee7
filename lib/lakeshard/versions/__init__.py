"""Time-chunk versions (Druid): per-chunk ADD/DROP history from the Delta log, replace locks, replacements.

Example::

    from lakeshard.versions import Chunk, ChunkLocks, ChunkVersions, read_chunk, replace_chunk

    chunk = Chunk.parse("acme/2026-01-01T10")
    ChunkVersions(store, events_uri, chunk).log()            # what each version added and dropped
    read_chunk(spark, store, events_uri, chunk, version=7)    # the chunk's rows as of version 7
    locks = ChunkLocks(store, cfg.table_uri("chunk_locks"))
    replace_chunk(store, events_uri, chunk, None, locks=locks)  # empty it: one commit, no tombstone
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakeshard._lazy import lazy_exports

if TYPE_CHECKING:
    from lakeshard.versions.chunks import (
        Chunk,
        ChunkDiff,
        ChunkSnapshot,
        ChunkVersion,
        ChunkVersions,
        KeyFrame,
        chunk_changes,
        read_chunk,
        roll_forward,
        rows_in,
    )
    from lakeshard.versions.errors import (
        VersionsError,
    )
    from lakeshard.versions.locks import (
        ChunkLease,
        ChunkLocked,
        ChunkLocks,
        LockLost,
        LockState,
    )
    from lakeshard.versions.replace import (
        replace_chunk,
    )

# Spark and Arrow load on first use of a name, not on `import lakeshard.versions`.
__all__ = [
    "Chunk",
    "ChunkDiff",
    "ChunkLease",
    "ChunkLocked",
    "ChunkLocks",
    "ChunkSnapshot",
    "ChunkVersion",
    "ChunkVersions",
    "KeyFrame",
    "LockLost",
    "LockState",
    "VersionsError",
    "chunk_changes",
    "read_chunk",
    "replace_chunk",
    "roll_forward",
    "rows_in",
]

__getattr__, __dir__ = lazy_exports(globals())
