"""A lakehouse whose ``quarantine`` table was made before the byte-range columns keeps routing: the table gains
``start_byte``/``end_byte`` (null in its old rows) on first open, as ``landing_batches`` gained its range columns."""

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
from lakeshard.landing import reasons
from lakeshard.landing.schema import QUARANTINE_SCHEMA
from lakeshard.routing.router import Router
from lakeshard.tables import QUARANTINE

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
