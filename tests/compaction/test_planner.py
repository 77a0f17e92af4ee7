"""Planners: never mix buckets, never lose or duplicate a file, lazy tiers, disjoint levels at the fixed point."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeshard.compaction.planner import (
    CompactionTask,
    FileNode,
    LocalityPlanner,
    PlannerError,
    SizeTieredPlanner,
    overlapping_groups,
    plan_compaction,
)
from lakeshard.compaction.sort_schema import key_of

NOW = datetime(2026, 1, 2, 12, 0, tzinfo=UTC)
_BUCKETS = [("t1", "2026-01-01T10"), ("t1", "2026-01-02T11"), ("t2", "2026-01-01T10"), ("t2", "2026-01-02T12")]
_SERVICES = ["api", "auth", "billing", "cart", "db", "etl", "web"]


_file = st.tuples(st.sampled_from([0, 0, 0, 1, 2, 3]), st.sampled_from(_BUCKETS), st.integers(1, 3_000),
                  st.integers(0, 3_600), st.sampled_from(_SERVICES), st.sampled_from(_SERVICES), st.booleans(),
                  st.sampled_from([False, False, False, True]))


def _node(i: int, level: int, bucket: tuple[str, str], rows: int, age: int, a: str, b: str, ranged: bool,
          outlier: bool) -> FileNode:
    a, b = min(a, b), max(a, b)
    ranged = ranged and level > 0
    return FileNode(f"f{i}.parquet", bucket, rows, rows * 3, NOW - timedelta(seconds=age), level,
                    key_of([a, "info", None, "x"]) if ranged else None,
                    key_of([b, "warn", "prod", "y"]) if ranged else None, outlier=outlier and ranged)


_files = st.lists(_file, max_size=40).map(lambda rows: [_node(i, *r) for i, r in enumerate(rows)])

_tiered = SizeTieredPlanner(min_files=3, target_rows=2_000, base_rows=64, growth=2, settle_seconds=600)
_leveled = LocalityPlanner(target_rows=2_000, growth=2, max_level=3)


def _check_partition(files: list[FileNode], tasks: tuple[CompactionTask, ...], untouched: tuple[str, ...]) -> None:
    by_path = {f.path: f for f in files}
    chosen = [p for t in tasks for p in t.inputs]
    assert len(chosen) == len(set(chosen)), "a file is in two tasks"
    assert set(chosen) | set(untouched) == set(by_path), "a file was lost"
    assert not set(chosen) & set(untouched)
    for t in tasks:
        assert {by_path[p].bucket for p in t.inputs} == {t.bucket}, "a task mixes buckets"
        assert t.rows == sum(by_path[p].rows for p in t.inputs)
        assert len(t.inputs) >= 1


@settings(max_examples=150)
@given(files=_files, include_open=st.booleans(), sealed=st.sets(st.sampled_from(_BUCKETS)))
def test_plans_never_mix_buckets_lose_or_duplicate_files(files: list[FileNode], include_open: bool,
                                                         sealed: set[tuple[str, str]]) -> None:
    """Every file is in at most one task or untouched, and each task stays inside one bucket."""
    plan = plan_compaction(files, now=NOW, size_tiered=_tiered, locality=_leveled, include_open=include_open,
                           sealed=sealed)
    _check_partition(files, plan.tasks, plan.untouched)
    for bucket in sealed:  # a sealed bucket keeps at most one small level-0 file out of its merge
        small = [f for f in files if f.bucket == bucket and f.level == 0 and f.rows < _tiered.target_rows]
        merged = {p for t in plan.tasks if t.bucket == bucket for p in t.inputs}
        assert len([f for f in small if f.path not in merged]) == (1 if len(small) == 1 else 0)


def test_a_sealed_bucket_merges_its_small_files_without_waiting_for_a_tier() -> None:
    """Two files of different classes wait in an open-for-writes bucket; once sealed they merge together."""
    old = NOW - timedelta(hours=5)
    bucket = ("t1", "2026-01-01T10")
    files = [FileNode("s0", bucket, 50, 500, old), FileNode("b0", bucket, 500, 5_000, old),
             FileNode("full", bucket, 2_000, 20_000, old)]
    assert _tiered.plan(files, now=NOW) == []
    tasks = _tiered.plan(files, now=NOW, sealed={bucket})
    assert [sorted(t.inputs) for t in tasks] == [["b0", "s0"]]  # the full-size file stays as it is
    assert "sealed" in tasks[0].reason
    assert _tiered.plan(files[:1], now=NOW, sealed={bucket}) == []  # one small file: nothing to merge


@settings(max_examples=150)
@given(files=_files)
def test_open_buckets_keep_their_newest_files_unless_asked(files: list[FileNode]) -> None:
    """Without include_open, no size-tiered task in an open bucket takes a file younger than settle_seconds."""
    for task in _tiered.plan(files, now=NOW):
        if _tiered.is_open(task.bucket, NOW):
            young = [f for f in files if f.path in task.inputs and f.added > NOW - timedelta(seconds=600)]
            assert not young


def test_size_tiering_is_lazy_and_groups_by_class() -> None:
    """Two files of a class wait; the third triggers a merge of that class only, not of the bigger class."""
    old = NOW - timedelta(hours=5)
    bucket = ("t1", "2026-01-01T10")
    small = [FileNode(f"s{i}", bucket, 50, 500, old) for i in range(2)]
    big = [FileNode(f"b{i}", bucket, 500, 5_000, old) for i in range(3)]
    assert _tiered.plan([*small, *big[:2]], now=NOW) == []
    tasks = _tiered.plan([*small, FileNode("s2", bucket, 60, 600, old), *big[:2]], now=NOW)
    assert [sorted(t.inputs) for t in tasks] == [["s0", "s1", "s2"]]
    assert tasks[0].output_level == 0  # 160 rows stay small: they climb a tier, not into the levels
    tasks = _tiered.plan(big, now=NOW)
    assert tasks[0].output_level == 1 and tasks[0].outputs == 1


def test_open_bucket_waits_for_arriving_files_unless_asked() -> None:
    """Files of the current hour that just arrived are skipped; include_open takes them."""
    bucket = ("t1", "2026-01-02T12")
    files = [FileNode(f"n{i}", bucket, 10, 100, NOW - timedelta(seconds=5)) for i in range(5)]
    assert _tiered.plan(files, now=NOW) == []
    assert len(_tiered.plan(files, now=NOW, include_open=True)) == 1


def _apply(files: list[FileNode], tasks: tuple[CompactionTask, ...], step: int) -> list[FileNode]:
    """Simulate the executor: each task's rows become one file at its output level spanning the inputs' range;
    a big merge also writes an outlier file over the same range; outlier-only merges write an outlier file."""
    by_path = {f.path: f for f in files}
    chosen = {p for t in tasks for p in t.inputs}
    out = [f for f in files if f.path not in chosen]
    for n, t in enumerate(tasks):
        inputs = [by_path[p] for p in t.inputs]
        assert t.outliers == all(f.outlier for f in inputs)
        known = all(f.first_key and f.last_key for f in inputs)
        lo = min(f.first_key for f in inputs if f.first_key) if known else key_of(["a"])
        hi = max(f.last_key for f in inputs if f.last_key) if known else key_of(["z"])
        out.append(FileNode(f"s{step}-{n}", t.bucket, t.rows, 1, NOW, t.output_level, lo, hi, outlier=t.outliers))
        if not t.outliers and t.output_level >= 1 and t.rows > 2 * t.target_rows:
            out.append(FileNode(f"s{step}-{n}-outliers", t.bucket, 1, 1, NOW, t.output_level, lo, hi, outlier=True))
    return out


@settings(max_examples=100)
@given(files=_files)
def test_repeated_locality_rounds_end_with_disjoint_levels(files: list[FileNode]) -> None:
    """Applying plans until none is left ends with no two files of one bucket, level and lane overlapping."""
    current = [f for f in files if f.level > 0]
    for step in range(30):
        plan = _leveled.plan(current)
        if not plan:
            break
        _check_partition(current, tuple(plan), tuple(f.path for f in current
                                                     if f.path not in {p for t in plan for p in t.inputs}))
        current = _apply(current, tuple(plan), step)
    else:
        pytest.fail("locality planning did not reach a fixed point in 30 rounds")
    for f in current:
        for g in current:
            if (f.path < g.path and f.bucket == g.bucket and min(f.level, 3) == min(g.level, 3)
                    and f.outlier == g.outlier):
                assert not f.overlaps(g), (f, g)


def test_overlapping_groups_are_connected_components() -> None:
    """a-c and b-d overlap (one group), e-f stands alone; an unknown range joins everything."""
    b = ("t", "2026-01-01T00")

    def node(p: str, lo: str, hi: str | None) -> FileNode:
        return FileNode(p, b, 1, 1, NOW, 1, key_of([lo]) if hi else None, key_of([hi]) if hi else None)

    groups = overlapping_groups([node("1", "a", "c"), node("2", "b", "d"), node("3", "e", "f")])
    assert [[f.path for f in g] for g in groups] == [["1", "2"], ["3"]]
    assert len(overlapping_groups([node("1", "a", "c"), node("3", "e", "f"), node("4", "x", None)])) == 1


def test_bad_settings_and_inputs_are_named() -> None:
    """Out-of-range settings, a duplicated file and a malformed hour raise PlannerError saying which."""
    with pytest.raises(PlannerError, match="min_files must be >= 2"):
        SizeTieredPlanner(min_files=1)
    with pytest.raises(PlannerError, match="growth must be >= 2"):
        LocalityPlanner(growth=1)
    f = FileNode("x", ("t", "2026-01-01T00"), 1, 1, NOW)
    with pytest.raises(PlannerError, match="listed twice"):
        _tiered.plan([f, f], now=NOW)
    with pytest.raises(PlannerError, match="hour must look like"):
        _tiered.plan([FileNode("y", ("t", "yesterday"), 1, 1, NOW)], now=NOW)


def test_full_size_tiered_merges_enter_the_level_that_fits_them() -> None:
    """A tiered merge too big for L1 lands on L2 at once instead of being rewritten again to climb."""
    old = NOW - timedelta(hours=5)
    files = [FileNode(f"b{i}", ("t1", "2026-01-01T10"), 1_000, 5_000, old) for i in range(6)]
    plan = plan_compaction(files, now=NOW, size_tiered=_tiered, locality=_leveled)
    assert [t.output_level for t in plan.tasks] == [2]  # 6,000 rows > L1's 4,000, <= L2's 8,000
    assert _leveled.level_for(1) == 1 and _leveled.level_for(10**9) == _leveled.max_level


def test_outlier_files_are_their_own_lane_of_a_level() -> None:
    """An outlier file spanning the regular files of its level does not make them merge; two overlapping
    outlier files merge with each other only, as an outlier-only task; an over-full level takes both lanes."""
    b = ("t", "2026-01-01T00")

    def node(p: str, lo: str, hi: str, *, outlier: bool = False, rows: int = 1_000) -> FileNode:
        return FileNode(p, b, rows, 1, NOW, 1, key_of([lo]), key_of([hi]), outlier=outlier)

    regular = [node("r1", "a", "c"), node("r2", "d", "f")]
    assert _leveled.plan([*regular, node("o1", "a", "f", outlier=True)]) == []
    tasks = _leveled.plan([*regular, node("o1", "a", "e", outlier=True), node("o2", "b", "f", outlier=True)])
    assert [(sorted(t.inputs), t.outliers, t.output_level) for t in tasks] == [(["o1", "o2"], True, 1)]
    full = [node("r1", "a", "c", rows=3_000), node("r2", "d", "f", rows=3_000), node("o1", "a", "f", outlier=True)]
    tasks = _leveled.plan(full)  # L1 holds 7,000 rows > 4,000: both lanes go to L2, split again there
    assert [(sorted(t.inputs), t.outliers, t.output_level) for t in tasks] == [(["o1", "r1", "r2"], False, 2)]
