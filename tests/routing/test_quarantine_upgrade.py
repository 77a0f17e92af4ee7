"""A lakehouse whose tables were made before a nullable column of theirs keeps routing: ``quarantine`` gains
``start_byte``/``end_byte`` (null in its old rows) on first open, as ``landing_batches`` gained its range columns,
and ``routed`` gains ``batch``."""

from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from deltalake import DeltaTable  # an independent reader of what the router committed
from pyspark.sql.types import StructType

from lakeshard.config import load_config
from lakeshard.dedupe.writer import ShardWriter
from lakeshard.landing import reasons
from lakeshard.routing.router import Router
from lakeshard.tables import EVENTS, QUARANTINE, ROUTED, ROUTED_PARTITIONING
from lakeshard.tables.schemas import QUARANTINE_SCHEMA, ROUTED_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakeshard.lake import TableStore


def test_a_quarantine_table_made_before_byte_ranges_gains_them_and_routing_goes_on(
        spark: SparkSession, store: TableStore, tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    line = json.dumps({"tenant_id": "t", "event_id": "e1", "ts": int(time.time() * 1000)}).encode() + b"\n"
    whole = gzip.compress(line * 3 + b"not json\n", mtime=0)
    (landing / "a.json.gz").write_bytes(whole + gzip.compress(line * 40, mtime=0)[:30])  # the second member cut
    old = time.time() - 7200
    os.utime(landing / "a.json.gz", (old, old))
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": str(landing)}, env={})
    older = StructType([f for f in QUARANTINE_SCHEMA.fields if f.name not in ("start_byte", "end_byte")])
    store.create(cfg.table_uri(QUARANTINE), older)

    Router(spark, store, cfg).run()
    rows = DeltaTable(cfg.table_uri(QUARANTINE)).to_pyarrow_table(
        columns=["category", "start_byte", "end_byte"]).to_pylist()
    assert sorted((r["category"], r["start_byte"], r["end_byte"]) for r in rows) == [
        (reasons.INVALID_JSON, None, None), (reasons.UNREADABLE_FILE, len(whole), len(whole) + 30)]


def test_a_routed_table_made_before_router_batches_gains_the_column_and_the_writers_read_it(
        spark: SparkSession, store: TableStore, tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    now = int(time.time() * 1000)
    (landing / "a.jsonl").write_bytes(b"".join(
        json.dumps({"tenant_id": "t", "event_id": f"e{i}", "ts": now}).encode() + b"\n" for i in range(5)))
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": str(landing),
                                 "routing": {"total_shards": 2, "default_shard_count": 2}}, env={})
    older = StructType([f for f in ROUTED_SCHEMA.fields if f.name != "batch"])
    store.create(cfg.table_uri(ROUTED), older, partition_by=ROUTED_PARTITIONING)

    Router(None, store, cfg).run()
    ShardWriter(None, store, cfg, [0, 1]).run()
    routed = DeltaTable(cfg.table_uri(ROUTED)).to_pyarrow_table(columns=["event_id", "batch"]).to_pylist()
    assert sorted((r["event_id"], r["batch"]) for r in routed) == [(f"e{i}", 1) for i in range(5)]
    events = DeltaTable(cfg.table_uri(EVENTS)).to_pyarrow_table(columns=["event_id"]).column("event_id")
    assert sorted(events.to_pylist()) == [f"e{i}" for i in range(5)]
