"""The sharding allocator on real Delta tables: same placement everywhere, atomic creation, settings."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakeshard.config import LakeshardConfig, load_config
from lakeshard.lake import TableStore
from lakeshard.routing.allocator import ShardAllocator
from lakeshard.routing.errors import RoutingError
from lakeshard.routing.tables import ShardTopology, TenantSetting

T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)


def _cfg(tmp_path: Path, **routing: int) -> LakeshardConfig:
    return load_config(overrides={"lakehouse": str(tmp_path / "lh"), "routing": {"total_shards": 8, **routing}},
                       env={})


def test_same_placement_for_any_time_in_the_window_and_after_a_restart(store: TableStore, tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, default_shard_count=3)
    a = ShardAllocator(store, cfg)
    p = a.get_placement("acme", T0 + timedelta(minutes=2))
    assert p.window_start == T0 and p.window_end == T0 + timedelta(minutes=5) and len(p.shards) == 3
    assert a.get_placement("acme", T0 + timedelta(minutes=4, seconds=59)) is p  # cached
    restarted = ShardAllocator(store, cfg)  # a new process: empty cache, reads the table
    assert restarted.get_placement("acme", T0) == p
    assert restarted.stats.placements_created == 0


def test_resolving_a_batch_costs_one_read_and_one_commit(store: TableStore, tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    a = ShardAllocator(store, cfg)
    pairs = [(f"t{i}", T0 + timedelta(minutes=5 * w)) for i in range(20) for w in range(3)]
    got = a.resolve(pairs)
    assert len(got) == 60 and a.stats.commits == 1 and a.stats.table_reads == 1
    assert store.read(cfg.table_uri("placements")).count() == 60
    a.resolve(pairs)
    assert a.stats.cache_hits == 60 and a.stats.table_reads == 1


def test_a_lookup_reads_only_the_placement_files_of_its_windows(store: TableStore, tmp_path: Path) -> None:
    """The placements table grows by a file per allocation; a lookup must not read it whole."""
    cfg = _cfg(tmp_path)
    a = ShardAllocator(store, cfg)
    windows = [T0 + timedelta(minutes=5 * w) for w in range(6)]
    for w in windows:  # one allocation commit, so one file, per window
        a.resolve([(f"t{i}", w) for i in range(10)])
    assert len(store.files(cfg.table_uri("placements"))) == 6
    fresh = ShardAllocator(store, cfg)
    got = fresh.resolve([("t3", windows[2]), ("t4", windows[3])])
    assert fresh.stats.files_read == 2 and fresh.stats.placements_created == 0
    assert got == {("t3", windows[2]): a.get_placement("t3", windows[2]),
                   ("t4", windows[3]): a.get_placement("t4", windows[3])}
    # The other tenants of the windows read came along into the cache: no further read for them.
    fresh.resolve([("t7", windows[2])])
    assert fresh.stats.table_reads == 1
    later = windows[-1] + timedelta(minutes=5)
    fresh.resolve([("t3", later)])  # a window no file covers: nothing read, one new placement
    assert fresh.stats.files_read == 2 and fresh.stats.placements_created == 1


def test_a_lookup_turns_only_the_pairs_asked_for_into_placements(store: TableStore, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A route run asks for a few of the tenants x windows it reads (every tenant of a window comes along). Turning
    every row read into a Placement cost more than the read, and grew with the windows late events reach back to."""
    import lakeshard.routing.allocator as allocator_module

    cfg = _cfg(tmp_path)
    windows = [T0 + timedelta(minutes=5 * w) for w in range(4)]
    a = ShardAllocator(store, cfg)
    a.resolve([(f"t{i}", w) for i in range(50) for w in windows])
    made: list[int] = []
    real = allocator_module.placements_from_arrow

    def counted(rows):  # type: ignore[no-untyped-def]
        out = real(rows)
        made.append(len(out))
        return out

    monkeypatch.setattr(allocator_module, "placements_from_arrow", counted)
    fresh = ShardAllocator(store, cfg)  # a new job process: nothing cached
    got = fresh.resolve([("t3", windows[1]), ("t40", windows[2])])
    assert sum(made) == 2, f"{sum(made)} placements made for 2 pairs asked (200 rows read)"
    assert got == {("t3", windows[1]): a.get_placement("t3", windows[1]),
                   ("t40", windows[2]): a.get_placement("t40", windows[2])}
    # Another tenant of a window read costs no read, and one more placement.
    assert fresh.get_placement("t7", windows[1]) == a.get_placement("t7", windows[1])
    assert fresh.stats.table_reads == 1 and sum(made) == 3
    # Every pair, asked in any order, is the placement the allocating process made.
    pairs = [(f"t{i}", w) for w in reversed(windows) for i in range(49, -1, -1)]
    assert fresh.resolve(pairs) == {pair: a.get_placement(*pair) for pair in pairs}
    assert fresh.stats.placements_created == 0


def test_a_lookup_in_compacted_placements_decodes_only_the_row_groups_of_its_window(
        store: TableStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, decoded: list[int]) -> None:
    """compact_books merges every allocation's file into one spanning every window ever allocated; a late event's
    window (or any window inside that span) must not cost a read of every placement the lakehouse holds."""
    from lakeshard.maintenance import compact_bookkeeping
    from lakeshard.tables import PLACEMENTS

    cfg = _cfg(tmp_path)
    cfg = replace(cfg, maintenance=replace(cfg.maintenance, bookkeeping_row_group_rows=40))
    windows = [T0 + timedelta(minutes=5 * w) for w in range(50)]
    a = ShardAllocator(store, cfg)
    for w in windows:  # one allocation commit, so one file, per window
        a.resolve([(f"t{i}", w) for i in range(20)])
    compact_bookkeeping(store, cfg, tables=(PLACEMENTS,), max_files=1)
    uri = cfg.table_uri(PLACEMENTS)
    assert len(store.files(uri)) == 1, "compact_books left more than one placements file"

    returned: list[int] = []
    real_read = store.read_arrow

    def counted_read(*args, **kwargs):  # type: ignore[no-untyped-def]
        rows = real_read(*args, **kwargs)
        returned.append(rows.num_rows)
        return rows

    monkeypatch.setattr(store, "read_arrow", counted_read)
    decoded.clear()
    fresh = ShardAllocator(store, cfg)  # a new job process: nothing cached
    late = fresh.resolve([("t3", windows[25]), ("t99", windows[25])])
    monkeypatch.undo()

    assert sum(returned) == 20, f"{sum(returned)} placement rows read for one window of 20 tenants (1000 held)"
    assert 0 < sum(decoded) <= 80, f"{sum(decoded)} placement rows decoded for one window (row groups of 40)"
    assert late[("t3", windows[25])] == a.get_placement("t3", windows[25])
    assert fresh.stats.placements_created == 1


def test_new_settings_take_effect_at_the_next_window_only(store: TableStore, tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    a = ShardAllocator(store, cfg)
    before = a.get_placement("acme", T0)
    assert len(before.shards) == 1
    a.tables.set_tenant_settings([TenantSetting("acme", shard_count=3, salt=5)], reason="test")
    fresh = ShardAllocator(store, cfg)
    assert fresh.get_placement("acme", T0) == before  # the live placement never changes
    nxt = fresh.get_placement("acme", T0 + timedelta(minutes=5))
    assert len(nxt.shards) == 3 and nxt.salt == 5


def test_excluded_shards_are_skipped_by_new_placements_only(store: TableStore, tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, default_shard_count=2)
    a = ShardAllocator(store, cfg)
    tenants = [f"t{i}" for i in range(40)]
    old = a.resolve([(t, T0) for t in tenants])
    hot = 3
    a.tables.set_topology(ShardTopology(8, excluded=(hot,)), reason="shard 3 lags")
    b = ShardAllocator(store, cfg)
    assert b.resolve([(t, T0) for t in tenants]) == old
    new = b.resolve([(t, T0 + timedelta(minutes=5)) for t in tenants])
    assert all(hot not in p.shards and p.excluded == (hot,) for p in new.values())
    assert any(hot in p.shards for p in old.values())
    for t in tenants:
        o, n = old[(t, T0)], new[(t, T0 + timedelta(minutes=5))]
        if hot not in o.shards:
            assert n.shards == o.shards  # placements without the excluded shard do not move


def test_off_grid_window_start_is_rejected(store: TableStore, tmp_path: Path) -> None:
    with pytest.raises(RoutingError, match="not on the 300s window grid"):
        ShardAllocator(store, _cfg(tmp_path)).resolve([("acme", T0 + timedelta(minutes=1))])


def test_bad_topology_is_rejected(store: TableStore, tmp_path: Path) -> None:
    tables = ShardAllocator(store, _cfg(tmp_path)).tables
    with pytest.raises(RoutingError, match=r"excluded shards \[9\] are outside \[0, 8\)"):
        tables.set_topology(ShardTopology(8, excluded=(9,)), reason="typo")
    with pytest.raises(RoutingError, match="every one"):
        tables.set_topology(ShardTopology(2, excluded=(0, 1)), reason="oops")


@pytest.mark.slow
def test_four_processes_racing_get_identical_placements(store: TableStore, spark: SparkSession, tmp_path: Path) -> None:
    lakehouse = str(tmp_path / "lh")
    cfg = load_config(overrides={"lakehouse": lakehouse}, env={})
    ShardAllocator(store, cfg).tables.ensure()
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    script = Path(__file__).with_name("_allocate.py")
    procs = [subprocess.Popen([sys.executable, str(script), lakehouse, f"p{i}", str(barrier), "15", "4"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(4)]
    deadline = time.time() + 300
    while len(list(barrier.glob("ready-*"))) < 4:
        assert time.time() < deadline and all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        time.sleep(0.05)
    (barrier / "go").touch()
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    assert all(o["placements"] == outs[0]["placements"] for o in outs)
    assert len(outs[0]["placements"]) == 60
    assert sum(o["commits"] for o in outs) >= 1
    assert not any(o["spark_started"] for o in outs)  # the allocator reads and commits in the driver
    table = store.read(cfg.table_uri("placements"))
    assert table.count() == 60  # exactly one placement per (tenant, window), whoever won
    assert table.select("tenant_id", "window_start").distinct().count() == 60
