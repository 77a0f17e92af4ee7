"""The routed feed of a writer's shards: what each shard consumed, and which routed files a step takes next.

:class:`RoutedFeed` owns a writer's view of its intake: the progress committed per shard (the app transaction
``writer/<shard>`` in ``events``) and what this writer last saw of it, the coalescing rule (wait while the
routed commits waiting are small and young), the memory gate (take routed commits up to
``dedupe.max_batch_bytes``), the new routed files of a step (read from the log between two versions) and the
expiry of routed files every shard has consumed, once ``dedupe.routed_expire_files`` of them are live. A shard
stopped on a damaged file (:meth:`RoutedFeed.stop`) takes no more intake in this writer; the others go on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from lakeshard.config import DedupeConfig
from lakeshard.errors import CommitConflict, DamagedDataFile, TableStoreError
from lakeshard.lake import BYTES_ADDED, CommitInfo, FileInfo, TableStore
from lakeshard.tables import FUSED_APP_ID, writer_app_id

__all__ = ["Intake", "RoutedFeed"]


@dataclass(frozen=True)
class Intake:
    """What one step consumes: the routed files of ``shards`` new up to ``routed_version``."""

    shards: tuple[int, ...]
    routed_version: int
    files: list[FileInfo]


class RoutedFeed:
    """The routed commits of ``shards`` not yet consumed into ``events``, taken a step at a time.

    ``before_commit`` is called with ``"routed-expiry"`` before consumed files are removed (the crash tests
    stop the process there).
    """

    def __init__(self, store: TableStore, shards: tuple[int, ...], *, routed_uri: str, events_uri: str,
                 dedupe: DedupeConfig, clock: Callable[[], datetime], before_commit: Callable[[str], None],
                 one_version_per_step: bool = False) -> None:
        self.store = store
        self.shards = shards
        self.routed_uri = routed_uri
        self.events_uri = events_uri
        # Driver-sized steps: a step past dedupe.arrow_max_bytes runs as Spark jobs, whose fixed cost (a JVM,
        # scheduling, a shuffle for the layout) dwarfs a few more commits; 0 (always Spark) keeps the big steps.
        self.max_batch_bytes = (min(dedupe.max_batch_bytes, dedupe.arrow_max_bytes) if dedupe.arrow_max_bytes > 0
                                else dedupe.max_batch_bytes)
        self.commit_min_bytes = dedupe.commit_min_bytes
        self.commit_max_wait_seconds = dedupe.commit_max_wait_seconds
        self.routed_expire_files = dedupe.routed_expire_files
        # Where a step's commit cannot be checked against the progress it read (Delta's public writer only skips a
        # version at or below the committed one), two writers of a shard must take the same intake from the same
        # progress, or one could commit a longer intake over the other's shorter one: one routed version a step.
        self.one_version_per_step = one_version_per_step
        self._clock = clock
        self._before_commit = before_commit
        self.deferred = 0  # steps that waited for more routed data to coalesce (next_intake(flush=False))
        self.conflicts = 0  # commit races lost to another writer of the same shards
        self._known_progress: dict[int, int] = {}  # what this writer last saw committed, per shard
        self._known_fused: int | None = None  # the newest fused batch plan this writer last saw in ``events``
        self._unchecked = 0  # routed files this writer consumed since it last counted the consumed live ones
        self.stopped: dict[int, DamagedDataFile] = {}  # shards that met a damaged file, and the file

    def stop(self, shard: int, damage: DamagedDataFile) -> None:
        """Take no more intake for ``shard`` in this writer: ``damage`` names the damaged file its steps need."""
        self.stopped[shard] = damage

    # ----------------------------------------------------------------------------------- progress
    def progress(self) -> dict[int, int]:
        """Return, per shard, the routed version whose events are committed (0 = none yet)."""
        done = self.store.transaction_versions(self.events_uri, [writer_app_id(s) for s in self.shards])
        return {s: done[writer_app_id(s)] or 0 for s in self.shards}

    def moved_by_others(self, progress: dict[int, int], fused: int | None = None) -> list[int]:
        """Return the shards whose committed ``progress`` differs from what this writer last saw: every shard when
        ``events``' fused batch plan (``fused``, :meth:`fused_progress`) moved, since a fused batch adds IDs to
        any shard."""
        if fused is not None and self._known_fused is not None and fused != self._known_fused:
            return list(self.shards)
        return [s for s in self.shards if self._known_progress.get(s, progress[s]) != progress[s]]

    def fused_progress(self) -> int:
        """Return the newest batch plan delivered to ``events`` by the fused hand-off (0 = none)."""
        return self.store.transaction_version(self.events_uri, FUSED_APP_ID) or 0

    def saw_fused(self, fused: int) -> None:
        """Take ``fused`` as the fused batch plan committed now."""
        self._known_fused = fused

    def committed_fused(self, batch: int) -> None:
        """This writer delivered batch plan ``batch`` by the fused hand-off."""
        self._known_fused = batch

    def saw(self, progress: dict[int, int]) -> None:
        """Take ``progress`` as what is committed now."""
        self._known_progress = dict(progress)

    def committed(self, shards: Sequence[int], routed_version: int) -> None:
        """This writer committed ``shards`` up to ``routed_version``."""
        for s in shards:
            self._known_progress[s] = routed_version

    def lost_race(self) -> None:
        """Another writer committed first: forget what this writer saw; the next step re-reads the progress."""
        self.conflicts += 1
        self._known_progress.clear()
        self._known_fused = None

    # ------------------------------------------------------------------------------------- intake
    def next_intake(self, progress: dict[int, int], *, flush: bool = True) -> Intake | None:
        """Return what the next step consumes, or None when every shard consumed every routed version — or,
        with ``flush=False``, while the routed commits waiting hold less than ``commit_min_bytes`` and the
        oldest of them is younger than ``commit_max_wait_seconds`` (counted in :attr:`deferred`)."""
        latest = self.store.version(self.routed_uri) if self.store.exists(self.routed_uri) else 0
        going = [s for s in self.shards if s not in self.stopped]
        if all(progress[s] >= latest for s in going):
            return None
        oldest = min(progress[s] for s in going)
        coalesce = not flush and self.commit_min_bytes > 0
        # The routed commits this step may take, read once for the coalescing rule and the memory gate.
        waiting = self._routed_commits(oldest, latest) if coalesce or latest - oldest > 1 else []
        if coalesce and self._coalescing(waiting):
            self.deferred += 1
            return None
        routed_version = self._intake_version(oldest, latest, waiting)
        todo = tuple(s for s in going if progress[s] < routed_version)
        return Intake(todo, routed_version, self._new_routed_files(todo, progress, routed_version))

    def _routed_commits(self, oldest: int, latest: int) -> list[CommitInfo]:
        """Return the routed commits after ``oldest`` up to ``latest``, oldest first."""
        found = self.store.history(self.routed_uri, limit=latest - oldest)
        return sorted((c for c in found if oldest < c.version <= latest), key=lambda c: c.version)

    def _coalescing(self, waiting: Sequence[CommitInfo]) -> bool:
        """Return whether the routed commits ``waiting`` should wait for more (see :meth:`next_intake`)."""
        pending = sum(int(c.custom_metadata.get(BYTES_ADDED, 0)) for c in waiting)
        first = min((c.timestamp for c in waiting), default=self._clock())
        return (pending < self.commit_min_bytes
                and (self._clock() - first).total_seconds() < self.commit_max_wait_seconds)

    def _intake_version(self, oldest: int, latest: int, waiting: Sequence[CommitInfo]) -> int:
        """Return the newest routed version this step consumes: the memory gate on intake.

        Routed commits after ``oldest`` (``waiting``) are taken in order while their bytes (all shards': an upper
        bound of this writer's share) stay within ``max_batch_bytes``; at least one is taken, however large.
        """
        if latest - oldest <= 1 or self.one_version_per_step:
            return oldest + 1
        sizes = {c.version: int(c.custom_metadata.get(BYTES_ADDED, 0)) for c in waiting}
        version, total = oldest + 1, sizes.get(oldest + 1, 0)
        while version < latest and total + sizes.get(version + 1, 0) <= self.max_batch_bytes:
            version += 1
            total += sizes.get(version, 0)
        return version

    def _new_routed_files(self, todo: Sequence[int], progress: dict[int, int], version: int) -> list[FileInfo]:
        """Return the routed files of ``todo`` live at ``version`` that were not live at each shard's progress.

        Read from the commits in between (the log's add and remove actions: cost grows with the new commits,
        not with the table); from two snapshots when the log no longer holds those commits.
        """
        oldest = min(progress[s] for s in todo)
        try:
            entries = self.store.log_entries(self.routed_uri, start=oldest + 1 if oldest else 0, end=version)
        except TableStoreError:
            return self._new_routed_files_by_snapshot(todo, progress, version)
        # One pass over the entries: each add goes to its shard's files when it is newer than the shard's progress.
        wanted = {str(s): s for s in todo}
        after = {s: progress[s] or -1 for s in todo}  # a shard that consumed nothing takes every entry
        live: dict[int, dict[str, FileInfo]] = {s: {} for s in todo}
        owner: dict[str, int] = {}  # path -> its shard (a remove may not repeat the partition values)
        for entry in entries:
            for change in entry.changes:
                path = change.file.path
                if change.action != "add":
                    if (gone := owner.pop(path, None)) is not None:
                        live[gone].pop(path, None)
                elif (shard := wanted.get(change.file.partition_values.get("shard") or "")) is not None \
                        and entry.version > after[shard]:
                    live[shard][path] = change.file
                    owner[path] = shard
        return [f for s in todo for f in live[s].values()]

    def _new_routed_files_by_snapshot(self, todo: Sequence[int], progress: dict[int, int],
                                      version: int) -> list[FileInfo]:
        """Return what :meth:`_new_routed_files` does, from the snapshot at ``version`` and one at each distinct
        progress version (each snapshot's files grouped by shard once)."""
        def by_shard(files: list[FileInfo]) -> dict[str, dict[str, FileInfo]]:
            grouped: dict[str, dict[str, FileInfo]] = {}
            for f in files:
                grouped.setdefault(f.partition_values.get("shard") or "", {})[f.path] = f
            return grouped

        latest = by_shard(self.store.files(self.routed_uri, version=version))
        seen: dict[int, dict[str, dict[str, FileInfo]]] = {}
        out: list[FileInfo] = []
        for shard in todo:
            done = progress[shard]
            if done and done not in seen:
                seen[done] = by_shard(self.store.files(self.routed_uri, version=done))
            before = seen[done].get(str(shard), {}) if done else {}
            out += [f for p, f in latest.get(str(shard), {}).items() if p not in before]
        return out

    # ------------------------------------------------------------------------------------- expiry
    def consumed(self, files: int) -> bool:
        """Count ``files`` routed files consumed by this writer; return whether that alone makes
        ``routed_expire_files`` since the consumed live files were last counted (a long run checks then)."""
        self._unchecked += files
        return bool(self.routed_expire_files) and self._unchecked >= self.routed_expire_files

    @property
    def unchecked(self) -> int:
        """How many routed files this writer consumed since it last counted the consumed live ones."""
        return self._unchecked

    def expire_if_due(self, progress: Callable[[], dict[int, int]]) -> int:
        """Remove the routed files these shards' committed ``progress`` has passed once at least
        ``routed_expire_files`` of them are live; return how many were removed (0 below that, or on a lost race).

        Counted from the table, not from what this writer consumed: a writer built for one short run (the ingest
        job builds one per run) expires what earlier runs consumed just as a long-lived writer does.
        """
        if not self.routed_expire_files:
            return 0
        return self.expire_routed(progress, at_least=self.routed_expire_files)

    def expire_routed(self, progress: Callable[[], dict[int, int]], *, at_least: int = 1) -> int:
        """Remove from ``routed`` the files of these shards that their committed ``progress`` (read when
        needed) has passed, when there are ``at_least`` of them; return how many (0 when fewer, or when a
        concurrent commit removed one of them first: expired next time).

        A routed file of shard ``s`` is consumed once ``writer/s`` in ``events`` reached a version at which the
        file was live: its rows are in ``events`` (or were dropped as duplicates, or dead-lettered). Those are
        the files live at the shard's progress version and still live now. Progress only moves forward, so a
        file consumed when progress was read stays consumed when the removal commits; a router appending at
        the same time does not conflict (blind appends), and every reader of ``routed`` asks only for files
        added after some shard's progress (the writers' log reads, the completionist's pending rows), which
        this never removes. The files stay on disk until ``routed`` is vacuumed.
        """
        self._unchecked = 0
        if not self.store.exists(self.routed_uri):
            return 0
        done = {str(shard): version for shard, version in progress().items() if version}
        if not done:
            return 0
        latest = self.store.version(self.routed_uri)
        live = self.store.files(self.routed_uri, version=latest)
        # A file live now was live at its shard's progress unless a commit after the progress added it: one read
        # of the log since the slowest shard, not one snapshot per progress version.
        try:
            added = self.store.added_since(self.routed_uri, min(done.values()), latest)
        except TableStoreError:
            return 0  # the log no longer holds those commits (log cleanup): nothing is removed
        doomed = sorted(f.path for f in live if (at := done.get(f.partition_values.get("shard") or "")) is not None
                        and added.get(f.path, 0) <= at)
        if not doomed or len(doomed) < at_least:
            return 0
        self._before_commit("routed-expiry")
        try:
            self.store.replace_files(self.routed_uri, doomed, None, data_change=True,
                                     metadata={"expired_consumed": len(doomed), "shards": list(self.shards)})
        except CommitConflict:
            return 0
        return len(doomed)
