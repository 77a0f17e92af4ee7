"""The Arrow route: a batch's landing events as an Arrow table, each with its placement window and shard.

The same allocator call and the same hashes as :func:`lakeshard.routing.spark_route.route`, in this process: the
same rows land on the same shards whichever route a batch takes.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lakeshard.routing.allocator import ShardAllocator
from lakeshard.routing.hashing import event_hashes

__all__ = ["route_arrow"]


def route_arrow(events: pa.Table, allocator: ShardAllocator) -> pa.Table:
    """Return ``events`` (landing event rows as Arrow) with ``window_start`` and ``shard``: :func:`route` in
    this process, for small batches. Same allocator call, same hashes, so the same rows land on the same shards."""
    size = allocator.window_seconds * 1_000_000
    us = events.column("ts").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_numpy()
    window_us = us - np.mod(us, size)  # floor, like Spark's pmod: pre-1970 times stay on the grid
    tenants = events.column("tenant_id")
    pairs = (pa.table({"tenant_id": tenants, "_window_us": window_us})
             .group_by(["tenant_id", "_window_us"], use_threads=False).aggregate([]))
    ordered = allocator.resolve_windows(pairs.column("tenant_id").to_pylist(), pairs.column("_window_us").to_pylist())
    counts = np.array([len(p.shards) for p in ordered], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    flat = np.fromiter((s for p in ordered for s in p.shards), dtype=np.int32, count=int(counts.sum()))
    # Each row's placement: its (tenant, window)'s position in ``pairs``, found by a join on the two keys.
    lookup = pairs.append_column("_k", pa.array(np.arange(len(ordered), dtype=np.int64)))
    rows = (pa.table({"tenant_id": tenants, "_window_us": window_us, "_row": np.arange(len(us), dtype=np.int64)})
            .join(lookup, ["tenant_id", "_window_us"], join_type="inner", use_threads=False).sort_by("_row"))
    k = rows.column("_k").to_numpy()
    row_versions = np.array([p.hash_version for p in ordered], dtype=np.int32)[k]
    hashes = np.zeros(len(us), dtype=np.int64)
    for version in np.unique(row_versions):
        mask = row_versions == version
        chosen = events.column("event_id").filter(pa.array(mask))
        hashes[mask] = event_hashes(chosen, int(version)).to_numpy(zero_copy_only=False)
    shard = flat[offsets[k] + np.mod(hashes, counts[k])]  # np.mod of a negative hash is >= 0, like Spark's pmod
    return (events.append_column("window_start", pa.array(window_us).cast(pa.timestamp("us", tz="UTC")))
            .append_column("shard", pa.array(shard, pa.int32())))
