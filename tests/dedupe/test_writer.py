"""Shard writers on real Delta tables: exactly once through replays, crashes and two writers on one shard."""

from __future__ import annotations

import dataclasses
import shutil
from collections import Counter
from datetime import timedelta
from pathlib import Path
from urllib.parse import unquote

import pytest
from pyspark.sql import SparkSession

from lakeshard.config import LakeshardConfig, load_config
from lakeshard.dedupe.writer import EVENTS, ID_INDEX, ShardWriter
from lakeshard.lake import BYTES_ADDED, TableStore
from lakeshard.landing.reasons import WRITE_FAILED
from lakeshard.routing.router import Router
from lakeshard.synth import Manifest, SynthSpec, generate_landing
from lakeshard.synth.verify import check_against_truth
from lakeshard.tables import QUARANTINE, ROUTED

SPEC = SynthSpec(events=2000, tenants=10, hours=0.2, seed=5, retry_rate=0.08, redelivered_files=0.15,
                 bad_rate=0.01)
SHARDS = 4


# Steps at most this big run in the driver (pyarrow); "spark" sets a 1-byte bound, so every step goes to Spark.
ENGINES = {"arrow": {}, "spark": {"arrow_max_bytes": 1}}


class Crash(BaseException):
    """Stands in for the writer process dying at a commit point (not an error the writer may retry)."""


@pytest.fixture()
def engine() -> str:
    """The writer path a test runs on: the default (small steps in the driver); tests that must hold on both
    paths parametrize it with ``"spark"`` too."""
    return "arrow"


@pytest.fixture()
def routed(
    spark: SparkSession, store: TableStore, tmp_path: Path, engine: str
) -> tuple[LakeshardConfig, str, Manifest]:
    landing = tmp_path / "landing"
    manifest = generate_landing(landing, SPEC)
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": str(landing),
                                 "routing": {"total_shards": SHARDS, "default_shard_count": 2},
                                 "dedupe": ENGINES[engine]}, env={})
    Router(spark, store, cfg).run()
    return cfg, str(landing), manifest


def _other_engine(cfg: LakeshardConfig, engine: str) -> LakeshardConfig:
    """Return ``cfg`` with the other writer path: both must read and extend the same ID index."""
    other = "spark" if engine == "arrow" else "arrow"
    return dataclasses.replace(cfg, dedupe=dataclasses.replace(cfg.dedupe, **{"arrow_max_bytes": 64 << 20,
                                                                              **ENGINES[other]}))


def _exactly_once(spark: SparkSession, store: TableStore, cfg: LakeshardConfig, landing: str) -> None:
    check = check_against_truth(spark, store.read(cfg.table_uri(EVENTS)), landing)
    assert check.exactly_once, check


def _assert_files_sorted(store: TableStore, uri: str) -> None:
    """Every file of ``events`` is sorted by the table's sort schema (what compaction's merge relies on)."""
    import pyarrow.parquet as pq

    from lakeshard.compaction.sort_schema import EVENTS_SORT_SCHEMA, key_of

    files = store.files(uri)
    assert files
    for f in files:
        rows = pq.read_table(f"{uri}/{unquote(f.path)}", columns=list(EVENTS_SORT_SCHEMA.columns)).to_pylist()
        keys = [key_of([r[c] for c in EVENTS_SORT_SCHEMA.columns]) for r in rows]
        assert keys == sorted(keys), f.path


def _assert_id_files_sorted(store: TableStore, uri: str) -> None:
    """Every ID file holds one (shard, interval), sorted by the key hash (what a page-in's merge relies on)."""
    import pyarrow.parquet as pq

    files = store.files(uri)
    assert files
    for f in files:
        rows = pq.read_table(f"{uri}/{unquote(f.path)}", columns=["key_hi", "key_lo"]).to_pylist()
        keys = [(r["key_hi"], r["key_lo"]) for r in rows]
        assert keys == sorted(keys), f.path


def _three_hour_stream(spark: SparkSession, store: TableStore, tmp_path: Path) -> tuple[LakeshardConfig, Path]:
    """Route a stream over three hours, 2 shards, into ``routed``; writers then take one routed commit per step."""
    landing = tmp_path / "landing"
    generate_landing(landing, SynthSpec(events=1200, tenants=4, hours=3, seed=3, file_seconds=600, retry_rate=0.05,
                                        redelivered_files=0.1, late_rate=0.0, bad_rate=0.0))
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": str(landing),
                                 "routing": {"total_shards": 2, "default_shard_count": 2},
                                 "dedupe": {"max_batch_bytes": 1}}, env={})  # one routed commit per step
    Router(spark, store, cfg, max_batch_files=2).run()
    return cfg, landing


def _redeliver(landing: str, n: int, tag: str = "late-redelivery") -> int:
    """Copy the first ``n`` landing files under new names, as an at-least-once producer would; return lines."""
    files = sorted(p for p in Path(landing).rglob("part-*") if "_truth" not in p.parts)[:n]
    target = Path(landing) / "2026-01-01" / "23"
    target.mkdir(parents=True, exist_ok=True)
    for i, f in enumerate(files):
        shutil.copy(f, target / f"{tag}-{i}{''.join(f.suffixes)}")
    return len(files)


@pytest.mark.parametrize("engine", ["arrow", "spark"])
def test_writers_commit_each_event_once_and_count_every_row(
    spark: SparkSession, store: TableStore, routed: tuple[LakeshardConfig, str, Manifest], engine: str
) -> None:
    cfg, landing, m = routed
    reports = ShardWriter(spark, store, cfg, [0, 1]).run() + ShardWriter(spark, store, cfg, [2, 3]).run()
    assert {r.engine for r in reports} == {engine}
    _exactly_once(spark, store, cfg, landing)
    routed_rows = store.read(cfg.table_uri(ROUTED)).count()
    assert sum(r.rows_in for r in reports) == routed_rows == m.unique_events + m.duplicate_records
    assert all(r.rows_in == r.written + r.duplicates_in_batch + r.duplicates_in_index for r in reports)
    assert sum(r.written for r in reports) == m.unique_events
    assert ShardWriter(spark, store, cfg, [0, 1, 2, 3]).step() is None  # caught up: nothing to do
    _assert_files_sorted(store, cfg.table_uri(EVENTS))

    # The same files delivered again later: routed again, dropped by the ID index (empty cache: a new writer),
    # and by a writer on the other path: both hash keys alike, so they share the index.
    _redeliver(landing, 4)
    Router(spark, store, cfg).run()
    again = ShardWriter(spark, store, _other_engine(cfg, engine), list(range(SHARDS))).run()
    assert {r.engine for r in again} == {"spark" if engine == "arrow" else "arrow"}
    assert sum(r.written for r in again) == 0 and sum(r.duplicates_in_index for r in again) > 0
    _exactly_once(spark, store, cfg, landing)
    _assert_files_sorted(store, cfg.table_uri(EVENTS))


@pytest.mark.parametrize(("crash_at", "engine"), [(EVENTS, "arrow"), (ID_INDEX, "arrow"), (ID_INDEX, "spark")])
def test_a_crash_at_a_commit_point_then_restart_stays_exactly_once(
    spark: SparkSession, store: TableStore, routed: tuple[LakeshardConfig, str, Manifest], crash_at: str
) -> None:
    cfg, landing, _ = routed

    def die(table: str) -> None:
        if table == crash_at:
            raise Crash(f"killed before committing {table}")

    with pytest.raises(Crash):
        ShardWriter(spark, store, cfg, list(range(SHARDS)), before_commit=die).run()
    restarted = ShardWriter(spark, store, cfg, list(range(SHARDS)))
    reports = restarted.run()
    if crash_at == ID_INDEX:
        # The events were committed, their IDs were not: the restart rebuilt them from the events first.
        assert reports == [] and restarted.repair_ids() == 0
        assert store.read(cfg.table_uri(ID_INDEX)).count() == store.read(cfg.table_uri(EVENTS)).count()
        _assert_id_files_sorted(store, cfg.table_uri(ID_INDEX))  # rebuilt IDs laid out as a step writes them
    _exactly_once(spark, store, cfg, landing)
    _redeliver(landing, 4)  # and the (repaired) index still catches every re-sent event
    Router(spark, store, cfg).run()
    ShardWriter(spark, store, cfg, list(range(SHARDS))).run()
    _exactly_once(spark, store, cfg, landing)


@pytest.mark.parametrize(("engine", "stores"), [("arrow", "shared"), ("spark", "shared"), ("arrow", "own")])
def test_two_writers_on_one_shard_the_stale_one_loses_and_nothing_doubles(
    spark: SparkSession, store: TableStore, routed: tuple[LakeshardConfig, str, Manifest], stores: str
) -> None:
    """``own``: the winner has its own store, as a second writer process would, so the loser's cached table
    state (snapshot, app transaction versions, file listing) must not hide the winner's commits."""
    from lakeshard.lake.embedded import EmbeddedTableStore

    cfg, landing, _ = routed
    shards = list(range(SHARDS))
    winner = ShardWriter(spark, store if stores == "shared" else EmbeddedTableStore(spark), cfg, shards)

    def let_the_other_writer_commit_first(table: str) -> None:
        if table == EVENTS and winner.progress()[0] == 0:
            winner.run()

    stale = ShardWriter(spark, store, cfg, shards, before_commit=let_the_other_writer_commit_first)
    first = stale.step()
    assert first is not None and first.conflict and first.written == 0
    assert stale.conflicts == 1
    assert stale.step() is None  # reconciled: it re-read the committed progress and has nothing left
    _exactly_once(spark, store, cfg, landing)


def test_writer_processes_on_different_shards_commit_at_once_and_none_loses(
    spark: SparkSession, store: TableStore, tmp_path: Path
) -> None:
    """Four writers, one shard each, each with its own store (as four processes would), step through the same
    routed stream in threads; their first ``events`` commits are released together, so all but one commit on
    a stale version. Blind appends with different app transactions do not conflict: delta-rs puts each on
    top of the others, nobody loses or retries a batch, and every event lands once."""
    import threading

    from lakeshard.lake.embedded import EmbeddedTableStore

    landing = tmp_path / "landing"
    generate_landing(landing, SPEC)
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": str(landing),
                                 "routing": {"total_shards": SHARDS, "default_shard_count": 2},
                                 "dedupe": {"max_batch_bytes": 1}}, env={})  # one routed commit per step
    assert len(Router(spark, store, cfg, max_batch_files=4).run()) >= 3
    together = threading.Barrier(SHARDS, timeout=60)
    first_commit = [True] * SHARDS

    def released_together(shard: int):
        def hook(table: str) -> None:
            if table == EVENTS and first_commit[shard]:
                first_commit[shard] = False
                together.wait()
        return hook

    writers = [ShardWriter(None, EmbeddedTableStore(None), cfg, [s], before_commit=released_together(s))
               for s in range(SHARDS)]
    reports: list[list] = [[] for _ in range(SHARDS)]
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            reports[i] = writers[i].run()
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(SHARDS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    assert all(reports) and not any(r.conflict for rs in reports for r in rs)
    assert sum(w.conflicts for w in writers) == 0 and sum(w.failures for w in writers) == 0
    commits = [c for c in store.history(cfg.table_uri(EVENTS)) if "shards" in c.custom_metadata]
    # Every step's commit landed, none twice, each under its own writer's shard. (Not "the first four versions
    # are the four shards": the barrier holds only each writer's first commit, so a released writer may land its
    # second step before a slower writer's first.)
    by_shard = Counter(str(c.custom_metadata["shards"]) for c in commits)
    assert by_shard == {f"[{s}]": len(reports[s]) for s in range(SHARDS)}
    _exactly_once(spark, store, cfg, str(landing))


def _hold_back(landing: str, keep: int) -> tuple[Path, list[Path]]:
    """Move all but the first ``keep`` landing files aside (they arrive later); return where they went."""
    files = sorted(p for p in Path(landing).rglob("part-*") if "_truth" not in p.parts)
    aside = Path(landing).parent / "held-back"
    moved = []
    for f in files[keep:]:
        target = aside / f.relative_to(landing)
        target.parent.mkdir(parents=True, exist_ok=True)
        f.rename(target)
        moved.append(target)
    return aside, moved


def _release(landing: str, aside: Path, moved: list[Path]) -> None:
    for f in moved:
        f.rename(Path(landing) / f.relative_to(aside))


def test_a_writer_whose_shards_another_writer_advanced_pages_its_ids_in_again(
    spark: SparkSession, store: TableStore, tmp_path: Path
) -> None:
    """The ping-pong of Husky's reconciliation: A, then B on the same shards, then A again with a warm cache.

    A's cache knows only what A committed; B's events arrive at A as re-sent duplicates. A must notice that the
    shards' progress moved and page the intervals in again, or it would write those events a second time.
    """
    landing = tmp_path / "landing"
    generate_landing(landing, SPEC)
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": str(landing),
                                 "routing": {"total_shards": SHARDS, "default_shard_count": SHARDS}}, env={})
    shards = list(range(SHARDS))
    aside, moved = _hold_back(str(landing), keep=3)
    Router(spark, store, cfg).run()
    a = ShardWriter(spark, store, cfg, shards)
    first = a.run()
    assert sum(r.intervals_paged_in for r in first) > 0 and a.cache.stats().intervals > 0
    _release(str(landing), aside, moved)
    Router(spark, store, cfg).run()
    ShardWriter(spark, store, cfg, shards).run()  # writer B commits the rest
    _redeliver(str(landing), 40)  # re-sent copies of B's events (and A's)
    Router(spark, store, cfg).run()
    again = a.run()
    assert sum(r.written for r in again) == 0 and sum(r.duplicates_in_index for r in again) > 0
    assert sum(r.intervals_paged_in for r in again) > 0  # paged in again, not answered from the stale cache
    _exactly_once(spark, store, cfg, str(landing))


def test_a_long_running_writer_answers_from_its_cache_and_a_crash_between_commits_does_not_fool_it(
    spark: SparkSession, store: TableStore, routed: tuple[LakeshardConfig, str, Manifest]
) -> None:
    cfg, landing, _ = routed
    crashed = [False]

    def die_once_between_commits(table: str) -> None:
        if table == ID_INDEX and not crashed[0]:
            crashed[0] = True
            raise Crash("killed between the events and the event_ids commits")

    writer = ShardWriter(spark, store, cfg, list(range(SHARDS)), before_commit=die_once_between_commits)
    with pytest.raises(Crash):
        writer.run()
    writer.run()  # the same object goes on: it repairs the index and must not trust its cache for those shards
    for attempt in ("first", "second"):
        _redeliver(landing, 6, tag=f"{attempt}-redelivery")
        Router(spark, store, cfg).run()
        again = writer.run()
        assert again and sum(r.written for r in again) == 0
    # The repair emptied the cache; the first redelivery paged the hours in, the second found them in memory.
    assert sum(r.intervals_paged_in for r in again) == 0 and sum(r.interval_hits for r in again) > 0
    _exactly_once(spark, store, cfg, landing)


def test_ids_older_than_the_retention_are_not_checked_and_expire_from_the_index(
    spark: SparkSession, store: TableStore, tmp_path: Path
) -> None:
    landing = tmp_path / "landing"
    generate_landing(landing, SynthSpec(events=1500, tenants=5, hours=0.2, seed=11, late_rate=0.2,
                                        late_max_hours=5.0, retry_rate=0.0, redelivered_files=0.0, bad_rate=0.0))
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": str(landing),
                                 "routing": {"total_shards": 2, "default_shard_count": 2},
                                 "dedupe": {"id_retention_hours": 2}}, env={})
    Router(spark, store, cfg).run()
    writer = ShardWriter(spark, store, cfg, [0, 1])
    reports = writer.run()
    events = store.read(cfg.table_uri(EVENTS))
    newest = events.agg({"hour": "max"}).first()[0]
    old = events.where(f"hour < date_format(to_timestamp('{newest}', \"yyyy-MM-dd'T'HH\") - INTERVAL 2 HOURS, "
                       "\"yyyy-MM-dd'T'HH\")").count()
    assert old > 0 and sum(r.unchecked_expired for r in reports) <= old  # late events older than 2 h: unchecked

    removed = writer.expire_ids()
    assert removed > 0
    left = store.read(cfg.table_uri(ID_INDEX)).groupBy("shard").agg({"interval": "min"}).collect()
    cutoffs = {s: writer.index.cutoff_hour(s) for s in (0, 1)}
    assert all(r[1] >= cutoffs[r[0]] for r in left)
    assert writer.expire_ids() == 0  # idempotent
    _redeliver(str(landing), 100)  # every file again: recent duplicates are still caught
    Router(spark, store, cfg).run()
    ShardWriter(spark, store, cfg, [0, 1]).run()
    recent = store.read(cfg.table_uri(EVENTS)).where(f"hour >= '{min(cutoffs.values())}'")
    assert recent.count() == recent.dropDuplicates(["tenant_id", "event_id", "ts"]).count()


def _routed_in_commits(spark: SparkSession, store: TableStore, tmp_path: Path
                       ) -> tuple[dict[str, object], LakeshardConfig, Path, int]:
    """Route SPEC in several commits (4 files each); return the config overrides, the config, the landing zone
    and the number of routed commits."""
    landing = tmp_path / "landing"
    generate_landing(landing, SPEC)
    overrides: dict[str, object] = {"lakehouse": str(tmp_path / "lh"), "landing": str(landing),
                                    "routing": {"total_shards": SHARDS, "default_shard_count": 2}}
    cfg = load_config(overrides=overrides, env={})
    routed = Router(spark, store, cfg, max_batch_files=4).run()
    assert len(routed) >= 3
    return overrides, cfg, landing, len(routed)


def test_the_memory_gate_takes_routed_commits_in_slices_of_at_most_max_batch_bytes(
    spark: SparkSession, store: TableStore, tmp_path: Path
) -> None:
    overrides, cfg, landing, routed = _routed_in_commits(spark, store, tmp_path)
    one_commit = max(int(c.custom_metadata.get(BYTES_ADDED, 0)) for c in store.history(cfg.table_uri(ROUTED)))
    gated = load_config(overrides={**overrides, "dedupe": {"max_batch_bytes": one_commit}}, env={})
    reports = ShardWriter(spark, store, gated, list(range(SHARDS))).run()
    versions = [r.routed_version for r in reports]
    assert versions == sorted(versions) and len(versions) >= routed // 2 + 1  # sliced, in order
    assert versions[-1] == store.version(cfg.table_uri(ROUTED))
    _exactly_once(spark, store, cfg, str(landing))


def test_a_backlog_bigger_than_the_driver_bound_is_taken_in_driver_sized_steps(
    spark: SparkSession, store: TableStore, tmp_path: Path
) -> None:
    """A writer that fell behind by more than ``dedupe.arrow_max_bytes`` takes its backlog in steps the driver
    runs (a step past the bound would be a Spark job, whose cost here dwarfs a few more commits)."""
    overrides, cfg, landing, _ = _routed_in_commits(spark, store, tmp_path)
    sizes = [int(c.custom_metadata.get(BYTES_ADDED, 0)) for c in store.history(cfg.table_uri(ROUTED))]
    bound = 2 * max(sizes)  # two routed commits fit a driver step, the whole backlog does not
    assert sum(sizes) > bound
    driver = load_config(overrides={**overrides, "dedupe": {"arrow_max_bytes": bound}}, env={})
    reports = ShardWriter(spark, store, driver, list(range(SHARDS))).run()
    assert {r.engine for r in reports} == {"arrow"}, [(r.routed_version, r.engine) for r in reports]
    assert len(reports) >= 2 and reports[-1].routed_version == store.version(cfg.table_uri(ROUTED))
    _exactly_once(spark, store, cfg, str(landing))


def test_a_batch_whose_rows_cannot_be_written_is_dead_lettered_once_and_the_writer_moves_on(
    spark: SparkSession, store: TableStore, routed: tuple[LakeshardConfig, str, Manifest]
) -> None:
    """Only a record-level failure (rows proven unwritable) dead-letters; infrastructure faults never do
    (tests/dedupe/test_faults.py)."""
    from lakeshard.dedupe.faults import RecordLevelFailure

    cfg, _, _ = routed
    cfg = load_config(overrides={"lakehouse": cfg.lakehouse, "routing": {"total_shards": SHARDS}}, env={})
    attempts, crashed = [], [False]

    def unwritable_rows_then_a_crash(table: str) -> None:
        if table == EVENTS:
            attempts.append(table)
            raise RecordLevelFailure("RecordLevelFailure: rows too odd to write")
        if table == "dead-letter-progress" and not crashed[0]:
            crashed[0] = True
            raise Crash("killed between the dead-letter commit and the progress commit")

    with pytest.raises(Crash):
        ShardWriter(spark, store, cfg, [0, 1], before_commit=unwritable_rows_then_a_crash).step()
    assert len(attempts) == 1  # a record-level failure is not retried
    restarted = ShardWriter(spark, store, cfg, [0, 1])
    assert restarted.step() is None  # it finished the dead-lettering: the batch is not written after all
    assert restarted.progress() == {0: store.version(cfg.table_uri(ROUTED)), 1: store.version(cfg.table_uri(ROUTED))}

    routed_rows = store.read(cfg.table_uri(ROUTED)).where("shard IN (0, 1)").count()
    letters = store.read(cfg.table_uri(QUARANTINE)).where(f"category = '{WRITE_FAILED}'")
    assert letters.count() == routed_rows > 0  # each row once, although the first process died midway
    assert letters.where("reason LIKE '%rows too odd to write%' AND raw LIKE '{%event_id%'").count() == routed_rows
    # Each letter names the landing line it came from, as the routed rows do.
    lines = store.read(cfg.table_uri(ROUTED)).where("shard IN (0, 1)").select("source_file", "line_number")
    assert lines.where("source_file IS NULL OR line_number IS NULL").count() == 0
    assert letters.select("source_file", "line_number").exceptAll(lines).count() == 0
    assert lines.exceptAll(letters.select("source_file", "line_number")).count() == 0
    assert store.read(cfg.table_uri(EVENTS)).where("shard IN (0, 1)").count() == 0
    others = ShardWriter(spark, store, cfg, [2, 3]).run()  # the other shards are not held back
    assert sum(r.written for r in others) > 0


@pytest.mark.parametrize("engine", ["arrow", "spark"])
def test_late_events_for_closed_buckets_land_in_the_open_bucket_once_and_closed_buckets_never_change(
    spark: SparkSession, store: TableStore, routed: tuple[LakeshardConfig, str, Manifest]
) -> None:
    """The real writer, wired to the completionist: after every bucket closed, re-sent copies are dropped and
    new events whose hour is closed go, flagged ``late``, to their tenant's open bucket."""
    import json
    from datetime import UTC, datetime, timedelta

    from pyspark.sql import functions as F

    from lakeshard.buckets import Completionist
    from lakeshard.buckets.planner import hour_of

    cfg, landing, _ = routed
    later = datetime.now(UTC) + timedelta(hours=3)  # everything written so far is quiet by then
    writer = ShardWriter(spark, store, cfg, list(range(SHARDS)), clock=lambda: later)
    writer.run()
    closed = Completionist(spark, store, cfg, clock=lambda: later).run(apply=True)
    assert closed.closed and not Completionist(spark, store, cfg).verify()

    events = store.read(cfg.table_uri(EVENTS))
    first = events.orderBy("tenant_id", "ts").first()
    assert first is not None
    tenant, own_hour = first["tenant_id"], first["hour"]
    start = datetime.strptime(own_hour, "%Y-%m-%dT%H").replace(tzinfo=UTC)
    lines = [{"tenant_id": tenant, "event_id": f"late-{i}", "ts": (start + timedelta(minutes=i)).isoformat()}
             for i in range(5)]
    resent_ts = first["ts"].replace(tzinfo=UTC).isoformat()  # Spark hands back naive UTC datetimes
    lines.append({"tenant_id": tenant, "event_id": first["event_id"], "ts": resent_ts})  # a re-send
    target = Path(landing) / "2026-01-02" / "00"
    target.mkdir(parents=True)
    (target / "late-arrivals.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines + lines[:2]))
    Router(spark, store, cfg).run()
    reports = writer.run()
    assert sum(r.written for r in reports) == 5 and sum(r.duplicates_in_index for r in reports) == 1

    late = store.read(cfg.table_uri(EVENTS)).where(F.col("event_id").startswith("late-")).collect()
    assert len(late) == 5 and all(r["late"] and r["hour"] == hour_of(later) != own_hour for r in late)
    assert not Completionist(spark, store, cfg).verify()  # every closed bucket still holds what it closed with
    everything = store.read(cfg.table_uri(EVENTS))
    assert everything.count() == everything.dropDuplicates(["tenant_id", "event_id", "ts"]).count()


def test_sealed_intervals_id_files_merge_into_one_sorted_file_and_the_index_stays_exact(
    spark: SparkSession, store: TableStore, tmp_path: Path
) -> None:
    """A stream over three hours, one routed commit per step: each step appends an ID file per interval, and
    the hours the stream moved past are merged into one file sorted by the key hash — with a crash right
    before one merge's commit. The index keeps every ID exactly once, and re-sent events are still caught."""
    import pyarrow.parquet as pq

    from lakeshard.dedupe.index import interval_of as _interval_of

    cfg, landing = _three_hour_stream(spark, store, tmp_path)
    crashed = [False]

    def die_before_the_first_merge(table: str) -> None:
        if table == "id-compaction" and not crashed[0]:
            crashed[0] = True
            raise Crash("killed before an ID merge commit")

    with pytest.raises(Crash):
        ShardWriter(spark, store, cfg, [0, 1], before_commit=die_before_the_first_merge).run()
    writer = ShardWriter(spark, store, cfg, [0, 1])
    reports = writer.run()
    assert len(reports) > 3 and sum(r.id_files_merged for r in reports) > 0
    # The restarted writer's steps merge what the crash interrupted too (sealed is read from the listing):
    # a full pass has nothing left to do.
    assert writer.compact_ids() == 0

    ids_uri, events_uri = cfg.table_uri(ID_INDEX), cfg.table_uri(EVENTS)
    ids = store.read(ids_uri)
    assert ids.count() == ids.dropDuplicates(["key_hi", "key_lo"]).count() == store.read(events_uri).count()
    files = store.files(ids_uri)
    newest = {s: max(_interval_of(f)[1] for f in files if _interval_of(f)[0] == s) for s in (0, 1)}
    sealed = [f for f in files if _interval_of(f)[1] < newest[_interval_of(f)[0]]]
    assert sealed and len(sealed) == len({_interval_of(f) for f in sealed})  # one file per sealed interval
    for f in sealed:
        rows = pq.read_table(f"{ids_uri}/{unquote(f.path)}", columns=["key_hi", "key_lo"])
        pairs = list(zip(rows.column("key_hi").to_pylist(), rows.column("key_lo").to_pylist(), strict=True))
        assert pairs == sorted(pairs)

    _redeliver(str(landing), 6)  # re-sent copies of merged hours: a cold cache pages the merged files in
    Router(spark, store, cfg).run()
    again = ShardWriter(spark, store, cfg, [0, 1]).run()
    assert sum(r.written for r in again) == 0 and sum(r.duplicates_in_index for r in again) > 0
    _exactly_once(spark, store, cfg, str(landing))


def test_consumed_routed_files_expire_and_unconsumed_ones_stay_through_a_crash_and_a_replay(
    spark: SparkSession, store: TableStore, tmp_path: Path
) -> None:
    """Writers remove from ``routed`` the files their shards consumed (every 3 consumed files here): a shard
    no writer took yet keeps every routed file, a crash right before an expiry commit loses nothing, and
    events re-sent after the expiry are still caught by the ID index."""
    cfg, landing = _three_hour_stream(spark, store, tmp_path)
    cfg = dataclasses.replace(cfg, dedupe=dataclasses.replace(cfg.dedupe, routed_expire_files=3))
    routed_uri = cfg.table_uri(ROUTED)

    def live(shard: int) -> set[str]:
        return {f.path for f in store.files(routed_uri) if f.partition_values["shard"] == str(shard)}

    shard1_before, rows_before = live(1), store.read(routed_uri).where("shard = 1").count()
    assert len(live(0)) > 3 and shard1_before
    crashed = [False]

    def die_before_the_first_expiry(table: str) -> None:
        if table == "routed-expiry" and not crashed[0]:
            crashed[0] = True
            raise Crash("killed before a routed expiry commit")

    with pytest.raises(Crash):
        ShardWriter(spark, store, cfg, [0], before_commit=die_before_the_first_expiry).run()
    writer = ShardWriter(spark, store, cfg, [0])
    reports = writer.run()
    assert sum(r.routed_files_expired for r in reports) > 0
    writer.expire_routed()  # whatever the last steps consumed since the last expiry
    assert live(0) == set()  # shard 0 consumed everything routed to it
    assert live(1) == shard1_before and store.read(routed_uri).where("shard = 1").count() == rows_before
    assert ShardWriter(spark, store, cfg, [0]).expire_routed() == 0  # nothing left to expire

    ShardWriter(spark, store, cfg, [1]).run()  # the other shard reads its files, untouched
    _exactly_once(spark, store, cfg, str(landing))

    _redeliver(str(landing), 6)  # re-sent copies of expired routed rows
    Router(spark, store, cfg).run()
    again = ShardWriter(spark, store, cfg, [0, 1]).run()
    assert sum(r.written for r in again) == 0 and sum(r.duplicates_in_index for r in again) > 0
    _exactly_once(spark, store, cfg, str(landing))


@pytest.mark.parametrize("released_by", ["size", "latency"])
def test_a_following_writer_coalesces_routed_commits_until_size_or_latency(
    spark: SparkSession, store: TableStore, tmp_path: Path, released_by: str
) -> None:
    landing = tmp_path / "landing"
    generate_landing(landing, SPEC)
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": str(landing),
                                 "routing": {"total_shards": SHARDS, "default_shard_count": 2}}, env={})
    Router(spark, store, cfg, max_batch_files=3).run()
    routed_uri = cfg.table_uri(ROUTED)
    commits = [c for c in store.history(routed_uri) if BYTES_ADDED in c.custom_metadata]
    pending = sum(int(c.custom_metadata[BYTES_ADDED]) for c in commits)
    assert len(commits) >= 3  # several routed commits wait to be coalesced
    now = [max(c.timestamp for c in commits)]
    wait = 600.0
    cfg = dataclasses.replace(cfg, dedupe=dataclasses.replace(cfg.dedupe, commit_min_bytes=pending + 1,
                                                              commit_max_wait_seconds=wait))
    writer = ShardWriter(spark, store, cfg, range(SHARDS), clock=lambda: now[0])
    assert writer.step(flush=False) is None and writer.deferred == 1
    assert writer.progress() == dict.fromkeys(range(SHARDS), 0)  # nothing committed while waiting
    if released_by == "size":
        writer.commit_min_bytes = pending
    else:
        now[0] = min(c.timestamp for c in commits) + timedelta(seconds=wait)
    report = writer.step(flush=False)
    assert report is not None and report.routed_version == store.version(routed_uri)  # all of them, one step
    writer_commits = [c for c in store.history(cfg.table_uri(EVENTS)) if c.operation != "CREATE TABLE"]
    assert len(writer_commits) == 1
    assert writer.run(flush=False) == []
    _exactly_once(spark, store, cfg, str(landing))


def test_a_run_that_stops_when_done_never_waits_to_coalesce(
    spark: SparkSession, store: TableStore, routed: tuple[LakeshardConfig, str, Manifest]
) -> None:
    cfg, landing, _ = routed
    cfg = dataclasses.replace(cfg, dedupe=dataclasses.replace(cfg.dedupe, commit_min_bytes=1 << 40,
                                                              commit_max_wait_seconds=3600))
    assert ShardWriter(spark, store, cfg, range(SHARDS)).run()  # flush=True: batch mode takes what is there
    _exactly_once(spark, store, cfg, landing)


def test_compacting_the_hours_a_stream_moved_past_between_writer_steps_keeps_every_event_once(
    spark: SparkSession, store: TableStore, tmp_path: Path
) -> None:
    """What the dedupe bench's lakeshard stream does to keep its commits cheap: after each writer step, the
    ``events`` buckets of the hours the stream moved past are compacted with the ``compact`` flow's function.
    Each swap keeps the rows as they were; the writer's next step commits on top of it without a conflict; at
    the end ``events`` equals the ground truth, each compacted bucket is one file, and a re-sent copy of a
    compacted hour's event is still dropped."""
    from lakeshard.compaction import compact_events

    cfg, landing = _three_hour_stream(spark, store, tmp_path)
    events_uri = cfg.table_uri(EVENTS)
    writer = ShardWriter(spark, store, cfg, [0, 1])
    compacted: set[tuple[str, str]] = set()
    files_merged = steps = 0
    while (report := writer.step()) is not None:
        steps += 1
        assert not report.conflict
        files = store.files(events_uri)
        newest = max(str(f.partition_values["hour"]) for f in files)
        buckets = sorted({(str(f.partition_values["tenant_id"]), str(f.partition_values["hour"])) for f in files
                          if str(f.partition_values["hour"]) < newest} - compacted)
        if not buckets:
            continue
        rows_before = store.read(events_uri).count()
        result = compact_events(store, cfg, sealed=buckets, buckets=buckets)
        assert result.conflicts == 0 and not result.gave_up
        assert store.read(events_uri).count() == rows_before  # a swap moves rows, never adds or drops one
        files_merged += sum(r.files_removed for r in result.rounds)
        compacted.update(buckets)
    assert steps > 3 and compacted and files_merged > len(compacted)  # several hours, merged as the stream went
    files = store.files(events_uri)
    for bucket in compacted:
        assert len([f for f in files if (f.partition_values["tenant_id"], f.partition_values["hour"]) == bucket]) == 1
    _exactly_once(spark, store, cfg, str(landing))

    _redeliver(str(landing), 6)  # re-sent copies of compacted hours' events: dropped by the ID index
    Router(spark, store, cfg).run()
    again = ShardWriter(spark, store, cfg, [0, 1]).run()
    assert sum(r.written for r in again) == 0 and sum(r.duplicates_in_index for r in again) > 0
    _exactly_once(spark, store, cfg, str(landing))


# The columns of an ID index made with the exact keys beside their hash, spelled out so the test cannot follow a
# change of the constant it checks.
WIDE_ID_COLUMNS = ("shard", "interval", "tenant_id", "event_id", "ts", "routed_version", "key_hi", "key_lo")


@pytest.mark.parametrize("engine", ["arrow", "spark"])
def test_the_id_index_holds_only_the_key_hash_by_shard_and_hour_and_still_catches_every_resent_event(
    spark: SparkSession, store: TableStore, routed: tuple[LakeshardConfig, str, Manifest], engine: str
) -> None:
    import pyarrow.parquet as pq

    cfg, landing, _ = routed

    def die(table: str) -> None:
        if table == ID_INDEX:
            raise Crash("killed between the events and the event_ids commits")

    with pytest.raises(Crash):  # the IDs of the first step are rebuilt from events: the repair writes slim rows too
        ShardWriter(spark, store, cfg, list(range(SHARDS)), before_commit=die).run()
    ShardWriter(spark, store, cfg, list(range(SHARDS))).run()
    ids_uri = cfg.table_uri(ID_INDEX)
    assert store.schema(ids_uri).fieldNames() == ["shard", "interval", "routed_version", "key_hi", "key_lo"]
    files = store.files(ids_uri)
    assert files and all(pq.read_schema(f"{ids_uri}/{unquote(f.path)}").names == ["routed_version", "key_hi",
                                                                                    "key_lo"] for f in files)
    assert store.read(ids_uri).count() == store.read(cfg.table_uri(EVENTS)).count()
    _redeliver(landing, 4)
    Router(spark, store, cfg).run()
    again = ShardWriter(spark, store, _other_engine(cfg, engine), list(range(SHARDS))).run()
    assert sum(r.written for r in again) == 0 and sum(r.duplicates_in_index for r in again) > 0
    _exactly_once(spark, store, cfg, landing)


@pytest.mark.parametrize("engine", ["arrow", "spark"])
def test_an_id_index_made_with_the_exact_keys_keeps_them_and_stays_exact(
    spark: SparkSession, store: TableStore, routed: tuple[LakeshardConfig, str, Manifest], engine: str
) -> None:
    from lakeshard.tables import ID_INDEX_KEYED_SCHEMA, ID_INDEX_PARTITIONING, ID_INDEX_PROPERTIES

    cfg, landing, _ = routed
    ids_uri = cfg.table_uri(ID_INDEX)
    store.create(ids_uri, ID_INDEX_KEYED_SCHEMA, partition_by=ID_INDEX_PARTITIONING, properties=ID_INDEX_PROPERTIES)

    def die(table: str) -> None:
        if table == ID_INDEX:
            raise Crash("killed between the events and the event_ids commits")

    with pytest.raises(Crash):
        ShardWriter(spark, store, cfg, list(range(SHARDS)), before_commit=die).run()
    ShardWriter(spark, store, cfg, list(range(SHARDS))).run()
    assert tuple(store.schema(ids_uri).fieldNames()) == WIDE_ID_COLUMNS
    ids, events = store.read(ids_uri), store.read(cfg.table_uri(EVENTS))
    assert ids.select("tenant_id", "event_id", "ts").exceptAll(events.select("tenant_id", "event_id", "ts")).count() \
        == 0 and ids.count() == events.count()
    _redeliver(landing, 4)
    Router(spark, store, cfg).run()
    again = ShardWriter(spark, store, _other_engine(cfg, engine), list(range(SHARDS))).run()
    assert sum(r.written for r in again) == 0 and sum(r.duplicates_in_index for r in again) > 0
    _exactly_once(spark, store, cfg, landing)
