"""A lazily opened store: small routing and writer steps run without ever starting Spark."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from lakeshard.config import load_config
from lakeshard.dedupe.writer import EVENTS, ShardWriter
from lakeshard.errors import LakeshardError
from lakeshard.lake import TableStore, open_lazy_store
from lakeshard.lake.embedded import EmbeddedTableStore
from lakeshard.routing.router import Router
from lakeshard.synth import SynthSpec, generate_landing
from lakeshard.synth.verify import check_against_truth
from lakeshard.tables import QUARANTINE


class SparkWanted(LakeshardError):
    """Raised by a store that must not start Spark, naming who asked."""


def _no_spark() -> SparkSession:
    raise SparkWanted("a driver-side step asked for a Spark session")


def test_small_steps_route_and_write_exactly_once_without_starting_spark(
    spark: SparkSession, store: TableStore, tmp_path: Path
) -> None:
    landing = tmp_path / "landing"
    m = generate_landing(landing, SynthSpec(events=1500, tenants=8, hours=0.3, seed=5, bad_rate=0.02,
                                            retry_rate=0.05, redelivered_files=0.1))
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": str(landing),
                                 "routing": {"total_shards": 4, "default_shard_count": 2}}, env={})
    lazy = EmbeddedTableStore(None, start_spark=_no_spark)
    router = Router(None, lazy, cfg, max_batch_files=4)
    writer = ShardWriter(None, lazy, cfg, [0, 1, 2, 3])
    while True:  # the ingest loop: route what arrived, write what was routed
        routed, wrote = router.route_once(), writer.step()
        if routed is None and wrote is None:
            break
    assert not lazy.spark_started

    check = check_against_truth(spark, store.read(cfg.table_uri(EVENTS)), str(landing))
    assert check.exactly_once, check
    by_cat = {r["category"]: r["n"] for r in
              store.read(cfg.table_uri(QUARANTINE)).groupBy("category").agg(F.count("*").alias("n")).collect()}
    assert by_cat == {k: v for k, v in m.bad_by_category.items() if v}


def test_a_lazy_store_starts_spark_only_when_a_dataframe_is_needed(tmp_path: Path) -> None:
    lazy = EmbeddedTableStore(None, start_spark=_no_spark)
    uri = str(tmp_path / "t")
    lazy.create(uri, StructType.fromDDL("x long"))
    lazy.append_arrow(uri, pa.table({"x": [1, 2, 3]}))
    assert lazy.read_table_arrow(uri).column("x").to_pylist() == [1, 2, 3]
    assert lazy.version(uri) == 1 and not lazy.spark_started
    with pytest.raises(SparkWanted):
        lazy.read(uri)


def test_open_lazy_store_defers_spark_on_a_local_embedded_lakehouse(tmp_path: Path) -> None:
    lazy = open_lazy_store(load_config(overrides={"lakehouse": str(tmp_path)}, env={}))
    assert isinstance(lazy, EmbeddedTableStore) and not lazy.spark_started
