"""One table written in turn by both adapters, read at every step by every Delta reader there is.

The embedded adapter (delta-rs commits) creates the table and appends; the native adapter (Delta's own JVM
engine) continues it with appends carrying app transactions and a swap; the embedded adapter takes it back.
``delta.checkpointInterval`` is small, so checkpoints land in between, written by Delta's engine and by the
embedded adapter, and each side reads the other's. After every step Delta's reader (``format("delta")`` and
``DeltaTable.forPath``), delta-rs, and both adapters' snapshot reads must see the same rows and live files, and
all three must agree on the app transaction versions; a re-commit of an app version either side already
committed is skipped by either.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote

import pytest
from deltalake import DeltaTable as RustDeltaTable  # delta-rs: an independent reader
from pyspark.sql import SparkSession
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from lakeshard.lake import AppTransaction, TableStore

pytestmark = pytest.mark.delta_jvm

EVENTS = StructType([
    StructField("tenant_id", StringType(), False),
    StructField("event_id", StringType(), False),
    StructField("n", IntegerType(), True),
])
WRITERS = ("writer/0", "writer/1")
# Small enough that both engines' post-commit checkpoints fall inside the run below (versions 4 and 8).
CHECKPOINT_INTERVAL = 4

Row = tuple[str, str, int]


def _batch(tenant: str, start: int, n: int) -> list[Row]:
    return [(tenant, f"{tenant}-{start + i}", start + i) for i in range(n)]


def _name(path: str) -> str:
    """Return a data file's name (unique among live files), whatever form of path a reader reports."""
    return unquote(path).rstrip("/").rsplit("/", 1)[-1]


def _check_every_reader(spark: SparkSession, embedded: TableStore, native: TableStore, uri: str,
                        version: int, rows: set[Row], apps: dict[str, int | None]) -> None:
    """Assert that every reader sees ``version`` with exactly ``rows``, one set of live files, and the app
    transaction versions ``apps``."""
    from delta.tables import DeltaTable  # Delta's Python API over the JVM engine of the shared session

    def as_rows(df) -> set[Row]:  # type: ignore[no-untyped-def]
        return {(r.tenant_id, r.event_id, r.n) for r in df.select("tenant_id", "event_id", "n").collect()}

    delta_df = spark.read.format("delta").load(uri)
    rust = RustDeltaTable(uri)
    rust_rows = rust.to_pyarrow_table(columns=["tenant_id", "event_id", "n"]).to_pylist()
    seen = {
        "format(delta)": as_rows(delta_df),
        "DeltaTable.forPath": as_rows(DeltaTable.forPath(spark, uri).toDF()),
        "delta-rs": {(r["tenant_id"], r["event_id"], r["n"]) for r in rust_rows},
        "embedded": as_rows(embedded.read(uri)),
        "native": as_rows(native.read(uri)),
    }
    assert seen == dict.fromkeys(seen, rows)

    files = {
        "format(delta)": {_name(p) for p in delta_df.inputFiles()},
        "delta-rs": {_name(p) for p in rust.file_uris()},
        "embedded": {_name(f.path) for f in embedded.files(uri)},
        "native": {_name(f.path) for f in native.files(uri)},
    }
    assert files == dict.fromkeys(files, files["format(delta)"])
    detail = DeltaTable.forPath(spark, uri).detail().first()
    assert detail is not None and detail["numFiles"] == len(files["format(delta)"])

    assert detail["properties"].get("delta.checkpointInterval") == str(CHECKPOINT_INTERVAL)
    versions = {"delta-rs": rust.version(), "embedded": embedded.version(uri), "native": native.version(uri),
                "DESCRIBE HISTORY": DeltaTable.forPath(spark, uri).history(1).first()["version"]}
    assert versions == dict.fromkeys(versions, version)
    txns = {
        "delta-rs": {a: rust.transaction_version(a) for a in WRITERS},
        "embedded": {a: embedded.transaction_version(uri, a) for a in WRITERS},
        "native": {a: native.transaction_version(uri, a) for a in WRITERS},
    }
    assert txns == dict.fromkeys(txns, apps)


def test_a_table_passes_between_the_adapters_and_every_reader_agrees(
    spark: SparkSession, store: TableStore, native_store: TableStore, tmp_path: Path
) -> None:
    embedded, native = store, native_store
    uri = str(tmp_path / "events")
    rows: set[Row] = set()

    def append(by: TableStore, batch: list[Row], txn: AppTransaction | None) -> int:
        result = by.append(uri, spark.createDataFrame(batch, EVENTS).coalesce(1),
                           app_transactions=[] if txn is None else [txn])
        assert not result.skipped
        rows.update(batch)
        return result.version

    # The embedded adapter creates the table and writes the first commits (delta-rs' log, its own appends).
    assert embedded.create(uri, EVENTS, partition_by=["tenant_id"],
                           properties={"delta.checkpointInterval": str(CHECKPOINT_INTERVAL)}) == 0
    append(embedded, _batch("acme", 0, 3), AppTransaction(WRITERS[0], 1))
    append(embedded, _batch("b%c d", 0, 2), AppTransaction(WRITERS[1], 1))
    _check_every_reader(spark, embedded, native, uri, 2, rows, {WRITERS[0]: 1, WRITERS[1]: 1})

    # Delta's engine continues it: appends with app transactions, the checkpoint at 4, a swap.
    append(native, _batch("acme", 3, 2), AppTransaction(WRITERS[0], 2))
    assert append(native, _batch("zeta", 0, 2), None) == CHECKPOINT_INTERVAL
    for by in (native, embedded):  # an app version Delta's engine committed is a replay for either adapter
        again = by.append(uri, spark.createDataFrame(_batch("acme", 3, 2), EVENTS),
                          app_transactions=[AppTransaction(WRITERS[0], 2)])
        assert again.skipped and by.version(uri) == CHECKPOINT_INTERVAL
    acme = [f.path for f in native.files(uri) if f.partition_values.get("tenant_id") == "acme"]
    assert len(acme) == 2
    merged = native.replace_files(uri, acme, native.read(uri).where("tenant_id = 'acme'").coalesce(1))
    assert merged.version == 5 and merged.files_removed == 2 and merged.files_added == 1
    assert CHECKPOINT_INTERVAL in native.checkpoint_versions(uri)
    assert CHECKPOINT_INTERVAL in embedded.checkpoint_versions(uri)
    _check_every_reader(spark, embedded, native, uri, 5, rows, {WRITERS[0]: 2, WRITERS[1]: 1})

    # The embedded adapter takes it back, from Delta's checkpoint on: appends, a swap, its own checkpoint at 8.
    append(embedded, _batch("b%c d", 2, 2), AppTransaction(WRITERS[1], 2))
    for by in (embedded, native):  # and an app version delta-rs committed is a replay for Delta's engine too
        again = by.append(uri, spark.createDataFrame(_batch("b%c d", 2, 2), EVENTS),
                          app_transactions=[AppTransaction(WRITERS[1], 2)])
        assert again.skipped and by.version(uri) == 6
    odd = [f.path for f in embedded.files(uri) if f.partition_values.get("tenant_id") == "b%c d"]
    assert len(odd) == 2
    swap = embedded.replace_files(uri, odd, embedded.read(uri).where("tenant_id = 'b%c d'").coalesce(1))
    assert swap.version == 7 and swap.files_removed == 2 and swap.files_added == 1
    assert append(embedded, _batch("acme", 5, 1), AppTransaction(WRITERS[0], 3)) == 2 * CHECKPOINT_INTERVAL
    assert 2 * CHECKPOINT_INTERVAL in embedded.checkpoint_versions(uri)
    _check_every_reader(spark, embedded, native, uri, 8, rows, {WRITERS[0]: 3, WRITERS[1]: 2})

    # Delta's engine goes on from the embedded adapter's checkpoint.
    append(native, _batch("zeta", 2, 1), AppTransaction(WRITERS[1], 3))
    _check_every_reader(spark, embedded, native, uri, 9, rows, {WRITERS[0]: 3, WRITERS[1]: 3})
    assert os.path.exists(Path(uri) / "_delta_log" / "_last_checkpoint")
