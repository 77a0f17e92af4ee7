"""The closing integrity check and its versioned checksum: cheap (no Spark job), order-independent, and every
closed bucket verified by the kind it recorded."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    BooleanType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from lakeshard.buckets import Completionist, check_buckets
from lakeshard.buckets.planner import hour_of
from lakeshard.config import LakeshardConfig, load_config
from lakeshard.lake import TableStore

QUIET, GRACE = timedelta(minutes=10), timedelta(minutes=15)
EVENTS = StructType([
    StructField("tenant_id", StringType(), False),
    StructField("event_id", StringType(), False),
    StructField("ts", TimestampType(), False),
    StructField("message", StringType(), True),
    StructField("attributes", MapType(StringType(), StringType()), True),
    StructField("size_bytes", IntegerType(), True),
    StructField("hour", StringType(), False),
    StructField("late", BooleanType(), True),
])


@pytest.fixture()
def lakehouse(store: TableStore, tmp_path: Path) -> LakeshardConfig:
    """Return a lakehouse with an empty events table and no landing backlog."""
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": str(tmp_path / "no-landing")},
                      env={})
    store.create(cfg.table_uri("events"), EVENTS, partition_by=["tenant_id", "hour"])
    return cfg


def _rows(spark: SparkSession, tenant: str, hour: str, prefix: str, n: int) -> DataFrame:
    start = datetime.strptime(hour, "%Y-%m-%dT%H").replace(tzinfo=UTC)
    rows = [(tenant, f"{prefix}-{i}", start + timedelta(minutes=7 * i), None if i % 3 else f"m{i}",
             {"k": f"v{i}", "z": None} if i % 2 else None, 100 + i, hour, False) for i in range(n)]
    return spark.createDataFrame(rows, EVENTS)


def _bucket_files(store: TableStore, cfg: LakeshardConfig) -> dict[tuple[str, str], list]:  # type: ignore[type-arg]
    out: dict[tuple[str, str], list] = {}  # type: ignore[type-arg]
    for f in store.files(cfg.table_uri("events")):
        out.setdefault((f.partition_values["tenant_id"], f.partition_values["hour"]), []).append(f)
    return out


def test_the_closing_check_runs_no_spark_job_and_finds_duplicate_keys(
    spark: SparkSession, store: TableStore, lakehouse: LakeshardConfig
) -> None:
    cfg, hour = lakehouse, hour_of(datetime.now(UTC) - timedelta(hours=3))
    uri = cfg.table_uri("events")
    store.append(uri, _rows(spark, "acme", hour, "a", 7).coalesce(1))
    store.append(uri, _rows(spark, "zeta", hour, "z", 4).coalesce(1))
    store.append(uri, _rows(spark, "zeta", hour, "z", 1).coalesce(1))  # z-0 twice
    group = "lakeshard-test-closing-check"
    spark.sparkContext.setJobGroup(group, "the closing check")
    try:
        checks = check_buckets(store, uri, _bucket_files(store, cfg))
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    assert list(spark.sparkContext.statusTracker().getJobIdsForGroup(group)) == []
    acme, zeta = checks[("acme", hour)], checks[("zeta", hour)]
    assert (acme.rows, acme.distinct_keys, acme.problem) == (7, 7, "")
    assert (zeta.rows, zeta.distinct_keys, zeta.problem) == (5, 4, "1 duplicate event keys")
    assert acme.checksum.startswith("rowhash2:")


def test_buckets_closed_with_either_checksum_kind_verify_and_a_changed_bucket_of_each_kind_is_caught(
    spark: SparkSession, store: TableStore, lakehouse: LakeshardConfig
) -> None:
    cfg, uri = lakehouse, lakehouse.table_uri("events")
    now = datetime.now(UTC) + QUIET + timedelta(minutes=1)
    old_hour, new_hour = (hour_of(datetime.now(UTC) - timedelta(hours=n)) for n in (4, 3))
    store.append(uri, _rows(spark, "acme", old_hour, "a", 6).coalesce(1))
    store.append(uri, _rows(spark, "zeta", old_hour, "z", 3).coalesce(1))
    closed_old = Completionist(spark, store, cfg, quiet=QUIET, grace=GRACE, clock=lambda: now,
                               checksum="rowjson").run()
    store.append(uri, _rows(spark, "acme", new_hour, "b", 5).coalesce(1))
    closed_new = Completionist(spark, store, cfg, quiet=QUIET, grace=GRACE, clock=lambda: now).run()
    assert {(s.tenant_id, s.hour) for s in closed_old.closed} == {("acme", old_hour), ("zeta", old_hour)}
    assert {(s.tenant_id, s.hour) for s in closed_new.closed} == {("acme", new_hour)}

    c = Completionist(spark, store, cfg, quiet=QUIET, grace=GRACE, clock=lambda: now)
    states = c.states()
    assert ":" not in (states[("acme", old_hour)].checksum or "")  # kind 1 keeps its unprefixed decimal
    assert (states[("acme", new_hour)].checksum or "").startswith("rowhash2:")
    assert c.verify() == []

    # A rogue writer adds a row to one bucket of each kind: both are caught, each by its own formula.
    store.append(uri, _rows(spark, "acme", old_hour, "rogue-old", 1).coalesce(1))
    store.append(uri, _rows(spark, "acme", new_hour, "rogue-new", 1).coalesce(1))
    broken = {(s.tenant_id, s.hour): check.rows for s, check in c.verify()}
    assert broken == {("acme", old_hour): 7, ("acme", new_hour): 6}


@settings(max_examples=60)
@given(st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.text(max_size=40)),
                          st.dictionaries(st.text(max_size=5), st.one_of(st.none(), st.text(max_size=5)), max_size=3),
                          st.integers(-2**31, 2**31 - 1)), min_size=1, max_size=20, unique_by=lambda r: r[0]),
       st.randoms())
def test_rowhash2_ignores_row_and_map_entry_order_and_sees_any_changed_value(
    rows: list[tuple[str, str | None, dict[str, str | None], int]], rnd: random.Random
) -> None:
    from lakeshard.buckets.checksum import rowhash2

    def table(rs: list[tuple[str, str | None, dict[str, str | None], int]], flip_maps: bool = False) -> pa.Table:
        maps = [list(reversed(m.items())) if flip_maps else list(m.items()) for _, _, m, _ in rs]
        return pa.table({
            "tenant_id": ["acme"] * len(rs), "event_id": [r[0] for r in rs],
            "ts": pa.array([datetime(2026, 1, 1, tzinfo=UTC)] * len(rs), pa.timestamp("us", tz="UTC")),
            "message": pa.array([r[1] for r in rs], pa.string()),
            "attributes": pa.array(maps, pa.map_(pa.string(), pa.string())),
            "size_bytes": pa.array([r[3] for r in rs], pa.int32()),
        })

    n, keys, checksum = rowhash2(table(rows))
    assert (n, keys) == (len(rows), len(rows))
    shuffled = rows[:]
    rnd.shuffle(shuffled)
    assert rowhash2(table(shuffled, flip_maps=True))[2] == checksum
    i = rnd.randrange(len(rows))
    event_id, message, attributes, size = rows[i]
    for changed in ((event_id, None if message else "x", attributes, size),
                    (event_id, message, {**attributes, "new-key": "v"}, size),
                    (event_id, message, attributes, size ^ 1)):
        assert rowhash2(table([*rows[:i], changed, *rows[i + 1:]]))[2] != checksum


@settings(max_examples=40)
@given(st.lists(st.lists(st.tuples(st.sampled_from(["e1", "e2", "é", ""]), st.one_of(st.none(), st.text(max_size=40)),
                                   st.integers(0, 3)), max_size=12), min_size=1, max_size=8),
       st.lists(st.booleans(), min_size=8, max_size=8))
def test_rowhash2_of_many_groups_at_once_equals_each_group_alone(
    groups: list[list[tuple[str, str | None, int]]], wide: list[bool]
) -> None:
    """Hashing all buckets in one pass (the closing check's path) gives every bucket exactly its own result:
    rows, distinct keys (duplicates within a group count once, across groups separately) and checksum, with
    groups of two schemas mixed and empty groups among them."""
    from lakeshard.buckets.checksum import rowhash2, rowhash2_groups

    def table(rows: list[tuple[str, str | None, int]], extra: bool) -> pa.Table:
        columns = {"tenant_id": ["acme"] * len(rows), "event_id": [r[0] for r in rows],
                   "ts": pa.array([datetime(2026, 1, 1, r[2], tzinfo=UTC) for r in rows], pa.timestamp("us", tz="UTC")),
                   "message": pa.array([r[1] for r in rows], pa.string())}
        if extra:
            columns["size_bytes"] = pa.array([len(r[0]) for r in rows], pa.int32())
        return pa.table(columns)

    tables = {i: table(rows, wide[i]) for i, rows in enumerate(groups)}
    alone = {i: rowhash2(t) for i, t in tables.items()}
    assert rowhash2_groups(tables) == alone
    assert all(alone[i][:2] == (len(rows), len({(r[0], r[2]) for r in rows})) for i, rows in enumerate(groups))


def test_rowhash2_checksums_recorded_by_earlier_releases_still_verify() -> None:
    """Closed buckets keep the checksum they were closed with: the values below were computed by the bucket-by-
    bucket implementation (before all buckets were hashed in one pass); a change to the formula fails here."""
    from lakeshard.buckets.checksum import rowhash2_groups

    def table(tenant: str, n: int) -> pa.Table:
        return pa.table({
            "tenant_id": [tenant] * n, "event_id": [f"ev-{i}-é" * (i % 7) for i in range(n)],
            "ts": pa.array([datetime(2026, 1, 1, 3, i % 60, tzinfo=UTC) for i in range(n)],
                           pa.timestamp("us", tz="UTC")),
            "message": pa.array([None if i % 5 == 0 else "x" * (i * 3 % 70) for i in range(n)], pa.string()),
            "attributes": pa.array([[("k", str(i)), ("z", None)] for i in range(n)], pa.map_(pa.string(), pa.string())),
            "size_bytes": pa.array(list(range(n)), pa.int32())})

    assert rowhash2_groups({"acme": table("acme", 37), "zeta": table("zeta", 5)}) == {
        "acme": (37, 37, "rowhash2:9dade6c733faf6b6"), "zeta": (5, 5, "rowhash2:81e39d1dc6789004")}


@pytest.mark.parametrize(("seed", "damage"), [(7, "truncated"), (23, "missing")])
def test_a_damaged_file_fails_only_its_buckets_rowjson_check_naming_it(
    spark: SparkSession, store: TableStore, lakehouse: LakeshardConfig, seed: int, damage: str
) -> None:
    """The Spark (``rowjson``) check meets a file it cannot read: that bucket's check names the file as damaged,
    every other bucket gets the check it had before (no Java trace, no stopped job)."""
    from urllib.parse import unquote

    from lakeshard.buckets.checksum import ROWJSON

    rng = random.Random(seed)
    cfg, uri = lakehouse, lakehouse.table_uri("events")
    hour = hour_of(datetime.now(UTC) - timedelta(hours=rng.randint(3, 9)))
    tenants = [f"t{i}-{rng.randint(0, 999)}" for i in range(rng.randint(3, 5))]
    for t in tenants:
        for part in range(rng.randint(1, 2)):
            store.append(uri, _rows(spark, t, hour, f"{t}-{part}-", rng.randint(1, 9)).coalesce(1))
    before = check_buckets(store, uri, _bucket_files(store, cfg), ROWJSON)
    victim = rng.choice(store.files(uri))
    on_disk = Path(uri) / unquote(victim.path)
    if damage == "missing":
        on_disk.unlink()
    else:
        on_disk.write_bytes(on_disk.read_bytes()[: on_disk.stat().st_size // 3])
    bucket = (victim.partition_values["tenant_id"], victim.partition_values["hour"])

    after = check_buckets(store, uri, _bucket_files(store, cfg), ROWJSON)
    assert set(after) == set(before)
    assert after[bucket].damage.startswith(f"{uri}: data file {victim.path}") and after[bucket].problem
    assert "\n" not in after[bucket].damage
    assert {b: c for b, c in after.items() if b != bucket} == {b: c for b, c in before.items() if b != bucket}
