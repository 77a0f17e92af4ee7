"""``lakeshard refill --decisions``: the rows of ``buckets``, ``tenant_settings`` and ``shard_topology`` files that
``lakeshard fsck --repair`` removed, rebuilt from the files the hourly bookkeeping rewrite made them from; what
cannot be rebuilt is named, file by file, with the reason."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from lakeshard.app.cli import main
from lakeshard.config import LakeshardConfig, load_config
from lakeshard.lake import TableStore, open_lazy_store
from lakeshard.maintenance import DECISION_TABLES, compact_bookkeeping
from lakeshard.routing import RoutingTables, ShardTopology, TenantSetting
from lakeshard.tables import BUCKETS, SHARD_TOPOLOGY, TENANT_SETTINGS
from lakeshard.tables.schemas import BUCKETS_SCHEMA

T0 = datetime(2026, 3, 1, 4, 0, tzinfo=UTC)


def _lakehouse(tmp_path: Path) -> tuple[LakeshardConfig, TableStore]:
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh")}, env={})
    return cfg, open_lazy_store(cfg)


def _decide(cfg: LakeshardConfig, store: TableStore) -> None:
    """Commit decisions as their owners do, one commit each: settings of an autosharder's and a balancer's runs,
    two rings, and a bucket's states from first seen to closed."""
    routing = RoutingTables(store, cfg)
    routing.set_tenant_settings([TenantSetting("acme", 2, 0), TenantSetting("beta", 1, 3)], reason="autoshard")
    routing.set_tenant_settings([TenantSetting("acme", 4, 0)], reason="autoshard")
    routing.set_tenant_settings([TenantSetting("beta", 1, 7)], reason="balance")
    routing.set_topology(ShardTopology(8, ()), reason="initial ring")
    routing.set_topology(ShardTopology(16, (3, 11)), reason="grown, two excluded")
    uri = cfg.table_uri(BUCKETS)
    store.create(uri, BUCKETS_SCHEMA, description="state of each (tenant, hour) bucket of events")
    schema = store.arrow_schema(uri)
    for i, state in enumerate(("open", "closing", "closed")):
        closed = state == "closed"
        row = {"tenant_id": "acme", "hour": "2026-03-01T03", "state": state, "decided_at": T0 + timedelta(minutes=i),
               "reason": f"{state} by the completionist", "rows": 40 if closed else None,
               "distinct_keys": 40 if closed else None, "checksum": "rowhash2:00ff00ff00ff00ff" if closed else None,
               "newest_file_at": T0 - timedelta(minutes=30) if closed else None,
               "events_version": 12 if closed else None}
        store.append_arrow(uri, pa.Table.from_pylist([row], schema=schema), metadata={"closed": int(closed)})


def _rows(store: TableStore, cfg: LakeshardConfig, name: str) -> list[dict[str, Any]]:
    return sorted(store.read_table_arrow(cfg.table_uri(name)).to_pylist(),
                  key=lambda r: json.dumps(r, sort_keys=True, default=str))


def _rows_by_delta_rs(cfg: LakeshardConfig, name: str) -> list[dict[str, Any]]:
    return sorted(DeltaTable(cfg.table_uri(name)).to_pyarrow_table().to_pylist(),
                  key=lambda r: json.dumps(r, sort_keys=True, default=str))


def _damage(cfg: LakeshardConfig, store: TableStore, name: str, how: str) -> str:
    """Damage the newest live file of table ``name`` (truncated, missing, or its rows twice); return its path."""
    uri = cfg.table_uri(name)
    victim = max(store.files(uri), key=lambda f: (f.modification_time, f.path))
    on_disk = Path(uri) / unquote(victim.path)
    if how == "missing":
        on_disk.unlink()
    elif how == "truncated":
        on_disk.write_bytes(on_disk.read_bytes()[: on_disk.stat().st_size // 2])
    else:
        rows = pq.read_table(on_disk)
        pq.write_table(pa.concat_tables([rows, rows]), on_disk)
    return victim.path


DAMAGE = {BUCKETS: "truncated", TENANT_SETTINGS: "missing", SHARD_TOPOLOGY: "rows twice"}


def test_refill_rebuilds_every_row_a_repair_removed_from_the_files_the_rewrite_made_them_from(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg, store = _lakehouse(tmp_path)
    _decide(cfg, store)
    report = compact_bookkeeping(store, cfg, tables=DECISION_TABLES, max_files=1)  # the hourly rewrite
    assert all(t.files_after == 1 for t in report.tables), report
    before = {name: _rows(store, cfg, name) for name in DECISION_TABLES}
    assert [len(before[n]) for n in DECISION_TABLES] == [3, 4, 2]
    victims = {name: _damage(cfg, store, name, how) for name, how in DAMAGE.items()}

    lakehouse = ["--lakehouse", cfg.lakehouse]
    assert main(["fsck", *lakehouse, "--repair"]) == 0
    repaired = capsys.readouterr()
    out = repaired.out
    # Each damaged file is named on stderr, and none as one that cannot be rebuilt.
    named = [line for line in repaired.err.splitlines() if line.startswith("  damaged: ")]
    assert len(named) == len(DECISION_TABLES) and "cannot rebuild" not in repaired.err
    for name in DECISION_TABLES:
        assert f"removed 1 files ({len(before[name])} rows by the log) from {name}" in out
        assert not _rows(store, cfg, name)  # the whole table was in the damaged file
    assert out.count("lakeshard refill --decisions rebuilds the removed rows") == 3

    assert main(["refill", *lakehouse, "--decisions", "--dry-run"]) == 0
    assert not any(_rows(store, cfg, name) for name in DECISION_TABLES)
    capsys.readouterr()
    assert main(["refill", *lakehouse, "--decisions"]) == 0
    captured = capsys.readouterr()
    assert not captured.err
    for name in DECISION_TABLES:
        assert f"{name}: 1 of 1 removed files rebuilt" in captured.out
        assert _rows(store, cfg, name) == before[name] == _rows_by_delta_rs(cfg, name), name
    routing = RoutingTables(store, cfg)
    assert routing.topology() == ShardTopology(16, (3, 11))
    assert routing.tenant_settings() == {"acme": TenantSetting("acme", 4, 0), "beta": TenantSetting("beta", 1, 7)}
    assert victims[BUCKETS] not in {f.path for f in store.files(cfg.table_uri(BUCKETS))}

    versions = {name: store.version(cfg.table_uri(name)) for name in DECISION_TABLES}
    assert main(["refill", *lakehouse, "--decisions"]) == 0  # a second run commits nothing
    assert {name: store.version(cfg.table_uri(name)) for name in DECISION_TABLES} == versions
    assert all(_rows(store, cfg, name) == before[name] for name in DECISION_TABLES)


def test_a_removed_file_whose_rows_no_other_file_holds_is_named_with_the_reason(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file a decision's own commit appended (no rewrite made it), and a rewrite's file whose sources vacuum
    deleted: each named on stderr with its table, its path and why; the other files' rows are kept, exit 1."""
    cfg, store = _lakehouse(tmp_path)
    _decide(cfg, store)
    compact_bookkeeping(store, cfg, tables=[SHARD_TOPOLOGY], max_files=1)
    topology_uri = cfg.table_uri(SHARD_TOPOLOGY)
    (rewritten,) = store.files(topology_uri)
    sources = [c.file.path for e in store.log_entries(topology_uri) for c in e.changes if c.action == "remove"]
    for path in sources:  # as vacuum leaves them
        (Path(topology_uri) / unquote(path)).unlink()
    settings_before = _rows(store, cfg, TENANT_SETTINGS)
    appended = _damage(cfg, store, TENANT_SETTINGS, "truncated")
    assert _damage(cfg, store, SHARD_TOPOLOGY, "truncated") == rewritten.path

    lakehouse = ["--lakehouse", cfg.lakehouse]
    assert main(["fsck", *lakehouse, "--repair"]) == 0
    named_at_repair = [line for line in capsys.readouterr().err.strip().splitlines() if "cannot rebuild" in line]
    assert main(["refill", *lakehouse, "--decisions"]) == 1
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 2, err
    settings_line = next(line for line in lines if line.startswith(f"cannot rebuild {TENANT_SETTINGS} file "))
    assert settings_line.startswith(f"cannot rebuild {TENANT_SETTINGS} file {appended}: it was added by version ")
    assert "with rows of its own, not rewritten from other files: no other file holds them" in settings_line
    topology_line = next(line for line in lines if line.startswith(f"cannot rebuild {SHARD_TOPOLOGY} file "))
    assert topology_line.startswith(f"cannot rebuild {SHARD_TOPOLOGY} file {rewritten.path}: version ")
    assert "it is gone from disk: vacuum deletes the files a rewrite removed" in topology_line
    assert "and it was added by version " in topology_line
    assert sorted(line.strip() for line in named_at_repair) == sorted(lines)  # fsck --repair named them already
    kept = _rows(store, cfg, TENANT_SETTINGS)
    assert len(kept) == len(settings_before) - 1 and all(r in settings_before for r in kept)  # nothing invented
    assert not _rows(store, cfg, SHARD_TOPOLOGY)


def test_a_source_vacuum_deleted_is_rebuilt_from_the_rewrite_that_made_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two hourly rewrites: the second made the damaged file from the first's file (gone from disk) and newer
    appends; the first's sources are still there, so every row comes back."""
    cfg, store = _lakehouse(tmp_path)
    _decide(cfg, store)
    uri = cfg.table_uri(TENANT_SETTINGS)
    compact_bookkeeping(store, cfg, tables=[TENANT_SETTINGS], max_files=1)
    (first,) = store.files(uri)
    RoutingTables(store, cfg).set_tenant_settings([TenantSetting("gamma", 3, 1)], reason="operator")
    RoutingTables(store, cfg).set_tenant_settings([TenantSetting("acme", 6, 2)], reason="autoshard")
    compact_bookkeeping(store, cfg, tables=[TENANT_SETTINGS], max_files=1)
    (second,) = store.files(uri)
    last = store.log_entries(uri)[-1]
    assert first.path in {c.file.path for c in last.changes if c.action == "remove"}  # a rewrite of a rewrite
    before = _rows(store, cfg, TENANT_SETTINGS)
    assert len(before) == 6
    (Path(uri) / unquote(first.path)).unlink()  # as vacuum leaves it
    assert _damage(cfg, store, TENANT_SETTINGS, "truncated") == second.path

    lakehouse = ["--lakehouse", cfg.lakehouse]
    assert main(["fsck", *lakehouse, "--repair"]) == 0
    assert not _rows(store, cfg, TENANT_SETTINGS)
    assert main(["refill", *lakehouse, "--decisions"]) == 0, capsys.readouterr().err
    assert _rows(store, cfg, TENANT_SETTINGS) == before == _rows_by_delta_rs(cfg, TENANT_SETTINGS)


@pytest.mark.delta_jvm
def test_refill_rebuilds_a_rewritten_file_on_deltas_own_engine(
        native_store: TableStore, test_config: LakeshardConfig, tmp_path: Path) -> None:
    """The same on the native adapter, whose hourly rewrite goes through Delta's public writer (``replaceWhere``,
    ``dataChange=false``)."""
    from dataclasses import replace

    from lakeshard.config import MaintenanceConfig
    from lakeshard.maintenance import check_table, plan_decision_refills, refill_decisions, repair_table
    from lakeshard.tables import FSCK_REPAIRS

    cfg = replace(test_config, lakehouse=str(tmp_path / "lh"), spark=replace(test_config.spark, adapter="native"),
                  maintenance=MaintenanceConfig(bookkeeping_max_files=1))
    routing = RoutingTables(native_store, cfg)
    routing.set_topology(ShardTopology(8, ()), reason="initial ring")
    routing.set_topology(ShardTopology(16, (3, 11)), reason="grown, two excluded")
    uri = cfg.table_uri(SHARD_TOPOLOGY)
    assert compact_bookkeeping(native_store, cfg, tables=[SHARD_TOPOLOGY]).tables[0].version is not None
    before = _rows(native_store, cfg, SHARD_TOPOLOGY)
    _damage(cfg, native_store, SHARD_TOPOLOGY, "truncated")
    check = check_table(native_store, uri)
    assert len(check.damaged) == 1
    repair_table(native_store, check, cfg.table_uri(FSCK_REPAIRS))
    assert not _rows(native_store, cfg, SHARD_TOPOLOGY)

    (refill,) = plan_decision_refills(native_store, cfg)
    assert not refill.unrebuilt and refill.rows.num_rows == 2
    assert refill_decisions(native_store, cfg, refill) is not None
    assert _rows(native_store, cfg, SHARD_TOPOLOGY) == before == _rows_by_delta_rs(cfg, SHARD_TOPOLOGY)
    assert routing.topology() == ShardTopology(16, (3, 11))
