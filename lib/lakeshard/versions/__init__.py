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
    )
    from lakeshard.versions.errors import VersionsError
    from lakeshard.versions.locks import (
        CHUNK_LOCKS,
        ChunkLease,
        ChunkLocked,
        ChunkLocks,
        LockLost,
        LockState,
    )
    from lakeshard.versions.replace import replace_chunk

__all__ = [
    "CHUNK_LOCKS",
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
]

# Loaded on first use: the CLI wiring imports this package and should not pay for pyspark until a command runs.
_HOME = {
    "CHUNK_LOCKS": "locks",
    "Chunk": "chunks",
    "ChunkDiff": "chunks",
    "ChunkLease": "locks",
    "ChunkLocked": "locks",
    "ChunkLocks": "locks",
    "ChunkSnapshot": "chunks",
    "ChunkVersion": "chunks",
    "ChunkVersions": "chunks",
    "KeyFrame": "chunks",
    "LockLost": "locks",
    "LockState": "locks",
    "VersionsError": "errors",
    "chunk_changes": "chunks",
    "read_chunk": "chunks",
    "replace_chunk": "replace",
    "roll_forward": "chunks",
}

__getattr__, __dir__ = lazy_exports(__name__, _HOME, globals())
