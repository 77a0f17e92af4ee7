"""Closed buckets stay immutable when a shard writer races the completionist: the close and the writer's commit
are serialised through the ``events`` log (the completionist's fence), so a writer that read "open" before the
close either commits before the closing check (its rows are in the checksum) or loses its commit and redoes its
batch with the bucket closed (its rows go late to the open bucket)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakeshard.buckets import Completionist
from lakeshard.buckets.planner import Bucket, hour_of
from lakeshard.config import LakeshardConfig, load_config
from lakeshard.dedupe.writer import EVENTS, ShardWriter
from lakeshard.lake import TableStore
from lakeshard.routing.router import Router

QUIET, GRACE = timedelta(minutes=10), timedelta(minutes=15)
NOW = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
H5 = hour_of(NOW - timedelta(hours=5))


def _later() -> datetime:
    """Return a time at which every file written so far is quiet."""
    return datetime.now(UTC) + QUIET + timedelta(minutes=1)


class BlindCompletionist(Completionist):
    """Sees no writer lag: as if its backlog was read before the racing writer's rows were routed."""

    def _writer_lag_buckets(self) -> set[Bucket]:
        return set()


def _landing_file(landing: Path, name: str, tenant: str, hour: str, n: int, prefix: str) -> None:
    start = datetime.strptime(hour, "%Y-%m-%dT%H").replace(tzinfo=UTC)
    lines = [json.dumps({"tenant_id": tenant, "event_id": f"{prefix}-{i}", "service": "api",
                         "ts": (start + timedelta(minutes=5 * i)).strftime("%Y-%m-%dT%H:%M:%SZ")}) for i in range(n)]
    path = landing / f"{name}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    arrived = (start + timedelta(minutes=59)).timestamp()
    os.utime(path, (arrived, arrived))


# The closing fence on both adapters: the embedded one (delta-rs' conflict rules and lakeshard's own appends) and
# Delta's own engine (a metadata change, with the writers' check of bucket states inside their writes).
ADAPTERS = ["embedded", pytest.param("native", marks=[pytest.mark.delta_jvm, pytest.mark.slow])]


@pytest.fixture
def adapter_store(request: pytest.FixtureRequest) -> TableStore:
    """Return the store of the adapter the test is parametrized with (``adapter``)."""
    store: TableStore = request.getfixturevalue("store" if request.param == "embedded" else "native_store")
    return store


def _lakehouse(spark: SparkSession, store: TableStore, tmp_path: Path) -> LakeshardConfig:
    landing = tmp_path / "landing"
    landing.mkdir()
    for tenant in ("acme", "zeta"):
        _landing_file(landing, f"{tenant}-on-time", tenant, H5, 5, f"{tenant}-on-time")
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": str(landing),
                                 "routing": {"total_shards": 2, "default_shard_count": 2}}, env={})
    Router(spark, store, cfg).run()
    ShardWriter(spark, store, cfg, [0, 1]).run()
    _landing_file(landing, "acme-racing", "acme", H5, 6, "acme-racing")  # routed; its writer races the close
    Router(spark, store, cfg).run()
    return cfg


def _exactly_once(store: TableStore, cfg: LakeshardConfig) -> int:
    events = store.read(cfg.table_uri(EVENTS))
    rows = events.count()
    assert rows == events.dropDuplicates(["tenant_id", "event_id", "ts"]).count()
    return rows


@pytest.mark.parametrize("adapter_store", ADAPTERS, indirect=True)
def test_a_close_landing_between_a_writers_read_of_bucket_states_and_its_commit_makes_the_writer_redo_its_batch(
    spark: SparkSession, adapter_store: TableStore, tmp_path: Path
) -> None:
    store = adapter_store
    cfg = _lakehouse(spark, store, tmp_path)
    closer = BlindCompletionist(spark, store, cfg, quiet=QUIET, grace=GRACE, clock=_later)
    closes = []

    def close_now(table: str) -> None:
        if table == EVENTS and not closes:  # the writer has read the bucket states: the close lands now
            closes.append(closer.run())

    writer = ShardWriter(spark, store, cfg, [0, 1], before_commit=close_now)
    reports = writer.run()
    assert ("acme", H5) in {(s.tenant_id, s.hour) for s in closes[0].closed}
    assert any(r.conflict for r in reports), "the writer's commit into the closed bucket must lose"
    assert sum(r.written for r in reports) == 6
    assert closer.verify() == []  # the closed bucket holds exactly what it closed with
    late = store.read(cfg.table_uri(EVENTS)).where("event_id LIKE 'acme-racing-%'").collect()
    assert len(late) == 6 and all(r["late"] and r["hour"] != H5 for r in late)
    assert _exactly_once(store, cfg) == 16


@pytest.mark.parametrize("adapter_store", ADAPTERS, indirect=True)
def test_a_writer_that_read_open_and_commits_between_the_closing_check_and_the_fence_fails_the_fence(
    spark: SparkSession, adapter_store: TableStore, tmp_path: Path
) -> None:
    """The writer reads the bucket states (open) before the close starts and commits right after the closing
    check read ``events``: the fence fails, the check is redone at the newer version, and the bucket closes with
    the writer's rows in its checksum."""
    store = adapter_store
    cfg = _lakehouse(spark, store, tmp_path)
    ready, go = threading.Event(), threading.Event()
    outcome: list[object] = []

    def wait_for_the_close(table: str) -> None:
        if table == EVENTS and not go.is_set():
            ready.set()
            go.wait(timeout=120)

    def write() -> None:
        try:
            outcome.append(ShardWriter(spark, store, cfg, [0, 1], before_commit=wait_for_the_close).step())
        except BaseException as exc:  # surfaced by the assertions below
            outcome.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    assert ready.wait(timeout=120)  # the writer has read "open" and prepared its commit
    fences = []

    def release_the_writer(step: str) -> None:
        fences.append(step)
        if not go.is_set():  # the closing check has read events at V: the writer commits now, after V
            go.set()
            writer.join(timeout=120)

    closer = BlindCompletionist(spark, store, cfg, quiet=QUIET, grace=GRACE, clock=_later,
                                before_commit=release_the_writer)
    report = closer.run()
    [step] = outcome
    assert step is not None and not isinstance(step, BaseException) and step.written == 6  # type: ignore[union-attr]
    assert len(fences) == 2  # the first fence failed: the check was redone after the writer's commit
    [acme] = [b for b in report.closed if (b.tenant_id, b.hour) == ("acme", H5)]
    assert acme.rows == 11  # the on-time five and the racing six, all in the checksum
    assert closer.verify() == []
    assert _exactly_once(store, cfg) == 16


@pytest.mark.delta_jvm
@pytest.mark.slow
def test_on_delta_engine_a_close_landing_after_the_writers_log_check_and_before_its_transaction_is_refused(
    spark: SparkSession, native_store: TableStore, tmp_path: Path
) -> None:
    """On Delta's engine the fence is a metadata change, which cannot fail a transaction that starts after it.
    The writer read the bucket states (open) before the close, and Delta's public writer starts its transaction
    after lakeshard's look at the log since the writer's read version: a close landing between the two is caught
    by the writer's check of bucket states inside its write. The writer loses, redoes its batch with the bucket
    closed, and the closed bucket keeps what it closed with."""
    import dataclasses

    from lakeshard.lake.native.public import PublicCommits

    store = native_store
    cfg = _lakehouse(spark, store, tmp_path)
    cfg = dataclasses.replace(cfg, dedupe=dataclasses.replace(cfg.dedupe, arrow_max_bytes=0))  # Delta's writer
    closer = BlindCompletionist(spark, store, cfg, quiet=QUIET, grace=GRACE, clock=_later)
    closes = []

    class CloseBeforeTheTransaction(PublicCommits):
        """Delta's public writer, with the close landing right before it starts its transaction."""

        def append(self, uri, df, state, app_transactions, metadata):  # type: ignore[no-untyped-def]
            if uri == cfg.table_uri(EVENTS) and not closes:
                closes.append(closer.run())
            return super().append(uri, df, state, app_transactions, metadata)

    store._public = CloseBeforeTheTransaction(store._log)  # type: ignore[attr-defined]
    reports = ShardWriter(spark, store, cfg, [0, 1]).run()
    assert ("acme", H5) in {(s.tenant_id, s.hour) for s in closes[0].closed}
    assert closer.verify() == []  # the closed bucket holds exactly what it closed with
    assert any(r.conflict for r in reports), "the writer's commit into the closed bucket must lose"
    assert sum(r.written for r in reports) == 6
    late = store.read(cfg.table_uri(EVENTS)).where("event_id LIKE 'acme-racing-%'").collect()
    assert len(late) == 6 and all(r["late"] and r["hour"] != H5 for r in late)
    assert _exactly_once(store, cfg) == 16


@pytest.mark.slow
def test_a_writer_process_and_a_completionist_process_racing_never_change_a_closed_bucket(
    spark: SparkSession, store: TableStore, tmp_path: Path
) -> None:
    """A completionist process closes buckets in a loop while this process keeps routing and writing events of
    the same hours: every closed bucket keeps its checksum, every event is in ``events`` once."""
    cfg = _lakehouse(spark, store, tmp_path)
    stop = tmp_path / "stop"
    closer = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("_close_in_loop.py")), cfg.lakehouse, cfg.landing, str(stop)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    hours = [hour_of(NOW - timedelta(hours=n)) for n in (5, 4, 3)]
    writer = ShardWriter(spark, store, cfg, [0, 1])
    sent = 16
    try:
        for i in range(14):
            hour = hours[i % len(hours)]
            _landing_file(Path(cfg.landing), f"round-{i}", "acme", hour, 4, f"round-{i}")
            sent += 4
            Router(spark, store, cfg).run()
            writer.run()
        # The stream quiet, the completionist gets to close what it could not close mid-race.
        for _ in range(120):
            if Completionist(spark, store, cfg).closed_buckets():
                break
            time.sleep(1)
    finally:
        stop.touch()
        out, err = closer.communicate(timeout=300)
    assert closer.returncode == 0, err[-3000:]
    assert int(out.split()[-1]) > 0  # the completionist really closed buckets
    states = Completionist(spark, store, cfg).states()
    assert any(s.state == "closed" for s in states.values())
    assert Completionist(spark, store, cfg).verify() == []
    assert _exactly_once(store, cfg) == sent
