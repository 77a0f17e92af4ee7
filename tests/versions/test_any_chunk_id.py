"""A chunk's replacement and history for tenant ids holding any character (path separators, escapes, Unicode)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _chunk_table import Rows, ids

from lakeshard.lake import TableStore
from lakeshard.versions import Chunk, ChunkLocks, ChunkVersions, read_chunk, replace_chunk

H10 = "2026-01-01T10"


# Rows here are written by Spark (``partitionBy``), whose directory names cannot hold a 128-character tenant
# of escaped characters (docs/lake.md); ingest and compaction write those from Arrow (tests/test_any_id.py).
@pytest.mark.parametrize("tenant", ["a/b", "100%", "%2F", "x=y", "ü/日本 \"q'\\", "\t\n", "c1\x85\x9f",
                                    "nb\xa0\u2028\u3000"],
                         ids=["slash", "percent", "escaped-slash", "equals", "unicode-quotes", "control", "c1-control",
                              "unicode-spaces"])
def test_replacing_a_chunk_of_any_tenant_drops_exactly_its_files(
    store: TableStore, chunk_table: str, rows: Rows, tmp_path: Path, tenant: str
) -> None:
    """The swap's removes name the chunk's files as the log does: the old rows go, nothing is doubled."""
    store.append(chunk_table, rows(tenant, H10, "old", 3))
    store.append(chunk_table, rows("other", H10, "keep", 2))
    chunk = Chunk(tenant, H10)
    result = replace_chunk(store, chunk_table, chunk, rows(tenant, H10, "new", 2),
                           locks=ChunkLocks(store, str(tmp_path / "chunk_locks")))
    assert (result.files_removed, result.files_added) == (1, 1)
    assert ids(read_chunk(store.spark, store, chunk_table, chunk)) == ["new-0", "new-1"]
    assert ids(read_chunk(store.spark, store, chunk_table, Chunk("other", H10))) == ["keep-0", "keep-1"]
    [latest, first] = ChunkVersions(store, chunk_table, chunk).log()
    assert (len(latest.added), len(latest.dropped), len(first.added)) == (1, 1, 1)
    assert [f.path for f in latest.dropped] == [f.path for f in first.added]
