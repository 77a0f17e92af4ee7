"""Compaction planners (Husky's hybrid LSM): pure functions from a table's files to merge tasks.

Data lives in buckets ``(tenant_id, hour)``; a task only ever merges files of one bucket.

* :class:`SizeTieredPlanner` — for fresh, small files (level 0, as writers flush them). Files fall into
  exponentially sized classes (tier ``k`` holds files of ``base_rows * growth**k`` rows and up); a tier
  merges only once it has ``min_files`` files, because merging lazily — a few dozen files at a time —
  costs an order of magnitude less CPU and storage calls than merging on arrival. In a bucket still
  receiving data the newest files (younger than ``settle_seconds``) wait unless ``include_open`` is set.
  A *sealed* bucket (closed by the completionist: no file will ever join it) does not wait for a tier to
  fill: all its small files merge in one task, since waiting can no longer save a later rewrite.
* :class:`LocalityPlanner` — for files already near target size (levels 1..n), which carry their sort-key
  range. On each level, files whose ranges overlap are merged into outputs disjoint in sort order; a level
  holding more than ``target_rows * growth**level`` rows is merged into the next one. Level capacity grows
  exponentially while files stay near ``target_rows``, so a higher level's files cover narrower key ranges
  — which is what makes the per-file pruning regexes selective. Outlier files (rows with values rare in
  their merge, :mod:`lakeshard.compaction.outliers`) form a second *lane* of a level: they overlap the
  regular files by design, so "disjoint" holds per (level, lane); a level's capacity counts both lanes,
  and an over-full level merges both lanes into the next one.

Both return :class:`CompactionTask` lists whose inputs never overlap; :func:`plan_compaction` runs both.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Literal

from lakeshard.compaction.errors import CompactionError
from lakeshard.compaction.sort_schema import SortKey
from lakeshard.tables import parse_hour

__all__ = [
    "Bucket",
    "CompactionPlan",
    "CompactionTask",
    "FileNode",
    "LocalityPlanner",
    "PlannerError",
    "SizeTieredPlanner",
    "bucket_end",
    "overlapping_groups",
    "plan_compaction",
]

Bucket = tuple[str, str]
"""``(tenant_id, hour)``; ``hour`` is ``YYYY-MM-DDTHH`` in UTC."""

TaskKind = Literal["size-tiered", "locality"]


class PlannerError(CompactionError):
    """A planner setting is out of range or a file description is inconsistent."""


@dataclass(frozen=True)
class FileNode:
    """What a planner knows about one data file.

    ``first_key``/``last_key`` are the sort keys of its first and last row (known for files compaction
    wrote; ``None`` for writer files, which then count as spanning every key). ``outlier`` marks an outlier
    output (its own lane of the level).
    """

    path: str
    bucket: Bucket
    rows: int
    size_bytes: int
    added: datetime
    level: int = 0
    first_key: SortKey | None = None
    last_key: SortKey | None = None
    outlier: bool = False

    def overlaps(self, other: FileNode) -> bool:
        """Return whether the two files' key ranges intersect (an unknown range intersects everything)."""
        if None in (self.first_key, self.last_key, other.first_key, other.last_key):
            return True
        assert self.first_key is not None and self.last_key is not None
        assert other.first_key is not None and other.last_key is not None
        return not (self.last_key < other.first_key or other.last_key < self.first_key)


@dataclass(frozen=True)
class CompactionTask:
    """Merge ``inputs`` (all of ``bucket``) into ``outputs`` files disjoint in sort order at ``output_level``.

    ``outliers``: every input is an outlier file, so every output is one too (the executor does not split
    such a merge again).
    """

    bucket: Bucket
    inputs: tuple[str, ...]
    rows: int
    size_bytes: int
    output_level: int
    target_rows: int
    kind: TaskKind
    reason: str = ""
    outliers: bool = False

    @property
    def outputs(self) -> int:
        """Return how many output files the merge aims for (each near ``target_rows``)."""
        return max(1, math.ceil(self.rows / self.target_rows))


def bucket_end(bucket: Bucket) -> datetime:
    """Return the end of a bucket's hour (UTC).

    Raises:
        PlannerError: the hour is not ``YYYY-MM-DDTHH``.
    """
    try:
        start = parse_hour(bucket[1])
    except ValueError:
        raise PlannerError(f"bucket {bucket}: hour must look like 2026-01-01T10, found {bucket[1]!r}") from None
    return start + timedelta(hours=1)


def _positive(name: str, value: float, minimum: float = 1) -> None:
    if value < minimum:
        raise PlannerError(f"{name} must be >= {minimum}, found {value}")


def _by_bucket(files: Iterable[FileNode]) -> dict[Bucket, list[FileNode]]:
    out: dict[Bucket, list[FileNode]] = defaultdict(list)
    seen: set[str] = set()
    for f in files:
        if f.path in seen:
            raise PlannerError(f"file {f.path} is listed twice")
        seen.add(f.path)
        out[f.bucket].append(f)
    return out


def _task(bucket: Bucket, files: Sequence[FileNode], level: int, target_rows: int, kind: TaskKind,
          reason: str) -> CompactionTask:
    ordered = sorted(files, key=lambda f: f.path)
    return CompactionTask(bucket, tuple(f.path for f in ordered), sum(f.rows for f in ordered),
                          sum(f.size_bytes for f in ordered), level, target_rows, kind, reason,
                          outliers=bool(ordered) and all(f.outlier for f in ordered))


@dataclass(frozen=True)
class SizeTieredPlanner:
    """Plans lazy merges of small level-0 files by size class (see the module docstring).

    Args:
        min_files: files a tier needs before it merges ("a few dozen").
        target_rows: rows an output file aims for; files at or above it are left alone.
        target_bytes: bytes an output aims for: a file at or above it is done too (wide rows).
        base_rows: rows of the smallest class's upper bound.
        growth: size ratio between consecutive classes.
        settle_seconds: in an open bucket, files younger than this are still arriving and wait.
        grace_seconds: a bucket counts as open until this long after its hour ends.
    """

    min_files: int = 32
    target_rows: int = 1_000_000
    target_bytes: int = 512 * 1024 * 1024
    base_rows: int = 4_096
    growth: int = 4
    settle_seconds: float = 300.0
    grace_seconds: float = 600.0

    def __post_init__(self) -> None:
        _positive("min_files", self.min_files, 2)
        _positive("target_rows", self.target_rows)
        _positive("target_bytes", self.target_bytes)
        _positive("base_rows", self.base_rows)
        _positive("growth", self.growth, 2)

    def tier(self, f: FileNode) -> int:
        """Return the size class of a file: 0 below ``base_rows``, then one more per factor ``growth``."""
        if f.rows < self.base_rows:
            return 0
        return 1 + int(math.log(f.rows / self.base_rows, self.growth))

    def is_open(self, bucket: Bucket, now: datetime) -> bool:
        """Return whether a bucket may still receive files: its hour plus the grace has not passed."""
        return now < bucket_end(bucket) + timedelta(seconds=self.grace_seconds)

    def plan(self, files: Iterable[FileNode], *, now: datetime, include_open: bool = False,
             sealed: Collection[Bucket] = ()) -> list[CompactionTask]:
        """Return one task per (bucket, tier) that has ``min_files`` settled small files, and one per sealed
        bucket that has two small files or more (all its tiers together)."""
        tasks = []
        for bucket, members in sorted(_by_bucket(files).items()):
            if bucket in sealed:
                small = [f for f in members if f.level == 0 and f.rows < self.target_rows
                         and f.size_bytes < self.target_bytes]
                if len(small) >= 2:
                    rows = sum(f.rows for f in small)
                    level = 1 if rows >= self.target_rows // self.growth else 0
                    tasks.append(_task(bucket, small, level, self.target_rows, "size-tiered",
                                       f"sealed bucket: its {len(small)} small files merge now"))
                continue
            settle = now - timedelta(seconds=self.settle_seconds)
            open_bucket = self.is_open(bucket, now) and not include_open
            tiers: dict[int, list[FileNode]] = defaultdict(list)
            for f in members:
                if f.level != 0 or f.rows >= self.target_rows or f.size_bytes >= self.target_bytes:
                    continue
                if open_bucket and f.added > settle:
                    continue  # still arriving: wait for its neighbours
                tiers[self.tier(f)].append(f)
            for tier, group in sorted(tiers.items()):
                if len(group) >= self.min_files:
                    rows = sum(f.rows for f in group)
                    # Outputs of a full-size class enter the locality levels; smaller ones climb a tier.
                    level = 1 if rows >= self.target_rows // self.growth else 0
                    tasks.append(_task(bucket, group, level, self.target_rows, "size-tiered",
                                       f"tier {tier}: {len(group)} files >= {self.min_files}"))
        return tasks


@dataclass(frozen=True)
class LocalityPlanner:
    """Plans leveled merges of sorted files on levels 1..``max_level`` (see the module docstring).

    Args:
        target_rows: rows per output file.
        growth: level ``k`` holds at most ``target_rows * growth**k`` rows before it merges into ``k+1``.
        max_level: the last level; it grows without bound.
    """

    target_rows: int = 1_000_000
    growth: int = 4
    max_level: int = 4

    def __post_init__(self) -> None:
        _positive("target_rows", self.target_rows)
        _positive("growth", self.growth, 2)
        _positive("max_level", self.max_level)

    def level_limit(self, level: int) -> int:
        """Return the rows level ``level`` holds before it merges into the next level."""
        return int(self.target_rows * self.growth ** level)

    def level_for(self, rows: int) -> int:
        """Return the lowest level (>= 1) that holds ``rows`` rows without overflowing into the next one."""
        level = 1
        while level < self.max_level and rows > self.level_limit(level):
            level += 1
        return level

    def plan(self, files: Iterable[FileNode]) -> list[CompactionTask]:
        """Return merges of overlapping files within a level and lane, then of over-full levels into the next."""
        tasks = []
        for bucket, members in sorted(_by_bucket(files).items()):
            used: set[str] = set()
            levels: dict[int, list[FileNode]] = defaultdict(list)
            for f in members:
                if f.level >= 1:
                    levels[min(f.level, self.max_level)].append(f)
            for level in sorted(levels):
                for lane in (False, True):
                    free = [f for f in levels[level] if f.path not in used and f.outlier == lane]
                    for group in overlapping_groups(free):
                        if len(group) > 1:
                            kind = "outlier files" if lane else "files"
                            tasks.append(_task(bucket, group, level, self.target_rows, "locality",
                                               f"L{level}: {len(group)} {kind} overlap in sort order"))
                            used.update(f.path for f in group)
                free = [f for f in levels[level] if f.path not in used]
                rows = sum(f.rows for f in levels[level])
                if level < self.max_level and free and rows > self.level_limit(level):
                    below = [f for f in levels.get(level + 1, []) if f.path not in used
                             and any(f.overlaps(g) for g in free)]
                    group = free + below
                    tasks.append(_task(bucket, group, level + 1, self.target_rows, "locality",
                                       f"L{level} holds {rows} rows > {self.level_limit(level)}: merge into "
                                       f"L{level + 1}"))
                    used.update(f.path for f in group)
        return tasks


def overlapping_groups(files: Sequence[FileNode]) -> list[list[FileNode]]:
    """Return the files grouped into connected components of "key ranges overlap" (sweep by first key)."""
    known = sorted((f for f in files if f.first_key is not None and f.last_key is not None),
                   key=lambda f: (f.first_key, f.last_key, f.path))
    unknown = [f for f in files if f.first_key is None or f.last_key is None]
    groups: list[list[FileNode]] = []
    reach: SortKey | None = None
    for f in known:
        assert f.first_key is not None and f.last_key is not None
        if groups and reach is not None and f.first_key <= reach:
            groups[-1].append(f)
            reach = max(reach, f.last_key)
        else:
            groups.append([f])
            reach = f.last_key
    if unknown:
        # A file without a known range may overlap anything: it joins everything into one group.
        return [[f for g in groups for f in g] + unknown]
    return groups


@dataclass(frozen=True)
class CompactionPlan:
    """The tasks for a table, size-tiered first, and the files no task touches."""

    tasks: tuple[CompactionTask, ...]
    untouched: tuple[str, ...] = field(default=())
    skipped: str = ""  # why nothing merges ("" when some task does)

    @property
    def buckets(self) -> set[Bucket]:
        """Return the buckets some task compacts."""
        return {t.bucket for t in self.tasks}


def plan_compaction(files: Sequence[FileNode], *, now: datetime, size_tiered: SizeTieredPlanner | None = None,
                    locality: LocalityPlanner | None = None, include_open: bool = False,
                    sealed: Collection[Bucket] = ()) -> CompactionPlan:
    """Return size-tiered tasks for level-0 files and locality tasks for the levels, never sharing a file.

    ``sealed``: buckets that receive no more files; their small files merge without waiting for a tier.
    """
    size_tiered = size_tiered or SizeTieredPlanner()
    locality = locality or LocalityPlanner(target_rows=size_tiered.target_rows)
    # A full-size tiered merge enters the level that fits its rows, so it is not rewritten again at once
    # only to climb levels.
    tiered = [t if t.output_level == 0 else replace(t, output_level=locality.level_for(t.rows))
              for t in size_tiered.plan(files, now=now, include_open=include_open, sealed=sealed)]
    leveled = locality.plan(files)
    tasks = [*tiered, *leveled]
    used = {p for t in tasks for p in t.inputs}
    if len(used) != sum(len(t.inputs) for t in tasks):
        raise PlannerError("planners chose one file for two tasks")  # a bug, never bad input
    untouched = tuple(sorted(f.path for f in files if f.path not in used))
    return CompactionPlan(tuple(tasks), untouched, "" if tasks else _why_nothing(files, size_tiered, sealed))


def _why_nothing(files: Sequence[FileNode], size_tiered: SizeTieredPlanner, sealed: Collection[Bucket]) -> str:
    """Return why no task merges any of ``files``: the buckets seen, the closed ones, the fullest bucket."""
    by_bucket = _by_bucket(files)
    if not by_bucket:
        return "no live files"
    small = {b: sum(1 for f in fs if f.level == 0 and f.rows < size_tiered.target_rows) for b, fs in by_bucket.items()}
    closed = [b for b in by_bucket if b in sealed]
    fullest = max(small, key=lambda b: small[b])
    return (f"no closed bucket with 2 small files or more ({len(closed)} of {len(by_bucket)} buckets closed) and no "
            f"open bucket with {size_tiered.min_files} settled small files in one size tier (most small files: "
            f"{small[fullest]} in {fullest[0]}/{fullest[1]}); no level overlaps or is over capacity")
