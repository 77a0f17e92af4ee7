"""The native adapter's view of a table's Delta log: listed and read through the session's storage, replayed.

:class:`NativeLog` lists the log, replays it (from the newest checkpoint or an already replayed version) into
a :class:`~lakeshard.lake.protocol.log.LogState` per version, keeps the latest replayed states, and reads commits
with the timestamps Delta's time travel resolves against (:func:`commit_timestamps`). The protocol is
documented and identical on delta-spark and Databricks, so none of this depends on Delta's internal classes.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lakeshard.errors import TableNotFound, TableStoreError, UnsupportedByAdapter
from lakeshard.lake.base import log_range
from lakeshard.lake.protocol.log import (
    LogState,
    checkpoint_parts,
    commit_id_of,
    commit_versions,
    parse_commit,
    replay,
    state_from_checkpoint_rows,
    unhonoured_features,
    unsupported_features,
    v2_checkpoint_versions,
)
from lakeshard.lake.types import LogEntry

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakeshard.lake.native.files import LogFiles

__all__ = ["NativeLog", "commit_timestamps", "supported"]

# Replayed states kept (per table and version), the least recently replayed dropped first.
_STATE_CACHE = 64


def commit_timestamps(commits: Sequence[tuple[int, int, int | None]]) -> dict[int, datetime]:
    """Return each commit's timestamp as Delta's time travel sees it, from (version, file mtime, ICT) triples.

    With in-commit timestamps the commit's own timestamp counts; otherwise the commit file's modification
    time, raised to one millisecond past the previous commit's where clocks or copies made it go backwards
    (Delta's history manager does the same), so versions and timestamps stay in the same order.
    """
    out: dict[int, datetime] = {}
    previous: int | None = None
    for version, mtime, ict in sorted(commits):
        millis = ict if ict is not None else mtime
        if ict is None and previous is not None and millis <= previous:
            millis = previous + 1
        previous = millis
        out[version] = datetime.fromtimestamp(millis / 1000, tz=UTC)
    return out


def supported(uri: str, state: LogState, operation: str, *, write: bool = False) -> None:
    """Raise UnsupportedByAdapter when the table uses a feature that makes reading its files and log as plain
    Parquet and protocol JSON wrong, or (``write``) one lakeshard's commits cannot honour, naming the feature and
    how to switch it off."""
    found = unsupported_features(state)
    if found:
        raise UnsupportedByAdapter(
            f"{operation} on {uri}: the table uses {found}; the native adapter reads live files and the log "
            "as plain Parquet and protocol JSON, which these features make wrong. Rewrite the table without "
            "them (e.g. REORG TABLE ... APPLY (PURGE) and disable the feature) or read it with Delta directly"
        )
    unhonoured = unhonoured_features(state) if write else []
    if unhonoured:
        raise UnsupportedByAdapter(
            f"{operation} on {uri}: the table uses " + "; ".join(unhonoured) + ". lakeshard creates its tables "
            "with these off; switch them off on this table (as said) before lakeshard writes to it"
        )


class NativeLog:
    """A table's Delta log read through the session (its Hadoop filesystem or ``binaryFile``, checkpoints as
    Parquet), replayed states cached.

    Args:
        spark: the session whose Hadoop filesystem reaches the table (checkpoints are read with it).
        files: what lists and reads the log (:func:`~lakeshard.lake.native.files.log_files`).
    """

    def __init__(self, spark: SparkSession, files: LogFiles) -> None:
        self.spark = spark
        self._files = files
        # (table, version) -> (replayed state, modification time of that version's commit file)
        self._states: OrderedDict[tuple[str, int], tuple[LogState, int | None]] = OrderedDict()

    def listing(self, uri: str) -> list[tuple[str, str, int]]:
        return self._files.list_dir(f"{uri}/_delta_log")

    def exists(self, uri: str) -> bool:
        """Return whether a Delta table exists at ``uri`` (its log holds a commit or a checkpoint)."""
        try:
            self.latest(uri)
        except TableNotFound:
            return False
        return True

    def remove_uncommitted(self, uri: str) -> bool:
        """Remove the table's log folder when it holds nothing but empty folders and temporary commit files (what a
        creation killed before its first commit leaves); return whether it is gone."""
        return self._files.remove_uncommitted_log(f"{uri}/_delta_log")

    def latest(self, uri: str, listing: list[tuple[str, str, int]] | None = None) -> int:
        listing = self.listing(uri) if listing is None else listing
        commits = commit_versions(n for n, _, _ in listing)
        checkpoints = [v for v, parts in checkpoint_parts((n, loc) for n, loc, _ in listing).items() if parts]
        v2 = v2_checkpoint_versions(n for n, _, _ in listing)
        latest = max([*commits, *checkpoints, *v2], default=-1)
        if latest < 0:
            raise TableNotFound(f"no Delta table at {uri}")
        return latest

    def state(self, uri: str, version: int | None = None) -> LogState:
        """Return the table's state at ``version`` (latest by default), replayed from the log and cached."""
        listing = self.listing(uri)
        latest = self.latest(uri, listing)
        target = latest if version is None else version
        if target > latest or target < 0:
            raise TableStoreError(f"{uri}: no version {target} (the latest is {latest})")
        if v2_checkpoint_versions(n for n, _, _ in listing):
            raise UnsupportedByAdapter(
                f"{uri}: the table has V2 checkpoints (table feature v2Checkpoint, file actions in sidecar files); "
                "the native adapter replays classic checkpoints and commit files only. Read it with Delta directly"
            )
        mtimes = {n: m for n, _, m in listing}
        # A cached state is only reused while its commit file is the same one (a table dropped and
        # created again at the same location starts over at version 0 with new commit files).
        for key in [k for k in self._states if k[0] == uri]:
            if self._states[key][1] != mtimes.get(f"{key[1]:020d}.json"):
                del self._states[key]
        cached = self._states.get((uri, target))
        if cached is not None:
            return cached[0]
        names = {n: loc for n, loc, _ in listing}
        parts = checkpoint_parts((n, loc) for n, loc, _ in listing)
        checkpoint = max((v for v, p in parts.items() if p and v <= target), default=-1)
        # Start from the newest state already replayed between the checkpoint and the target, if any: a
        # writer asking after every commit replays one commit, not all of them since the checkpoint.
        cached_at = max((v for (u, v) in self._states if u == uri and checkpoint <= v <= target), default=None)
        base: LogState | None = None
        if cached_at is not None:
            base = self._states[(uri, cached_at)][0]
        elif checkpoint >= 0:
            base = state_from_checkpoint_rows(checkpoint, self.checkpoint_rows(parts[checkpoint]))
        start = 0 if base is None else base.version + 1
        for v in range(start, target + 1):
            if f"{v:020d}.json" not in names:
                raise TableStoreError(
                    f"{uri}: commit {v} is missing from the log and no checkpoint covers it; version {target} "
                    "cannot be reconstructed"
                )
        wanted = [names[f"{v:020d}.json"] for v in range(start, target + 1)]
        texts = self._files.read_texts(wanted)  # one read for all the commits since the base
        commits = [(v, parse_commit(texts[loc], v, table=uri)[1]) for v, loc in zip(range(start, target + 1), wanted,
                                                                            strict=True)]
        state = replay(commits, base=base)
        self._states[(uri, target)] = (state, mtimes.get(f"{target:020d}.json"))
        while len(self._states) > _STATE_CACHE:
            self._states.popitem(last=False)
        return state

    def checkpoint_rows(self, parts: Sequence[str]) -> list[dict[str, Any]]:
        from pyspark.sql import functions as F

        df = self.spark.read.parquet(*parts)
        cols = [c for c in ("add", "remove", "txn", "metaData", "protocol") if c in df.columns]
        # One JSON object per row, null actions left out: the same shape as a commit file's lines.
        return [json.loads(row[0]) for row in df.select(F.to_json(F.struct(*cols))).collect()]

    def find_commit(self, uri: str, after: int, commit_id: str) -> LogEntry | None:
        listing = {n: loc for n, loc, _ in self.listing(uri)}
        version = after + 1
        while (name := f"{version:020d}.json") in listing:
            entry, actions = parse_commit(self._files.read_text(listing[name]), version, table=uri)
            info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
            if commit_id_of(info) == commit_id:
                return entry
            version += 1
        return None

    def entries(self, uri: str, start: int | None, end: int | None) -> list[tuple[LogEntry, dict[str, Any]]]:
        """Return the commits ``start``..``end`` with their commitInfo, timestamps as Delta's time travel has them."""
        listing = self.listing(uri)
        latest = self.latest(uri, listing)
        locations = {n: (loc, mtime) for n, loc, mtime in listing}
        commits = commit_versions(locations)
        start, end = log_range(uri, commits, latest, start, end)
        wanted = [locations[f"{v:020d}.json"][0] for v in range(start, end + 1)]
        texts = self._files.read_texts(wanted)
        parsed = []
        for v, location in zip(range(start, end + 1), wanted, strict=True):
            entry, actions = parse_commit(texts[location], v, table=uri)
            parsed.append((entry, next((dict(a["commitInfo"]) for a in actions if "commitInfo" in a), {})))
        times = commit_timestamps([
            (e.version, locations[f"{e.version:020d}.json"][1],
             None if info.get("inCommitTimestamp") is None else int(info["inCommitTimestamp"]))
            for e, info in parsed])
        return [(replace(e, timestamp=times[e.version]), info) for e, info in parsed]
