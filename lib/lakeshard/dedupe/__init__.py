"""Exactly-once writers: routed events → ``events``, deduplicated against IDs kept in the lakehouse.

Example::

    from lakeshard.dedupe import ShardWriter

    reports = ShardWriter(spark, store, cfg, shards=[0, 1]).run()
    print(sum(r.written for r in reports), "events written")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakeshard._lazy import lazy_exports

if TYPE_CHECKING:
    from lakeshard.dedupe.errors import (
        DedupeError,
    )
    from lakeshard.dedupe.faults import (
        RecordLevelFailure,
        WriterStepFailed,
    )
    from lakeshard.dedupe.index import own_hour_arrow
    from lakeshard.dedupe.keyhash import first_of_each_key, key_hashes
    from lakeshard.dedupe.writer import (
        ShardWriter,
        WriteReport,
        WritersOnDemand,
    )

# Spark and Arrow load on first use of a name, not on `import lakeshard.dedupe`.
__all__ = [
    "DedupeError",
    "RecordLevelFailure",
    "ShardWriter",
    "WriteReport",
    "WriterStepFailed",
    "WritersOnDemand",
    "first_of_each_key",
    "key_hashes",
    "own_hour_arrow",
]

__getattr__, __dir__ = lazy_exports(globals())
