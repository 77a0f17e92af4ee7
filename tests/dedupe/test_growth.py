"""Writer-side work that must not grow with the number of shards: the ID index repair over hundreds of shards."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakeshard.dedupe.index import IdIndex
from lakeshard.lake import TableStore
from lakeshard.tables import EVENTS_PARTITIONING, ID_INDEX_PARTITIONING
from lakeshard.tables.schemas import EVENTS_SCHEMA, ID_INDEX_PROPERTIES, ID_INDEX_SCHEMA

SHARDS = 600  # ChunkLocks.states overflowed the JVM stack at 500 per-tenant predicates


def _no_commit_hook(point: str) -> None:
    """The index's commit-point hook: nothing to inject here."""


@pytest.mark.slow
@pytest.mark.parametrize("arrow_max_bytes", [0, 64 << 20], ids=["spark", "arrow"])  # 0: always Spark
def test_repair_over_hundreds_of_shards_behind(spark: SparkSession, store: TableStore, tmp_path: Path,
                                               arrow_max_bytes: int) -> None:
    """A repair whose shards are all behind rebuilds exactly the rows between each shard's index progress and its
    ``events`` progress; on Spark, in one job whose plan does not grow with the shards (a predicate per shard
    overflows the analyser's recursion at a few hundred)."""
    events_uri, ids_uri = str(tmp_path / "events"), str(tmp_path / "event_ids")
    store.create(events_uri, EVENTS_SCHEMA, partition_by=EVENTS_PARTITIONING)
    store.create(ids_uri, ID_INDEX_SCHEMA, partition_by=ID_INDEX_PARTITIONING, properties=ID_INDEX_PROPERTIES)
    ts = datetime(2026, 1, 1, 5, 30, tzinfo=UTC)
    # Per shard: one row at each routed version 1..3; the events progress is 2 for every shard but the last (3).
    rows = [("t0", f"e{s}-{v}", ts, None, None, None, None, None, None, 10, s, v, "2026-01-01T05", False)
            for s in range(SHARDS) for v in (1, 2, 3)]
    store.append(events_uri, spark.createDataFrame(rows, EVENTS_SCHEMA))
    progress = {s: 2 for s in range(SHARDS)} | {SHARDS - 1: 3}
    index = IdIndex(store, tuple(range(SHARDS)), ids_uri=ids_uri, events_uri=events_uri,
                    retention=timedelta(days=1), cache_bytes=1 << 20, arrow_max_bytes=arrow_max_bytes,
                    spark=lambda: spark, before_commit=_no_commit_hook)

    assert index.repair(progress) == SHARDS * 2 + 1
    ids = {(r["shard"], r["routed_version"]) for r in store.read(ids_uri).collect()}
    assert ids == {(s, v) for s in range(SHARDS) for v in range(1, progress[s] + 1)}
    assert index.repair(progress) == 0  # the app transactions record each shard's rebuilt progress


def test_routed_feed_log_reads_equal_snapshots(store: TableStore, tmp_path: Path) -> None:
    """The feed's one pass over the log picks, per shard, the routed files a snapshot at its progress and one at
    the step's version tell apart, and expiry removes exactly the files live at each shard's progress and
    still live — over many shards at scattered progress, with files removed in between."""
    import random

    import pyarrow as pa
    from pyspark.sql.types import IntegerType, LongType, StructField, StructType

    from lakeshard.config import DedupeConfig
    from lakeshard.dedupe.feed import RoutedFeed

    rnd = random.Random(7)
    uri = str(tmp_path / "routed")
    store.create(uri, StructType([StructField("shard", IntegerType(), False), StructField("x", LongType(), False)]),
                 partition_by=["shard"])
    shards = tuple(range(40))
    for version in range(1, 9):
        touched = rnd.sample(shards, 12)
        store.append_arrow(uri, pa.table({"shard": pa.array(touched, pa.int32()),
                                          "x": pa.array([version] * len(touched), pa.int64())}))
        if version in (4, 7):  # another writer's expiry removes some files
            doomed = [f.path for f in store.files(uri) if rnd.random() < 0.3]
            store.replace_files(uri, doomed, None, data_change=True)
    latest = store.version(uri)
    feed = RoutedFeed(store, shards, routed_uri=uri, events_uri=str(tmp_path / "events"), dedupe=DedupeConfig(),
                      clock=lambda: datetime.now(UTC), before_commit=_no_commit_hook)
    for _ in range(20):
        progress = {s: rnd.choice([0, *range(1, latest)]) for s in shards}
        version = rnd.randint(max(progress.values()) + 1, latest) if max(progress.values()) < latest else latest
        todo = tuple(s for s in shards if progress[s] < version)
        by_log = feed._new_routed_files(todo, progress, version)
        by_snapshot = feed._new_routed_files_by_snapshot(todo, progress, version)
        assert sorted(f.path for f in by_log) == sorted(f.path for f in by_snapshot)

    progress = {s: rnd.choice([0, *range(1, latest + 1)]) for s in shards}
    live = {f.path for f in store.files(uri)}
    expected = {f.path for s in shards if progress[s] for f in store.files(uri, version=progress[s])
                if f.partition_values["shard"] == str(s) and f.path in live}
    assert expected and expected != live
    assert feed.expire_routed(lambda: progress) == len(expected)
    assert live - {f.path for f in store.files(uri)} == expected


def test_late_assignment_broadcasts_only_the_batch_buckets(spark: SparkSession,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Given the batch's (tenant, own hour) pairs, bucket assignment gives the rows it gives with every closed
    bucket, and its broadcast lookup holds only the closed buckets among those pairs (not every bucket ever
    closed, which grows with history)."""
    from lakeshard.buckets import assign_buckets

    now = datetime(2026, 1, 2, 12, 5, tzinfo=UTC)
    hours = [(now - timedelta(hours=h)).strftime("%Y-%m-%dT%H") for h in range(1, 25)]
    closed = {(f"t{t}", h) for t in range(100) for h in hours} | {("t0", now.strftime("%Y-%m-%dT%H"))}
    rows = [("t0", "a", now - timedelta(hours=2)), ("t0", "b", now), ("t1", "c", now - timedelta(hours=30)),
            ("t7", "d", now - timedelta(hours=5)), ("t500", "e", now - timedelta(hours=1))]
    events = spark.createDataFrame(rows, "tenant_id string, event_id string, ts timestamp").withColumn(
        "interval", F.date_format("ts", "yyyy-MM-dd'T'HH"))
    pairs = {(str(r["tenant_id"]), str(r["interval"])) for r in events.collect()}

    lookups: list[int] = []
    create = SparkSession.createDataFrame

    def spy(self: SparkSession, data: object, *args: object, **kwargs: object) -> object:
        if isinstance(data, list):
            lookups.append(len(data))
        return create(self, data, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(SparkSession, "createDataFrame", spy)
    every = {(r["event_id"], r["hour"], r["late"]) for r in assign_buckets(events, closed, now).collect()}
    only = {(r["event_id"], r["hour"], r["late"]) for r in assign_buckets(events, closed, now, pairs).collect()}
    assert only == every
    assert ("a", "2026-01-02T13", True) in only  # t0's own hour is closed, and so is the current one
    assert lookups == [len(closed), 3]  # the closed own hours of a, b and d


def test_page_ins_list_the_index_once_per_version(spark: SparkSession, store: TableStore, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Page-ins at one ``event_ids`` version share one listing of its files (the listing grows with every shard
    and hour retained); a commit makes the next page-in list again, and it finds the new IDs."""
    import pyarrow as pa

    from lakeshard.dedupe.cache import IdInterval

    events_uri, ids_uri = str(tmp_path / "events"), str(tmp_path / "event_ids")
    store.create(ids_uri, ID_INDEX_SCHEMA, partition_by=ID_INDEX_PARTITIONING, properties=ID_INDEX_PROPERTIES)

    def commit(shard: int, key: int) -> None:
        store.append_arrow(ids_uri, pa.table({
            "shard": pa.array([shard], pa.int32()), "interval": ["2026-01-01T05"],
            "routed_version": pa.array([1], pa.int64()), "key_hi": pa.array([key], pa.int64()),
            "key_lo": pa.array([key], pa.int64())}))

    for shard in range(3):
        commit(shard, shard)
    index = IdIndex(store, (0, 1, 2), ids_uri=ids_uri, events_uri=events_uri, retention=timedelta(days=1),
                    cache_bytes=1 << 20, arrow_max_bytes=0, spark=lambda: spark, before_commit=_no_commit_hook)
    listings: list[str] = []
    files = store.files

    def counted(table: str, **kwargs: int | None) -> list:  # type: ignore[type-arg]
        if table == ids_uri:
            listings.append(table)
        return files(table, **kwargs)

    monkeypatch.setattr(store, "files", counted)
    into: dict[tuple[int, str], IdInterval] = {}
    assert index.page_in({(0, "2026-01-01T05")}, into) == 1
    assert index.page_in({(1, "2026-01-01T05"), (2, "2026-01-01T05")}, into) == 2
    assert len(listings) == 1
    commit(2, 7)
    assert index.page_in({(2, "2026-01-01T05")}, into) == 2
    assert len(listings) == 2


def test_a_new_writer_per_run_keeps_consumed_routed_files_and_past_id_intervals_bounded(
    spark: SparkSession, store: TableStore, tmp_path: Path
) -> None:
    """The ingest job builds a new ``ShardWriter`` per run, and each run consumes a few routed files. Over a
    stream of several hours with late events, run after run: the live ``routed`` files their shards' progress
    passed stay below ``routed_expire_files``, no ``event_ids`` interval below its shard's newest hour keeps
    more than one file, and ``events`` equals the ground truth — however few files one writer object sees."""
    from lakeshard.config import load_config
    from lakeshard.dedupe.index import interval_of
    from lakeshard.dedupe.writer import EVENTS, ID_INDEX, ShardWriter
    from lakeshard.routing.router import Router
    from lakeshard.synth import SynthSpec, generate_landing
    from lakeshard.synth.verify import check_against_truth
    from lakeshard.tables import ROUTED, writer_app_id

    landing = tmp_path / "landing"
    generate_landing(landing, SynthSpec(events=600, tenants=3, hours=3, seed=11, file_seconds=900, retry_rate=0.05,
                                        late_rate=0.2, late_max_hours=3, redelivered_files=0.0, bad_rate=0.0))
    expire_every = 4
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": str(landing),
                                 "routing": {"total_shards": 2, "default_shard_count": 2},
                                 "dedupe": {"routed_expire_files": expire_every}}, env={})
    routed_uri, events_uri, ids_uri = cfg.table_uri(ROUTED), cfg.table_uri(EVENTS), cfg.table_uri(ID_INDEX)
    aside = tmp_path / "arriving"
    arriving = sorted(p.relative_to(landing) for p in landing.rglob("part-*") if "_truth" not in p.parts)
    for rel in arriving:
        (aside / rel).parent.mkdir(parents=True, exist_ok=True)
        (landing / rel).rename(aside / rel)

    def consumed_live() -> int:
        """Live routed files added at or before their shard's progress."""
        done = store.transaction_versions(events_uri, [writer_app_id(s) for s in (0, 1)])
        added = {c.file.path: e.version for e in store.log_entries(routed_uri) for c in e.changes
                 if c.action == "add"}
        return sum(1 for f in store.files(routed_uri)
                   if added[f.path] <= (done[writer_app_id(int(f.partition_values["shard"] or -1))] or 0))

    def past_multi_file_intervals() -> int:
        """Intervals below their shard's newest hour in ``event_ids`` that hold more than one file."""
        files = [interval_of(f) for f in store.files(ids_uri)]
        newest = {s: max(h for t, h in files if t == s) for s, _ in files}
        return sum(1 for key in set(files) if key[1] < newest[key[0]] and files.count(key) > 1)

    runs = 0
    for start in range(0, len(arriving), 2):  # two landing files arrive between runs
        for rel in arriving[start:start + 2]:
            (aside / rel).rename(landing / rel)
        Router(spark, store, cfg).run()
        ShardWriter(spark, store, cfg, [0, 1]).run()  # a fresh writer per run, as the ingest job builds one
        runs += 1
        assert consumed_live() < expire_every, f"run {runs}"
        assert past_multi_file_intervals() == 0, f"run {runs}"
    assert runs >= 6
    check = check_against_truth(spark, store.read(events_uri), str(landing))
    assert check.exactly_once, check
