"""Listing a landing zone with symbolic links: every real file once, dangling links named, cycles ended."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakeshard.landing.listing import list_landing_files, scan_landing


def _uri(path: Path) -> str:
    return "file://" + str(path)


@pytest.mark.timeout(60)
def test_a_link_cycle_ends_and_each_real_file_is_listed_once(tmp_path: Path) -> None:
    root = tmp_path / "landing"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "x.jsonl").write_text("{}\n")
    (root / "a" / "b" / "up").symlink_to(root)  # landing/a/b/up/a/b/up/... forever, if followed blindly
    (root / "again").symlink_to(root / "a")
    # Listed under its first name in path order ("a/b/x.jsonl" < "again/b/x.jsonl"), once.
    assert [f.path for f in list_landing_files(root)] == [_uri(root / "a" / "b" / "x.jsonl")]


def test_a_dangling_link_is_named_and_other_links_are_listed_by_their_target(tmp_path: Path) -> None:
    root = tmp_path / "landing"
    root.mkdir()
    (root / "real.jsonl").write_text("{}\n{}\n")
    (root / "link.jsonl").symlink_to(root / "real.jsonl")
    (root / "gone.jsonl").symlink_to(root / "missing.jsonl")
    (root / "_hidden.jsonl").symlink_to(root / "missing2.jsonl")  # skipped like any name starting with _
    scan = scan_landing(root)
    assert [(f.path, f.size_bytes, f.target) for f in scan.files] == [
        (_uri(root / "link.jsonl"), 6, _uri(root / "real.jsonl"))]
    assert scan.dangling == [_uri(root / "gone.jsonl")]
