"""The router end to end on real Delta tables: conservation, locality, determinism, replays, crashes."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from lakeshard.config import LakeshardConfig, load_config
from lakeshard.lake import TableStore
from lakeshard.landing import list_landing_files, parse_landing_arrow
from lakeshard.routing.allocator import ShardAllocator, plan_placements
from lakeshard.routing.hashing import HASH_MMH3, HASH_XXHASH64
from lakeshard.routing.placement import window_of
from lakeshard.routing.router import Router
from lakeshard.routing.spark_route import route, write_tasks
from lakeshard.routing.tables import (
    PLACEMENT_SCHEMA,
    PLACEMENTS,
    ShardTopology,
    placements_arrow,
    placements_from_arrow,
)
from lakeshard.synth import Manifest, SynthSpec, generate_landing
from lakeshard.synth.verify import check_against_truth
from lakeshard.tables import LANDING_BATCHES, QUARANTINE, ROUTED, ROUTING_METRICS

SPEC = SynthSpec(events=2500, tenants=12, hours=0.25, seed=11, bad_rate=0.02, retry_rate=0.05,
                 redelivered_files=0.1)


class Crash(Exception):
    """Stands in for the process dying at a commit point."""


@pytest.fixture(scope="module")
def landing(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Manifest]:
    path = tmp_path_factory.mktemp("landing")
    return str(path), generate_landing(path, SPEC)


# A batch runs in the driver (pyarrow) up to routing.arrow_max_bytes, on Spark above it: tests run both.
PATHS = {"driver": 1 << 30, "spark": 0}


@pytest.fixture(params=list(PATHS))
def where(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _cfg(tmp_path: Path, landing: str, where: str = "driver", lakehouse: str = "lh") -> LakeshardConfig:
    return load_config(overrides={"lakehouse": str(tmp_path / lakehouse), "landing": landing,
                                  "routing": {"total_shards": 8, "default_shard_count": 2,
                                              "arrow_max_bytes": PATHS[where]}}, env={})


def _assert_routed_exactly(spark: SparkSession, store: TableStore, cfg: LakeshardConfig, landing: str,
                           m: Manifest) -> None:
    routed = store.read(cfg.table_uri(ROUTED))
    truth = check_against_truth(spark, routed, landing)
    # Every valid record is routed once (duplicates are still here: the writers drop them), nothing invented.
    assert (truth.missing, truth.unexpected) == (0, 0)
    assert truth.rows == m.unique_events + m.duplicate_records
    quarantine = store.read(cfg.table_uri(QUARANTINE))
    by_cat = {r["category"]: r["n"] for r in quarantine.groupBy("category").agg(F.count("*").alias("n")).collect()}
    assert by_cat == {k: v for k, v in m.bad_by_category.items() if v}
    metrics = store.read(cfg.table_uri(ROUTING_METRICS)).agg(F.sum("events"), F.sum("bytes")).first()
    sums = routed.agg(F.count("*"), F.sum("size_bytes")).first()
    assert metrics is not None and sums is not None and tuple(metrics) == tuple(sums)


def test_route_conserves_records_and_keeps_locality(
    spark: SparkSession, store: TableStore, tmp_path: Path, landing: tuple[str, Manifest], where: str
) -> None:
    path, m = landing
    cfg = _cfg(tmp_path, path, where)
    reports = Router(spark, store, cfg, max_batch_files=6).run()
    assert len(reports) > 1
    assert sum(r.records for r in reports) == m.records  # records in = routed + quarantined
    assert all(r.records == r.routed + r.quarantined for r in reports)
    _assert_routed_exactly(spark, store, cfg, path, m)

    # Locality: every event sits on one of its own placement's shards, and the table is partitioned by shard.
    placements = store.read(cfg.table_uri("placements")).select("tenant_id", "window_start", "shards")
    routed = store.read(cfg.table_uri(ROUTED))
    misplaced = routed.join(placements, ["tenant_id", "window_start"], "left") \
        .where(F.col("shards").isNull() | ~F.expr("array_contains(shards, shard)")).count()
    assert misplaced == 0
    assert all(f.partition_values["shard"] is not None for f in store.files(cfg.table_uri(ROUTED)))
    # Copies of an event (retries, redeliveries) land on the same shard.
    spread = routed.groupBy("tenant_id", "event_id", "ts").agg(F.count_distinct("shard").alias("n"))
    assert spread.where("n > 1").count() == 0

    assert Router(spark, store, cfg).run() == []  # nothing new: a second run does nothing


def test_routing_twice_gives_the_same_shards(
    spark: SparkSession, store: TableStore, tmp_path: Path, landing: tuple[str, Manifest]
) -> None:
    from lakeshard.landing import read_landing

    path, _ = landing
    cfg = _cfg(tmp_path, path)
    with read_landing(spark, path, limits=cfg.landing_format) as batch:
        key = ["tenant_id", "event_id", "ts", "source_file", "line_number"]
        first = route(batch.events, ShardAllocator(store, cfg)).select(*key, "shard")
        again = route(batch.events, ShardAllocator(store, cfg)).select(*key, F.col("shard").alias("again"))
        joined = first.join(again, key)
        assert joined.count() == batch.events.count()
        assert joined.where("shard != again").count() == 0


@pytest.mark.parametrize("crash_at", [LANDING_BATCHES, ROUTED, QUARANTINE, ROUTING_METRICS])
def test_a_crash_at_any_commit_point_then_restart_routes_everything_once(
    spark: SparkSession, store: TableStore, tmp_path: Path, landing: tuple[str, Manifest], crash_at: str, where: str
) -> None:
    path, m = landing
    cfg = _cfg(tmp_path, path, where)
    calls = {"n": 0}

    def die_in_batch_two(table: str, batch: int) -> None:
        if table == crash_at and batch == 2:
            calls["n"] += 1
            raise Crash(f"killed before committing {table} of batch {batch}")

    with pytest.raises(Crash):
        Router(spark, store, cfg, max_batch_files=6, before_commit=die_in_batch_two).run()
    assert calls["n"] == 1
    # A new process: nothing of the crashed one survives but what it committed.
    reports = Router(spark, store, cfg, max_batch_files=6).run()
    assert reports[0].replayed == (crash_at != LANDING_BATCHES)
    _assert_routed_exactly(spark, store, cfg, path, m)


@pytest.mark.parametrize("race_at", [ROUTED, QUARANTINE])
def test_routers_racing_for_one_plan_each_report_only_what_they_committed(
    spark: SparkSession, store: TableStore, tmp_path: Path, landing: tuple[str, Manifest], where: str, race_at: str
) -> None:
    """A router that finds its batch's commits already made by another router (which took over its plan) counts
    them as already committed, not as its own: the reports of both add up to what the tables hold."""
    path, m = landing
    cfg = _cfg(tmp_path, path, where)
    other: list = []

    def the_other_takes_over(table: str, batch: int) -> None:
        if table == race_at and batch == 2 and not other:
            # Between this router's plan and its commit, another one finishes the planned batch.
            other.append(Router(spark, store, cfg, max_batch_files=6).route_once())

    mine = Router(spark, store, cfg, max_batch_files=6, before_commit=the_other_takes_over).run()
    theirs = other[0]
    assert theirs is not None and theirs.replayed and theirs.batch == 2
    again = next(r for r in mine if r.batch == 2)
    # Each of batch 2's records was committed by exactly one of the two, and the other one says so.
    assert again.already_committed > 0
    assert again.records + theirs.records == again.already_committed + theirs.already_committed
    reports = [*mine, theirs]
    assert sum(r.records for r in reports) == m.records  # every landing record counted exactly once
    assert all(r.records == r.routed + r.quarantined for r in reports)
    routed = store.read_table_arrow(cfg.table_uri(ROUTED), ["event_id"]).num_rows
    quarantined = store.read_table_arrow(cfg.table_uri(QUARANTINE), ["category"]).num_rows
    assert (sum(r.routed for r in reports), sum(r.quarantined for r in reports)) == (routed, quarantined)
    _assert_routed_exactly(spark, store, cfg, path, m)


def test_each_routed_commit_holds_few_files_per_shard_and_metrics_match_it(
    spark: SparkSession, store: TableStore, tmp_path: Path, landing: tuple[str, Manifest], where: str
) -> None:
    path, _ = landing
    cfg = _cfg(tmp_path, path, where)
    reports = Router(spark, store, cfg, max_batch_files=6).run()
    uri = cfg.table_uri(ROUTED)
    # The driver writes one file per shard; on Spark each of the (unshuffled) write tasks writes one per shard.
    limit = 1 if where == "driver" else write_tasks(spark)
    assert limit == (1 if where == "driver" else 2)  # the test session is local[2]
    for report in reports:
        version = report.versions[ROUTED]
        added = [c.file for e in store.log_entries(uri, start=version, end=version) for c in e.changes
                 if c.action == "add"]
        files_per_shard = Counter(f.partition_values["shard"] for f in added)
        assert added and max(files_per_shard.values()) <= limit, f"batch {report.batch}: {files_per_shard}"
        # The batch's metrics (computed from exactly these files) count every routed event of the batch.
        metrics = store.read(cfg.table_uri(ROUTING_METRICS)).where(F.col("batch") == report.batch) \
            .agg(F.sum("events").alias("events"), F.count_distinct("shard").alias("shards")).first()
        assert metrics is not None
        assert (metrics["events"], metrics["shards"]) == (report.routed, len(files_per_shard))


def test_placements_made_before_hash_versions_keep_routing_by_mmh3(
    spark: SparkSession, store: TableStore, tmp_path: Path, landing: tuple[str, Manifest], where: str
) -> None:
    """An upgraded lakehouse: its placements table predates the hash_version column, and re-sent copies of
    events routed by mmh3 then must land on the same shards now; windows placed after the upgrade use xxhash64."""
    path, m = landing
    cfg = _cfg(tmp_path, path, where)
    events, _ = parse_landing_arrow(list_landing_files(path), limits=cfg.landing_format)
    ws = cfg.routing.window_seconds
    pairs = sorted({(t, window_of(ts, ws)[0]) for t, ts in zip(events.column("tenant_id").to_pylist(),
                                                                events.column("ts").to_pylist(), strict=True)})
    old_windows = sorted({w for _, w in pairs})[: max(1, len({w for _, w in pairs}) // 2)]
    legacy = plan_placements([p for p in pairs if p[1] in old_windows], {}, ShardTopology(8),
                             default_shard_count=2, window_seconds=ws, now=datetime.now(UTC), hash_version=HASH_MMH3)
    uri = cfg.table_uri(PLACEMENTS)
    old_schema = StructType([f for f in PLACEMENT_SCHEMA.fields if f.name != "hash_version"])
    store.create(uri, old_schema)
    store.append_arrow(uri, placements_arrow(legacy, allocation=0).drop_columns(["hash_version"]))

    Router(spark, store, cfg, max_batch_files=6).run()

    assert "hash_version" in store.schema(uri).fieldNames()
    placements = {(p.tenant_id, p.window_start): p for p in placements_from_arrow(store.read_table_arrow(uri))}
    assert {k for k, p in placements.items() if p.hash_version == HASH_MMH3} == {(p.tenant_id, p.window_start)
                                                                                  for p in legacy}
    assert {p.hash_version for k, p in placements.items() if k[1] not in old_windows} == {HASH_XXHASH64}
    routed = store.read_table_arrow(cfg.table_uri(ROUTED), ["tenant_id", "event_id", "window_start", "shard"])
    legacy_rows = 0
    for r in routed.to_pylist():
        placement = placements[(r["tenant_id"], r["window_start"])]
        assert r["shard"] == placement.shard_for(r["event_id"]), r
        legacy_rows += placement.hash_version == HASH_MMH3
    assert 0 < legacy_rows < routed.num_rows
    _assert_routed_exactly(spark, store, cfg, path, m)


def test_the_driver_and_spark_paths_route_the_same_rows_to_the_same_shards(
    spark: SparkSession, store: TableStore, tmp_path: Path, landing: tuple[str, Manifest]
) -> None:
    path, _ = landing
    tables: dict[str, dict[str, set[tuple[object, ...]]]] = {}
    for where in PATHS:
        cfg = _cfg(tmp_path, path, where, lakehouse=where)
        Router(spark, store, cfg, max_batch_files=6).run()
        routed = store.read(cfg.table_uri(ROUTED)).select(
            "tenant_id", "event_id", "ts", "source_file", "line_number", "size_bytes", "window_start", "shard")
        quarantine = store.read(cfg.table_uri(QUARANTINE)).select("source_file", "line_number", "category", "reason")
        metrics = store.read(cfg.table_uri(ROUTING_METRICS)).drop("routed_at")
        tables[where] = {name: {tuple(r) for r in df.collect()}
                         for name, df in (("routed", routed), ("quarantine", quarantine), ("metrics", metrics))}
    for name in ("routed", "quarantine", "metrics"):
        assert tables["driver"][name] == tables["spark"][name], name
        assert tables["driver"][name], name


class _Session:
    """Just what write_tasks reads of a session: settings (``spark.conf``), no SparkContext (as over Spark Connect)."""

    def __init__(self, master: str | None, parallelism: int = 0) -> None:
        self.conf = self
        self._settings = {"spark.master": master,
                          "spark.default.parallelism": str(parallelism) if parallelism else None}

    def get(self, key: str, default: str | None = None) -> str | None:
        if self._settings["spark.master"] is None:
            raise RuntimeError(f"{key} is not available on this session")
        return self._settings.get(key) or default


@pytest.mark.parametrize(("master", "parallelism", "configured", "expected"), [
    ("local[2]", 0, 0, 2),        # a small machine: one unshuffled write task per core
    ("local", 0, 0, 1),
    ("local[16]", 0, 0, 0),       # more cores than AUTO_WRITE_TASKS_MAX: shuffle by shard, one file per shard
    ("spark://m:7077", 4, 0, 4),
    ("spark://m:7077", 64, 0, 0),
    (None, 0, 0, 0),              # the session does not say: shuffle
    ("sc://cluster", 0, 0, 0),     # no spark.default.parallelism set: shuffle
    ("local[16]", 0, 3, 3),       # configured wins
])
def test_write_tasks_skip_the_shuffle_only_on_few_cores(master: str | None, parallelism: int, configured: int,
                                                         expected: int) -> None:
    assert write_tasks(_Session(master, parallelism), configured) == expected  # type: ignore[arg-type]


def test_a_backlog_bigger_than_the_driver_limit_is_routed_in_driver_sized_batches_without_spark(
    spark: SparkSession, tmp_path: Path, landing: tuple[str, Manifest],
) -> None:
    from lakeshard.lake.embedded import EmbeddedTableStore

    path, manifest = landing
    total = sum(f.size_bytes for f in list_landing_files(path))
    limit = total // 3 + 1  # the zone is three driver batches' worth, or more
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": path,
                                 "routing": {"total_shards": 8, "arrow_max_bytes": limit}}, env={})

    def no_spark() -> SparkSession:
        raise AssertionError("a backlog within reach of the driver started Spark")

    reports = list(Router(None, EmbeddedTableStore(None, start_spark=no_spark), cfg).run())
    assert len(reports) >= 3 and all(r.bytes <= limit for r in reports)
    assert sum(r.routed for r in reports) == manifest.unique_events + manifest.duplicate_records


@pytest.mark.parametrize("other_does", ["routes the next batch", "plans the next batch and dies"])
def test_a_batch_parsed_ahead_is_dropped_when_another_router_planned_it_meanwhile(
    spark: SparkSession, tmp_path: Path, landing: tuple[str, Manifest], monkeypatch: pytest.MonkeyPatch,
    other_does: str,
) -> None:
    """A driver batch parses the next one on another thread while it commits; that parse (and the plan it
    parsed) is used only if no other router planned that batch in between."""
    import threading

    from lakeshard.lake.embedded import EmbeddedTableStore
    from lakeshard.routing import router as router_module

    path, m = landing
    cfg = _quarter_batches(path, tmp_path)
    threads: list[str] = []
    real_parse = router_module.parse_landing_arrow

    def parse(*args, **kwargs):  # type: ignore[no-untyped-def]
        threads.append(threading.current_thread().name)
        return real_parse(*args, **kwargs)

    monkeypatch.setattr(router_module, "parse_landing_arrow", parse)
    store = EmbeddedTableStore(None, start_spark=lambda: spark)

    def dies_before_routing(table: str, batch: int) -> None:
        if table == ROUTED:
            raise Crash(f"the other router died before committing batch {batch}")

    other = Router(None, store, cfg, before_commit=dies_before_routing if other_does.endswith("dies") else None)

    def meanwhile(report: object) -> None:
        if len(threads) == 2:  # batch 1 routed, batch 2 parsed ahead: the other router takes batch 2 first
            try:
                other.route_once()
            except Crash:
                pass

    reports = Router(None, store, cfg).run(on_batch=meanwhile)
    assert len(reports) >= 3
    assert any(name.startswith("landing-ahead") for name in threads), threads
    if other_does.endswith("dies"):
        assert reports[1].replayed and reports[1].batch == 2  # finished from the other router's plan
    else:
        assert [r.batch for r in reports][:2] == [1, 3]
    _assert_routed_exactly(spark, store, cfg, path, m)


def test_parsing_ahead_routes_the_same_rows_as_one_batch_at_a_time(
    spark: SparkSession, store: TableStore, tmp_path: Path, landing: tuple[str, Manifest],
    monkeypatch: pytest.MonkeyPatch,
) -> None:

    path, m = landing
    limit = sum(f.size_bytes for f in list_landing_files(path)) // 5 + 1
    cfgs = [load_config(overrides={"lakehouse": str(tmp_path / name), "landing": path,
                                   "routing": {"total_shards": 8, "default_shard_count": 2,
                                               "arrow_max_bytes": limit}}, env={}) for name in ("ahead", "one")]
    clock = lambda: datetime(2030, 1, 1, tzinfo=UTC)  # noqa: E731  (one clock: the parses validate alike)
    ahead = Router(None, store, cfgs[0], clock=clock).run()
    monkeypatch.setattr(Router, "_look_ahead", lambda self, batch: None)
    one = Router(None, store, cfgs[1], clock=clock).run()
    assert [(r.batch, r.files, r.routed, r.quarantined) for r in ahead] == [
        (r.batch, r.files, r.routed, r.quarantined) for r in one] and len(one) >= 4

    def rows(cfg: LakeshardConfig) -> list[tuple[object, ...]]:
        return sorted(map(tuple, store.read(cfg.table_uri(ROUTED)).drop("routed_at").collect()))

    assert rows(cfgs[0]) == rows(cfgs[1])
    _assert_routed_exactly(spark, store, cfgs[0], path, m)


def test_a_run_lists_the_landing_zone_once_per_batch_and_stops_when_a_batch_took_all_it_saw(
    spark: SparkSession, tmp_path: Path, landing: tuple[str, Manifest], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run lists the zone once per batch it plans (the look ahead of a batch is the next batch's look) and no
    more after a batch that took everything: the zone keeps every file routed until a lifecycle rule moves it, so
    each listing costs in proportion to the files it keeps."""
    from lakeshard.lake.embedded import EmbeddedTableStore
    from lakeshard.routing import router as router_module

    path, m = landing
    scans: list[str] = []
    real_scan = router_module.scan_landing

    def scan(where):  # type: ignore[no-untyped-def]
        scans.append(str(where))
        return real_scan(where)

    monkeypatch.setattr(router_module, "scan_landing", scan)
    store = EmbeddedTableStore(None, start_spark=lambda: spark)
    total = sum(f.size_bytes for f in list_landing_files(path))
    for name, limit in (("whole", 1 << 30), ("batches", total // 4 + 1)):
        cfg = load_config(overrides={"lakehouse": str(tmp_path / name), "landing": path, "routing": {
            "total_shards": 8, "default_shard_count": 2, "arrow_max_bytes": limit}}, env={})
        scans.clear()
        reports = Router(None, store, cfg).run()
        assert len(scans) == len(reports) and (len(reports) == 1) == (name == "whole"), (name, len(reports))
        _assert_routed_exactly(spark, store, cfg, path, m)
        scans.clear()
        assert Router(None, store, cfg).run() == [] and len(scans) == 1  # a run with nothing new looks once


def test_the_next_plan_is_taken_on_the_look_ahead_thread_beside_the_batch_in_hand(
    spark: SparkSession, tmp_path: Path, landing: tuple[str, Manifest], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only the first batch's look (listing, consumed ranges, checksums) runs on the router's own thread; each
    later plan is taken on the look-ahead thread, by a clock read on the router's thread after the batch's parse."""
    import threading

    from lakeshard.lake.embedded import EmbeddedTableStore
    from lakeshard.routing import router as router_module

    path, m = landing
    cfg = _quarter_batches(path, tmp_path)
    looks: list[str] = []
    real_scan = router_module.scan_landing

    def scan(where):  # type: ignore[no-untyped-def]
        looks.append(threading.current_thread().name)
        return real_scan(where)

    monkeypatch.setattr(router_module, "scan_landing", scan)
    store = EmbeddedTableStore(None, start_spark=lambda: spark)
    reports = Router(None, store, cfg).run()
    assert len(reports) >= 3 and len(looks) == len(reports)
    assert looks[0] == threading.main_thread().name
    assert all(name.startswith("landing-ahead") for name in looks[1:]), looks
    _assert_routed_exactly(spark, store, cfg, path, m)


def test_the_router_parses_the_look_aheads_files_left_once_its_batch_is_done(
    spark: SparkSession, tmp_path: Path, landing: tuple[str, Manifest], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A look-ahead parse still running when the batch in hand is committed is finished on both threads: the
    router's thread joins it (SharedJobs.join) and parses files the look-ahead thread has not begun, and the
    routed rows are exactly those of the zone whichever thread parsed which file."""
    import inspect
    import threading
    import time

    from lakeshard.lake.embedded import EmbeddedTableStore
    from lakeshard.landing.batches import ParseFiles

    path, m = landing
    cfg = _quarter_batches(path, tmp_path)
    joined: list[str] = []
    real_parse = ParseFiles.parse

    def parse(self, ranges):  # type: ignore[no-untyped-def]
        if threading.current_thread().name.startswith("landing-ahead"):
            time.sleep(0.3)  # a slow look ahead: the router is done with its batch before this parse is
        elif any(frame.function == "join" and "sharing" in frame.filename for frame in inspect.stack()):
            joined.append(threading.current_thread().name)
        return real_parse(self, ranges)

    monkeypatch.setattr(ParseFiles, "parse", parse)
    store = EmbeddedTableStore(None, start_spark=lambda: spark)
    reports = Router(None, store, cfg).run()
    assert len(reports) >= 3
    assert joined and set(joined) == {threading.main_thread().name}, joined
    _assert_routed_exactly(spark, store, cfg, path, m)


@pytest.mark.parametrize("failing_looks", [1, 2])
def test_a_look_ahead_that_fails_never_costs_the_batch_in_hand(
    spark: SparkSession, tmp_path: Path, landing: tuple[str, Manifest], monkeypatch: pytest.MonkeyPatch,
    failing_looks: int,
) -> None:
    """The zone becomes unreadable right after a batch's parse (the look ahead's listing fails): that batch still
    commits; the next batch's own look raises only if the fault lasts, and a later run routes everything once."""
    from lakeshard.lake.embedded import EmbeddedTableStore
    from lakeshard.landing.errors import LandingReadError
    from lakeshard.routing import router as router_module

    path, m = landing
    cfg = _quarter_batches(path, tmp_path)
    looks = {"n": 0}
    real_scan = router_module.scan_landing

    def flaky(where):  # type: ignore[no-untyped-def]
        looks["n"] += 1
        if 2 <= looks["n"] < 2 + failing_looks:  # the look ahead of batch 1 (and, if it lasts, batch 2's own)
            raise LandingReadError(f"landing zone {where} is unreachable")
        return real_scan(where)

    monkeypatch.setattr(router_module, "scan_landing", flaky)
    store = EmbeddedTableStore(None, start_spark=lambda: spark)
    if failing_looks == 1:
        reports = Router(None, store, cfg).run()
        assert len(reports) >= 3 and not any(r.replayed for r in reports)
    else:
        with pytest.raises(LandingReadError):
            Router(None, store, cfg).run()
        assert store.transaction_version(cfg.table_uri(ROUTED), "router") == 1  # batch 1 committed all the same
        assert not any(r.replayed for r in Router(None, store, cfg).run())
    _assert_routed_exactly(spark, store, cfg, path, m)


def _quarter_batches(path: str, tmp_path: Path) -> LakeshardConfig:
    """Return a config whose driver batches each take about a quarter of the zone at ``path``, so a router runs
    several batches and looks ahead."""
    limit = sum(f.size_bytes for f in list_landing_files(path)) // 4 + 1
    return load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": path,
                                  "routing": {"total_shards": 8, "default_shard_count": 2, "arrow_max_bytes": limit}},
                       env={})
