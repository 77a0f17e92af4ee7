"""Any tenant id and any event id, whatever characters they hold, through the whole lakehouse.

Landing JSON → ``Router`` → ``ShardWriter`` → ``Completionist`` (``lakeshard buckets close``) → compaction
(``lakeshard compact --apply --bucket`` and the compact flow's :func:`compact_events`) → queries
(:func:`read_events`, ``lakeshard query``) → chunk versions (``ChunkVersions``, ``lakeshard versions``), on
real Delta tables. Ids hold path separators, percent signs, ``=``, quotes, backslashes, control characters,
any Unicode and the longest lengths the landing format allows.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from lakeshard.app.cli import main
from lakeshard.buckets import Completionist
from lakeshard.buckets.planner import hour_of
from lakeshard.compaction import compact_events
from lakeshard.config import load_config
from lakeshard.dedupe.writer import ShardWriter
from lakeshard.lake import TableStore
from lakeshard.lake.protocol.datafiles import written_partition_values
from lakeshard.lake.protocol.partitions import PARTITION_VALUES_KEY, partition_directory
from lakeshard.query import read_events
from lakeshard.routing.router import Router
from lakeshard.versions.chunks import Chunk, ChunkVersions

NASTY = [
    "a/b", "/lead", "trail/", "%2F", "100%", "x=y", "tenant_id=z", "+", " sp ace ", "\"q'", "\\", "back\\slash",
    "\t\n", "nul\x00x", "\x7f", "nel\x85", "ls\u2028ps\u2029", "ü/日本", "🦆", "{[*?]}", "#frag?q", ":colon",
    ".", "..", "~", "-",
    "t" * 128, "é" * 128, "/" * 128, "🦆" * 128,
]
LONG_EVENT_IDS = ["e" * 256, "ü" * 256, "/" * 256, "🦆" * 256]
NOW = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
HOUR = hour_of(NOW - timedelta(hours=5))

ids = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=12)


@given(st.lists(st.one_of(st.sampled_from(NASTY), st.text(st.characters(exclude_categories=["Cs"]), min_size=1,
                                                          max_size=128)), min_size=2, max_size=2, unique=True))
def test_a_partition_directory_fits_a_file_name_and_gives_back_exactly_its_value(values: list[str]) -> None:
    """Every ``col=value`` segment fits a file system's 255-byte name; the value read back (directories, or
    the footer for values too long for a name) is exactly the value written; two values, two directories."""
    dirs = []
    for value in values:
        relative, footer = partition_directory({"tenant_id": value, "hour": "2026-01-01T10"})
        assert all(len(part.encode()) <= 255 for part in relative.split("/"))
        raw = footer.get(PARTITION_VALUES_KEY)
        got = written_partition_values(f"{relative}/part-0.parquet", ["tenant_id", "hour"],
                                       None if raw is None else json.loads(raw))
        assert got == {"tenant_id": value, "hour": "2026-01-01T10"}
        dirs.append(relative)
    assert dirs[0] != dirs[1]


def _events(tenants: list[str], event_ids: list[str]) -> list[dict[str, object]]:
    """Return every tenant's events: the same event ids in each tenant, ``host`` naming the tenant's index."""
    start = datetime.strptime(HOUR, "%Y-%m-%dT%H").replace(tzinfo=UTC)
    return [{"tenant_id": t, "event_id": e, "host": f"tenant-{n}", "service": "api",
             "ts": (start + timedelta(seconds=7 * i)).strftime("%Y-%m-%dT%H:%M:%SZ")}
            for n, t in enumerate(tenants) for i, e in enumerate(event_ids)]


def _write_landing(path: Path, records: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    arrived = (NOW - timedelta(hours=4)).timestamp()
    os.utime(path, (arrived, arrived))


@pytest.mark.slow
# Each example builds a whole lakehouse (over a minute): one example per run, each drawing a few random ids on
# top of the fixed ones, and no shrinking (a failure names its ids anyway).
@settings(max_examples=1, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(extra_tenants=st.lists(ids, min_size=2, max_size=5, unique=True),
       extra_events=st.lists(ids, min_size=2, max_size=5, unique=True))
def test_any_tenant_and_event_id_goes_through_route_write_close_compact_query_and_versions(
    spark: SparkSession, store: TableStore, tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    extra_tenants: list[str], extra_events: list[str],
) -> None:
    tmp = tmp_path_factory.mktemp("any-id")
    tenants = list(dict.fromkeys([*NASTY, *extra_tenants]))
    event_ids = list(dict.fromkeys([*NASTY, *LONG_EVENT_IDS, *extra_events]))
    records = _events(tenants, event_ids)
    expected: dict[str, set[tuple[str, datetime]]] = defaultdict(set)
    for r in records:
        ts = datetime.strptime(str(r["ts"]), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        expected[str(r["tenant_id"])].add((str(r["event_id"]), ts))

    landing = tmp / "landing"
    landing.mkdir()
    cfg = load_config(overrides={"lakehouse": str(tmp / "lh"), "landing": str(landing),
                                 "routing": {"total_shards": 2, "default_shard_count": 1}}, env={})
    common = ["--lakehouse", cfg.lakehouse, "--landing", cfg.landing]
    # Two landing files, each routed and written on its own: every bucket gets at least two small files.
    # The second repeats a third of the first one's events (an at-least-once producer).
    for n, part in enumerate([records[0::2], records[1::2] + records[0::6]]):
        _write_landing(landing / f"part-{n}.jsonl", part)
        Router(spark, store, cfg).run()
        ShardWriter(spark, store, cfg, [0, 1]).run()
    events = cfg.table_uri("events")
    before = store.files(events)
    assert {f.partition_values["tenant_id"] for f in before} == set(tenants)
    assert all(sum(1 for f in before if f.partition_values["tenant_id"] == t) >= 2 for t in tenants)

    # Close every bucket (nothing is left upstream; no quiet period, no grace).
    assert main(["buckets", "close", *common, "--quiet-minutes", "0", "--grace-minutes", "0"]) == 0
    assert f"closed {len(tenants)} buckets" in capsys.readouterr().out
    closed = Completionist(spark, store, cfg).closed()
    assert closed == {(t, HOUR) for t in tenants}
    assert main(["buckets", "closed", *common]) == 0
    capsys.readouterr()

    # Compact: half the buckets through the command, the others through the compact flow's function.
    by_cli = tenants[: len(tenants) // 2]
    # ``--option=value``: an id may start with "-", which argparse would take for an option on its own.
    bucket_args = [f"--bucket={t}/{HOUR}" for t in by_cli]
    assert main(["compact", "--lakehouse", cfg.lakehouse, "--apply", "--min-files", "2", *bucket_args]) == 0, (
        capsys.readouterr())
    capsys.readouterr()
    report = compact_events(store, cfg, sealed=closed, min_files=2)
    assert report.gave_up == []
    after = store.files(events)
    per_tenant = {t: [f for f in after if f.partition_values["tenant_id"] == t] for t in tenants}
    assert all(len(fs) == 1 for fs in per_tenant.values()), {t: len(fs) for t, fs in per_tenant.items() if len(fs) != 1}
    assert len(after) < len(before)

    # Tenant isolation: every live file's rows are its own tenant's (``host`` carries the tenant's index).
    root = Path(events)
    for t, files in per_tenant.items():
        for f in files:
            hosts = set(pq.read_table(root / _disk_path(f.path), columns=["host"]).column("host").to_pylist())
            assert hosts == {f"tenant-{tenants.index(t)}"}, (t, f.path)

    # Queries: exactly the tenant's events, through the library and the command.
    start, end = NOW - timedelta(hours=6), NOW
    for t in tenants:
        df, _ = read_events(spark, store, events, tenant=t, start=start, end=end)
        got = [(r.event_id, r.ts.astimezone(UTC)) for r in df.select("event_id", "ts").collect()]
        assert len(got) == len(set(got)) and set(got) == expected[t], t
        assert main(["query", "--lakehouse", cfg.lakehouse, f"--tenant={t}", "--start", start.isoformat(),
                     "--end", end.isoformat()]) == 0
        assert f"\n{len(expected[t]):,} matching events" in capsys.readouterr().out, t

    # Versions: each chunk's history ends with the compaction that left its one file.
    for t in tenants:
        history = ChunkVersions(store, events, Chunk(t, HOUR)).log()
        assert history and not history[0].data_change and [f.path for f in history[0].added] == [
            f.path for f in per_tenant[t]], t
        assert main(["versions", "log", "--lakehouse", cfg.lakehouse, f"--chunk={t}/{HOUR}"]) == 0
        assert main(["versions", "show", "--lakehouse", cfg.lakehouse, f"--chunk={t}/{HOUR}"]) == 0
        assert "DROP" in capsys.readouterr().out


def _disk_path(log_path: str) -> str:
    from urllib.parse import unquote

    return unquote(log_path)
