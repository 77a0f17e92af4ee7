"""What the router consumed of each landing file: a look at the zone reads the batch plans of the files it lists,
not every plan ever committed, and stays exactly once when files leave the zone and come back."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakeshard.config import LakeshardConfig, load_config
from lakeshard.lake import TableStore
from lakeshard.maintenance import compact_bookkeeping
from lakeshard.routing.router import Router
from lakeshard.tables import LANDING_BATCHES, ROUTED


def _cfg(tmp_path: Path) -> LakeshardConfig:
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": str(tmp_path / "landing"),
                                 "routing": {"total_shards": 4, "default_shard_count": 1,
                                             "arrow_max_bytes": 1 << 30}}, env={})
    return replace(cfg, maintenance=replace(cfg.maintenance, bookkeeping_row_group_rows=4))


def _landing_file(landing: Path, i: int) -> Path:
    path = landing / f"f{i:03d}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"tenant_id": f"t{i % 3}", "event_id": f"e{i}", "ts": "2026-01-01T10:00:00Z"}) + "\n")
    return path


def _routed_history(store: TableStore, cfg: LakeshardConfig, tmp_path: Path, files: int) -> Path:
    """Route ``files`` one-line files two per batch, compact the plans into one file, then move all but the
    first two out of the zone (as a lifecycle rule would); return where they went."""
    landing, archive = Path(cfg.landing), tmp_path / "archive"
    for i in range(files):
        _landing_file(landing, i)
    assert len(Router(None, store, cfg, max_batch_files=2).run()) == files // 2
    compact_bookkeeping(store, cfg, tables=(LANDING_BATCHES,), max_files=1)
    assert len(store.files(cfg.table_uri(LANDING_BATCHES))) == 1
    archive.mkdir()
    for i in range(2, files):
        shutil.move(landing / f"f{i:03d}.jsonl", archive / f"f{i:03d}.jsonl")
    return archive


def test_a_first_look_decodes_only_the_plans_of_the_files_the_zone_lists(
        spark: SparkSession, store: TableStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        decoded: list[int]) -> None:
    """A job process starts per run: its first look at the zone read every plan ever committed, a row per file
    the zone ever held, however few it holds now."""
    cfg = _cfg(tmp_path)
    _routed_history(store, cfg, tmp_path, files=40)
    _landing_file(Path(cfg.landing), 40)
    plans = cfg.table_uri(LANDING_BATCHES)

    returned: list[int] = []
    real_read = store.read_arrow

    def counted_read(table, *args, **kwargs):  # type: ignore[no-untyped-def]
        rows = real_read(table, *args, **kwargs)
        if table == plans:
            returned.append(rows.num_rows)
        return rows

    monkeypatch.setattr(store, "read_arrow", counted_read)
    decoded.clear()
    report = Router(None, store, cfg).route_once()
    monkeypatch.undo()

    assert report is not None and report.files == 1, "only the new file is routed"
    assert returned and returned[0] <= 2, f"{returned[0]} plan rows read for a zone of 3 files (40 routed)"
    assert 0 < decoded[0] <= 8, f"{decoded[0]} plan rows decoded for 2 routed files (row groups of 4)"


def test_a_file_that_leaves_the_zone_and_comes_back_is_not_routed_again(
        spark: SparkSession, store: TableStore, tmp_path: Path) -> None:
    """A router keeps the entries of the files it listed; one that reappears later in its life (moved back, a new
    link to it) was not listed at its first look, and its entry must still be found."""
    cfg = _cfg(tmp_path)
    archive = _routed_history(store, cfg, tmp_path, files=10)
    router = Router(None, store, cfg)
    assert router.route_once() is None  # the two files left are routed already
    shutil.move(archive / "f005.jsonl", Path(cfg.landing) / "f005.jsonl")
    _landing_file(Path(cfg.landing), 10)
    report = router.route_once()
    assert report is not None and report.files == 1 and report.records == 1
    assert router.route_once() is None
    routed = store.read_table_arrow(cfg.table_uri(ROUTED), ["event_id"]).column("event_id").to_pylist()
    assert sorted(routed) == sorted(f"e{i}" for i in range(11))


def test_plans_another_router_commits_and_compact_books_merges_between_two_looks_are_seen(
        spark: SparkSession, store: TableStore, tmp_path: Path) -> None:
    """A router's kept entries catch up with the plans committed since its last look, also when compact_books has
    already merged those plans into a new file (a data_change=False swap)."""
    cfg = _cfg(tmp_path)
    _routed_history(store, cfg, tmp_path, files=6)
    mine = Router(None, store, cfg)
    assert mine.route_once() is None
    _landing_file(Path(cfg.landing), 6)
    other = Router(None, store, cfg).route_once()
    assert other is not None and other.files == 1
    assert mine.route_once() is None, "a plan committed by another router is routed again"
    _landing_file(Path(cfg.landing), 7)
    assert Router(None, store, cfg).route_once() is not None
    compact_bookkeeping(store, cfg, tables=(LANDING_BATCHES,), max_files=1)
    assert mine.route_once() is None, "a plan merged by compact_books since the last look is routed again"
    routed = store.read_table_arrow(cfg.table_uri(ROUTED), ["event_id"]).column("event_id").to_pylist()
    assert sorted(routed) == sorted(f"e{i}" for i in range(8))
