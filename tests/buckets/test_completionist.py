"""The completionist on a real lakehouse (router, shard writers, Delta tables), with a delayed landing file."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakeshard.app.cli import main
from lakeshard.buckets import Completionist
from lakeshard.buckets.planner import hour_of
from lakeshard.config import LakeshardConfig, load_config
from lakeshard.dedupe.writer import ShardWriter
from lakeshard.lake import TableStore
from lakeshard.routing.router import Router

QUIET, GRACE = timedelta(minutes=10), timedelta(minutes=15)
NOW = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
H5, H3, H2 = (hour_of(NOW - timedelta(hours=n)) for n in (5, 3, 2))


def _landing_file(landing: Path, name: str, tenant: str, hour: str, n: int, arrived: datetime, prefix: str) -> None:
    """Write ``n`` events of one tenant and hour, with the file's mtime = when it arrived."""
    start = datetime.strptime(hour, "%Y-%m-%dT%H").replace(tzinfo=UTC)
    lines = [json.dumps({"tenant_id": tenant, "event_id": f"{prefix}-{i}", "service": "api",
                         "ts": (start + timedelta(minutes=5 * i)).strftime("%Y-%m-%dT%H:%M:%SZ")}) for i in range(n)]
    path = landing / f"{name}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    os.utime(path, (arrived.timestamp(), arrived.timestamp()))


@pytest.fixture()
def lakehouse(spark: SparkSession, store: TableStore, tmp_path: Path) -> LakeshardConfig:
    """Return a lakehouse whose on-time traffic (acme and zeta, three hours) is routed and written."""
    landing = tmp_path / "landing"
    landing.mkdir()
    for hours_ago, hour in ((5, H5), (3, H3), (2, H2)):
        for tenant in ("acme", "zeta"):
            _landing_file(landing, f"{hour}-{tenant}", tenant, hour, 5, NOW - timedelta(hours=hours_ago - 1),
                          f"{tenant}-{hour}")
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": str(landing),
                                 "routing": {"total_shards": 2, "default_shard_count": 1}}, env={})
    Router(spark, store, cfg).run()
    ShardWriter(spark, store, cfg, [0, 1]).run()
    return cfg


def _states(c: Completionist) -> dict[tuple[str, str], str]:
    return {k: s.state for k, s in c.states().items()}


def test_a_delayed_landing_file_keeps_its_bucket_open_until_written_then_every_quiet_bucket_closes(
    spark: SparkSession, store: TableStore, lakehouse: LakeshardConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = lakehouse
    # A file of acme's H-3 events that arrived (mtime) at H-3:50 but reaches the landing zone only now.
    _landing_file(Path(cfg.landing), "delayed", "acme", H3, 3, NOW - timedelta(hours=3) + timedelta(minutes=50),
                  "delayed")
    c = Completionist(spark, store, cfg, quiet=QUIET, grace=GRACE,
                      clock=lambda: datetime.now(UTC) + QUIET + timedelta(minutes=1))

    first = c.run()
    assert first.backlog.watermark == NOW - timedelta(hours=3) + timedelta(minutes=50)
    assert ("acme", H3) in first.backlog.in_flight  # the completionist looked inside the unrouted file
    assert {(s.tenant_id, s.hour) for s in first.closed} == {("acme", H5), ("zeta", H5)}
    reasons = {(d.tenant_id, d.hour): d.reason for d in first.decisions}
    assert "still unconsumed upstream" in reasons[("acme", H3)]
    assert "delayed.jsonl" in reasons[("zeta", H2)]  # held back by the watermark the delayed file sets

    Router(spark, store, cfg).run()  # routed, but no shard writer has committed it yet: writer lag
    second = c.run()
    assert second.backlog.in_flight == frozenset({("acme", H3)})
    assert {(s.tenant_id, s.hour) for s in second.closed} == {("zeta", H3), ("acme", H2), ("zeta", H2)}
    assert _states(c)[("acme", H3)] == "open"

    ShardWriter(spark, store, cfg, [0, 1]).run()
    third = c.run()
    [closed] = third.closed
    assert (closed.tenant_id, closed.hour, closed.rows, closed.distinct_keys) == ("acme", H3, 8, 8)
    assert set(_states(c).values()) == {"closed"} and c.verify() == []
    since_second = [(s.tenant_id, s.hour) for s in c.closed_buckets(since=second.now)]
    assert set(since_second[:3]) == {("acme", H2), ("zeta", H2), ("zeta", H3)} and since_second[3] == ("acme", H3)
    assert all(s.rows == 5 for s in c.closed_buckets() if (s.tenant_id, s.hour) != ("acme", H3))

    assert main(["buckets", "closed", "--lakehouse", cfg.lakehouse, "--landing", cfg.landing,
                 "--since", f"{second.now:%Y-%m-%dT%H:%M:%S.%f}Z"]) == 0  # runs may share a second
    out = capsys.readouterr().out
    assert out.count("acme") == 2 and out.count("zeta") == 2 and H5 not in out
    with pytest.raises(SystemExit) as bad:
        main(["buckets", "closed", "--lakehouse", cfg.lakehouse, "--since", "yesterday"])
    assert bad.value.code == 2 and "expected an ISO timestamp" in capsys.readouterr().err



def test_a_small_backlog_is_looked_into_without_a_spark_job(
    spark: SparkSession, store: TableStore, lakehouse: LakeshardConfig
) -> None:
    # An hourly close looks inside the landing bytes not routed yet and the routed rows no writer has committed:
    # small, every run. Both looks read in this process (like the router's driver path), not as Spark jobs.
    cfg = lakehouse
    _landing_file(Path(cfg.landing), "routed-not-written", "zeta", H3, 2, NOW - timedelta(hours=3), "rnw")
    Router(spark, store, cfg).run()
    _landing_file(Path(cfg.landing), "not-routed", "acme", H2, 2, NOW - timedelta(hours=2), "nr")
    c = Completionist(spark, store, cfg, quiet=QUIET, grace=GRACE, clock=lambda: NOW + timedelta(hours=1))
    group = "lakeshard-test-backlog"
    spark.sparkContext.setJobGroup(group, "the completionist's backlog")
    try:
        backlog = c.backlog()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    assert backlog.in_flight == frozenset({("zeta", H3), ("acme", H2)})
    assert list(spark.sparkContext.statusTracker().getJobIdsForGroup(group)) == []


def test_a_damaged_data_file_keeps_only_its_bucket_open_and_the_close_says_which_file(
    spark: SparkSession, store: TableStore, lakehouse: LakeshardConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = lakehouse
    events = cfg.table_uri("events")
    victim = next(f for f in store.files(events) if f.partition_values == {"tenant_id": "zeta", "hour": H3})
    on_disk = Path(events) / victim.path
    on_disk.write_bytes(on_disk.read_bytes()[: on_disk.stat().st_size // 3])

    code = main(["buckets", "close", "--lakehouse", cfg.lakehouse, "--landing", cfg.landing, "--quiet-minutes", "0"])

    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in err and "unexpected" not in err, out + err
    # The error names the file on stderr; stdout holds the results only (clig.dev).
    assert f"integrity check failed for zeta/{H3}: {events}: data file {victim.path} (tenant_id=zeta, hour={H3}) " \
           "is damaged" in err, err
    assert victim.path not in out, out
    assert "closed 5 buckets" in out and f"still open: 1 (zeta/{H3}: integrity check failed)" in out
    states = _states(Completionist(spark, store, cfg))
    assert states.pop(("zeta", H3)) == "open" and set(states.values()) == {"closed"} and len(states) == 5
