"""Exactly once does not depend on memory: a writer whose ID cache holds less than one interval still checks
every interval a step touches."""

from __future__ import annotations

import gzip
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakeshard.config import load_config
from lakeshard.dedupe.writer import EVENTS, ShardWriter
from lakeshard.lake import TableStore
from lakeshard.routing.router import Router
from lakeshard.synth import SynthSpec, generate_landing


def _input_keys(landing: Path) -> set[tuple[str, str, int]]:
    """Return every ``(tenant_id, event_id, ts in epoch microseconds)`` the landing zone holds, read here with
    the standard library (not with lakeshard's reader): what ``events`` must hold, each once."""
    keys = set()
    for path in landing.rglob("*"):
        if "_truth" in path.parts or not path.is_file():
            continue
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as lines:
            for line in lines:
                record = json.loads(line)
                ts = record["ts"]
                when = (datetime.fromtimestamp(ts / 1000, UTC) if isinstance(ts, int)
                        else datetime.fromisoformat(ts).astimezone(UTC))
                micros = (when - datetime(1970, 1, 1, tzinfo=UTC)) // _MICRO
                keys.add((record["tenant_id"], record["event_id"], micros))
    return keys


_MICRO = datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)


def _event_keys(spark: SparkSession, store: TableStore, uri: str) -> list[tuple[str, str, int]]:
    rows = store.read(uri).selectExpr("tenant_id", "event_id", "unix_micros(ts) AS us").collect()
    return [(str(r["tenant_id"]), str(r["event_id"]), int(r["us"])) for r in rows]


@pytest.mark.parametrize(("cache_bytes", "engine"), [(1, {}), (4 << 10, {}), (1, {"arrow_max_bytes": 1})])
def test_a_cache_smaller_than_one_interval_still_drops_every_duplicate(
    spark: SparkSession, store: TableStore, tmp_path: Path, cache_bytes: int, engine: dict[str, int]
) -> None:
    landing = tmp_path / "landing"
    generate_landing(landing, SynthSpec(events=3000, tenants=6, hours=4, seed=11, file_seconds=600,
                                        retry_rate=0.2, redelivered_files=0.3, late_rate=0.05, bad_rate=0.0))
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": str(landing),
                                 "routing": {"total_shards": 2, "default_shard_count": 2},
                                 "dedupe": {"id_cache_bytes": cache_bytes, **engine}}, env={})
    Router(spark, store, cfg).run()
    ShardWriter(spark, store, cfg, [0, 1]).run()
    # The whole zone delivered again (an at-least-once producer replaying it): every event is a duplicate.
    replay = landing / "replay"
    for i, f in enumerate(sorted(p for p in landing.rglob("part-*") if "_truth" not in p.parts)):
        replay.mkdir(exist_ok=True)
        shutil.copy(f, replay / f"again-{i}{''.join(f.suffixes)}")
    Router(spark, store, cfg).run()
    writer = ShardWriter(spark, store, cfg, [0, 1])
    again = writer.run()
    assert sum(r.written for r in again) == 0 and sum(r.duplicates_in_index for r in again) > 0
    assert writer.cache.stats().evictions > 0  # the cache really was too small for a step's intervals

    keys = _event_keys(spark, store, cfg.table_uri(EVENTS))
    expected = _input_keys(landing)
    assert len(keys) == len(set(keys)), f"{len(keys) - len(set(keys))} keys twice in events"
    assert set(keys) == expected
