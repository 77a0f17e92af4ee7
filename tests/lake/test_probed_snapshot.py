"""The embedded store's latest snapshot replayed without listing ``_delta_log`` equals delta-rs' own (same
version, same live files with the same statistics), with and without checkpoints."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from lakeshard.errors import TableStoreError
from lakeshard.lake.embedded import EmbeddedTableStore
from lakeshard.lake.embedded.log import live_files
from lakeshard.lake.embedded.probed_log import probed_files, probed_state
from lakeshard.lake.types import FileInfo

T0 = datetime(2026, 3, 1, 7, tzinfo=UTC)


def _batch(n: int, at: int) -> pa.Table:
    return pa.table({
        "tenant_id": pa.array([["acme", "a b:c/d%"][i % 2] for i in range(n)]),
        "ts": pa.array([T0 + timedelta(minutes=at + i) for i in range(n)], pa.timestamp("us", tz="UTC")),
        "service": pa.array([None if i % 3 == 0 else f"svc-{at + i}" for i in range(n)]),
        "size_bytes": pa.array(range(n), pa.int64()),
        "origin": pa.array([{"region": f"r{i % 3}", "zone": i} for i in range(n)],
                           pa.struct([("region", pa.string()), ("zone", pa.int64())])),
    })


def _append(uri: str, at: int) -> None:
    write_deltalake(uri, _batch(4, at), mode="append", partition_by=["tenant_id"])


def _key(f: FileInfo) -> tuple[Any, ...]:
    return (f.path, f.size_bytes, f.num_records, dict(f.partition_values), f.modification_time,
            dict(f.min_values), dict(f.max_values), dict(f.null_counts))


def _assert_same_as_delta_rs(uri: str) -> None:
    dt = DeltaTable(uri)
    state = probed_state(uri)
    assert state is not None
    assert state.version == dt.version()
    assert sorted(map(_key, probed_files(state))) == sorted(map(_key, live_files(dt)))
    store = EmbeddedTableStore(None)
    assert sorted(map(_key, store.files(uri))) == sorted(map(_key, live_files(dt)))


def _split_checkpoint(uri: str, version: int) -> None:
    """Rewrite the single-part checkpoint at ``version`` as a two-part one, as a Delta writer with
    ``checkpoint.partSize`` writes it, and point ``_last_checkpoint`` at it."""
    log = Path(uri) / "_delta_log"
    single = log / f"{version:020d}.checkpoint.parquet"
    table = pq.read_table(single)
    half = table.num_rows // 2
    for i, part in enumerate((table.slice(0, half), table.slice(half)), start=1):
        pq.write_table(part, log / f"{version:020d}.checkpoint.{i:010d}.0000000002.parquet")
    single.unlink()
    hint = json.loads((log / "_last_checkpoint").read_text())
    (log / "_last_checkpoint").write_text(json.dumps({**hint, "parts": 2}))


def test_without_a_checkpoint(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    for at in range(0, 20, 4):
        _append(uri, at)
    DeltaTable(uri).optimize.compact()  # removes and adds
    _append(uri, 40)
    _assert_same_as_delta_rs(uri)


@pytest.mark.parametrize("parts", [1, 2])
def test_from_a_checkpoint_and_the_commits_after_it(tmp_path: Path, parts: int) -> None:
    uri = str(tmp_path / "t")
    for at in range(0, 24, 4):
        _append(uri, at)
    DeltaTable(uri).optimize.compact()
    dt = DeltaTable(uri)
    dt.create_checkpoint()
    if parts == 2:
        _split_checkpoint(uri, dt.version())
    # commits older than the checkpoint are not needed: cleaned up, as log retention leaves them
    for old in range(dt.version()):
        (Path(uri) / "_delta_log" / f"{old:020d}.json").unlink()
    _assert_same_as_delta_rs(uri)  # the checkpoint alone
    _append(uri, 100)
    write_deltalake(uri, _batch(2, 200), mode="overwrite", partition_by=["tenant_id"])  # removes every file
    _append(uri, 300)
    _assert_same_as_delta_rs(uri)


def test_a_store_follows_new_commits_and_a_recreated_table(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _append(uri, 0)
    store = EmbeddedTableStore(None)
    assert len(store.files(uri)) == 2
    _append(uri, 10)
    DeltaTable(uri).create_checkpoint()
    _append(uri, 20)
    assert sorted(map(_key, store.files(uri))) == sorted(map(_key, live_files(DeltaTable(uri))))
    assert store.files(uri, version=1) and len(store.files(uri, version=0)) == 2
    import shutil

    shutil.rmtree(uri)
    _append(uri, 50)
    assert sorted(map(_key, store.files(uri))) == sorted(map(_key, live_files(DeltaTable(uri))))


def test_no_table_is_left_to_delta_rs(tmp_path: Path) -> None:
    assert probed_state(str(tmp_path / "nothing")) is None


def test_a_stale_last_checkpoint_after_log_cleanup_is_left_to_delta_rs(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    for at in range(0, 12, 4):
        _append(uri, at)
    DeltaTable(uri).create_checkpoint()  # at version 2
    log = Path(uri) / "_delta_log"
    stale = (log / "_last_checkpoint").read_text()
    for at in range(20, 32, 4):
        _append(uri, at)
    DeltaTable(uri).create_checkpoint()  # at version 5, then versions before it cleaned up
    for old in range(5):
        (log / f"{old:020d}.json").unlink()
    (log / "_last_checkpoint").write_text(stale)  # a writer that died before updating the hint
    assert probed_state(uri) is None
    store = EmbeddedTableStore(None)
    assert sorted(map(_key, store.files(uri))) == sorted(map(_key, live_files(DeltaTable(uri))))


@pytest.mark.parametrize("cut", [0.3, 0.8])
def test_a_torn_commit_is_one_line_naming_the_table_and_the_commit(tmp_path: Path, cut: float) -> None:
    """A commit file cut short (a disk that lost its tail) makes every read of the table fail with one line that
    names the table and the commit, however the store meets it (its own replay or delta-rs)."""
    uri = str(tmp_path / "quarry")
    for at in range(4):
        write_deltalake(uri, _batch(3, at), mode="append")
    torn = Path(uri) / "_delta_log" / f"{3:020d}.json"
    text = torn.read_text()
    torn.write_text(text[: int(len(text) * cut)])
    store = EmbeddedTableStore(None)
    for read in (store.version, store.files, store.history, store.read_table_arrow):
        with pytest.raises(TableStoreError) as raised:
            read(uri)
        message = str(raised.value)
        assert message.startswith(f"{uri}: ") and "commit 3" in message and "\n" not in message, message
