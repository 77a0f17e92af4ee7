"""The Arrow route: a batch's landing events as an Arrow table, each with its placement window and shard.

The same allocator call and the same hashes as :func:`lakeshard.routing.spark_route.route`, in this process: the
same rows land on the same shards whichever route a batch takes.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lakeshard.routing.allocator import ShardAllocator
from lakeshard.routing.errors import RoutingError
from lakeshard.routing.hashing import event_hashes
from lakeshard.tables import ROUTED_SCHEMA

__all__ = ["route_arrow", "routed_rows"]


def route_arrow(events: pa.Table, allocator: ShardAllocator) -> pa.Table:
    """Return ``events`` (landing event rows as Arrow) with ``window_start`` and ``shard``: :func:`route` in
    this process, for small batches. Same allocator call, same hashes, so the same rows land on the same shards."""
    size = allocator.window_seconds * 1_000_000
    us = events.column("ts").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_numpy()
    window_us = us - np.mod(us, size)  # floor, like Spark's pmod: pre-1970 times stay on the grid
    tenant, window, k = _pairs(events.column("tenant_id"), window_us)
    ordered = allocator.resolve_windows(tenant, window)
    counts = np.array([len(p.shards) for p in ordered], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    flat = np.fromiter((s for p in ordered for s in p.shards), dtype=np.int32, count=int(counts.sum()))
    row_versions = np.array([p.hash_version for p in ordered], dtype=np.int32)[k]
    hashes = np.zeros(len(us), dtype=np.int64)
    for version in np.unique(row_versions):
        mask = row_versions == version
        chosen = events.column("event_id").filter(pa.array(mask))
        hashes[mask] = event_hashes(chosen, int(version)).to_numpy(zero_copy_only=False)
    shard = flat[offsets[k] + np.mod(hashes, counts[k])]  # np.mod of a negative hash is >= 0, like Spark's pmod
    return (events.append_column("window_start", pa.array(window_us).cast(pa.timestamp("us", tz="UTC")))
            .append_column("shard", pa.array(shard, pa.int32())))


def routed_rows(routed: pa.Table, batch: int) -> pa.Table:
    """Return :func:`route_arrow`'s rows as ``routed`` holds them: its columns, with the router ``batch`` they
    belong to (which copy of a re-sent event a writer step spanning several batches keeps)."""
    rows = routed.append_column("batch", pa.array(np.full(routed.num_rows, batch, np.int64)))
    return rows.select(ROUTED_SCHEMA.fieldNames())


def _pairs(tenants: pa.ChunkedArray, window_us: np.ndarray) -> tuple[list[str], list[int], np.ndarray]:
    """Return the distinct ``(tenant, window start)`` pairs of a batch (tenants, window starts), and each row's
    position among them: two factorizations of integers instead of a group-by and a join on strings.

    Raises:
        RoutingError: a row has no tenant (the parse quarantines those; nothing routes them).
    """
    import pandas as pd
    import pyarrow.compute as pc

    if tenants.null_count:
        raise RoutingError(f"routing: expected every event to have a tenant_id, found {tenants.null_count} without")
    encoded = pc.dictionary_encode(tenants).combine_chunks()
    tenant_code = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    window_code, windows = pd.factorize(window_us)
    width = max(len(windows), 1)
    k, pairs = pd.factorize(tenant_code * width + window_code)
    names = encoded.dictionary.to_pylist()
    tenant_of, window_of = np.divmod(pairs, width)
    return ([names[t] for t in tenant_of.tolist()], [int(w) for w in windows[window_of].tolist()],
            k.astype(np.int64, copy=False))
