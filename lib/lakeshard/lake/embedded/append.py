"""Blind appends the embedded adapter commits itself: one commit file, put-if-absent, no delta-rs snapshot.

Also here: a table's creation made put-if-absent (:func:`create_once`).

delta-rs 1.6.6 prepares every commit on a snapshot, and bringing that snapshot up to date after the commit costs
time linear in the table's live files, as does the commit itself (about 1.3 ms per 1,000 live files each,
measured by ``bench/bench_append_files.py``). ``events`` gains a file per tenant and hour, so an ingest run that
appends to it slowed down with the lakehouse's age, not with what it wrote.

An append that removes nothing (a writer step, a fence, a bookkeeping row) needs none of that. Its commit is the
JSON lines the Delta protocol defines (``commitInfo``, the ``txn`` actions, the ``add`` actions), written as the
next version's commit file with a put-if-absent (a hard link: fails if the name exists, on every POSIX file
system). When another commit took that version first, it is read and checked the way delta-rs' conflict checker
checks an append (prepared as having read the whole table, write-serializable): a winner that carries one of this
commit's app ids, changes the table's metadata or protocol, or removes files with ``dataChange`` (a replacement
or delete; a compaction's rearrangement does not count) is a conflict; any other winner is passed and the next
version tried. Every 100th version (the table's
``delta.checkpointInterval``) delta-rs writes the checkpoint, as its post-commit hook would.

Only where this is the whole job: a local file system (an object store needs its own conditional put, so its
commits stay with delta-rs), and a table whose writer protocol asks nothing more of an append (writer version 2
or lower, no column invariants, no CHECK constraints, no feature :func:`unsupported_features` names). Any other
table is appended to by delta-rs, as before.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import pyarrow.fs as pafs
from deltalake.transaction import AddAction

from lakeshard import __version__
from lakeshard.errors import CommitConflict, TableStoreError
from lakeshard.lake.base import all_committed, now_ms, txn_text
from lakeshard.lake.embedded.write import (
    CREATE_STAGING_PREFIX,
    LINK_PROBE_PREFIX,
    STAGED_COMMIT_PREFIX,
    TableShape,
    delete_tree,
)
from lakeshard.lake.protocol.filesystem import filesystem
from lakeshard.lake.protocol.log import COMMIT_ID, LogState, txn_action, unsupported_features
from lakeshard.lake.trace import COMMIT, hold, phase
from lakeshard.lake.types import BYTES_ADDED, ROWS_ADDED, AppTransaction, CommitResult

__all__ = ["ENGINE", "appendable", "commit_append", "create_once", "links_work", "log_path"]

ENGINE = f"lakeshard-{__version__} (blind append)"
"""The ``engineInfo`` and ``clientVersion`` of the commits this module writes."""

# Characters delta-rs leaves as they are when it writes a path into the log (besides letters, digits and "_.-~",
# which quote never encodes); it percent-encodes every other byte of the UTF-8 path.
_PATH_SAFE = "/!$&'()+,:;=@"
_DEFAULT_CHECKPOINT_INTERVAL = 100


def log_path(path: str) -> str:
    """Return a data file's path relative to the table as delta-rs writes it into an ``add`` action.

    Raises:
        TableStoreError: the path is not valid Unicode text (a lone surrogate), which no Delta log can hold.
    """
    try:
        return quote(path, safe=_PATH_SAFE, encoding="utf-8", errors="strict")
    except UnicodeEncodeError:
        raise TableStoreError(f"the data file path {path!r} is not valid Unicode text") from None


def appendable(uri: str, state: LogState) -> bool:
    """Return whether an append to this table can be committed by :func:`commit_append` (else: by delta-rs)."""
    if state.version < 0 or not links_work(uri):
        return False
    protocol, config = state.protocol, dict(state.metadata.get("configuration") or {})
    return (int(protocol.get("minWriterVersion", 7)) <= 2
            and "delta.invariants" not in str(state.metadata.get("schemaString", ""))
            and not any(k.startswith("delta.constraints.") for k in config)
            and not unsupported_features(state))


def commit_append(
    uri: str,
    state: LogState,
    *,
    read_version: int | None,
    write_adds: Callable[[TableShape], tuple[list[AddAction], int, str | None]],
    app_transactions: Sequence[AppTransaction],
    custom: Mapping[str, str],
    fence: bool,
    operation: str,
    latest: Callable[[], LogState],
    checkpoint: Callable[[int], None],
) -> CommitResult:
    """Append the files ``write_adds`` writes in one commit carrying ``app_transactions`` and ``custom`` metadata.

    ``state`` is the table's latest state and must be :func:`appendable`; the commit is prepared at
    ``read_version`` (None: that latest version). The rules are the store's ``append`` and ``fence``: a batch whose
    app transactions are all committed is skipped (nothing written), a conflicting concurrent commit raises
    :class:`CommitConflict` and deletes the files written. ``latest()`` gives the table's state after a lost race,
    ``checkpoint(version)`` writes a checkpoint once a commit lands on a checkpoint version.
    """
    ids = tuple(t.app_id for t in app_transactions)
    if app_transactions and not fence and all_committed(uri, state.version, app_transactions, state.app_versions):
        return CommitResult(uri, state.version, skipped=True,
                            reason=f"app transactions {txn_text(app_transactions)} already committed")
    base = state.version if read_version is None else read_version
    if base > state.version:
        raise TableStoreError(f"{uri}: cannot prepare a commit at version {base}: the latest is {state.version}")
    adds, rows, write_dir = write_adds(TableShape.of_state(uri, state))
    millis = now_ms()
    info: dict[str, Any] = {
        "timestamp": millis,
        "operation": "WRITE",
        "operationParameters": {"mode": "Append", "partitionBy": json.dumps(state.partition_columns)},
        "engineInfo": ENGINE,
        "clientVersion": ENGINE,
        "isBlindAppend": True,
        **custom,
        COMMIT_ID: uuid.uuid4().hex,
        ROWS_ADDED: str(rows),
        BYTES_ADDED: str(sum(a.size for a in adds)),
    }
    lines = [{"commitInfo": info}, *(txn_action(t, millis=millis) for t in app_transactions),
             *({"add": _add(a)} for a in adds)]
    try:
        with phase(COMMIT, uri):
            version = _put_next(uri, base, lines, set(ids))
    except _LostRace as lost:
        if write_dir is not None:
            delete_tree(write_dir)
        now = latest()
        if app_transactions and not fence and all_committed(uri, now.version, app_transactions, now.app_versions):
            return CommitResult(uri, now.version, skipped=True,
                                reason=f"app transactions {txn_text(app_transactions)} committed concurrently")
        raise CommitConflict(uri, base, ids, str(lost)) from None
    interval = int(dict(state.metadata.get("configuration") or {}).get("delta.checkpointInterval")
                   or _DEFAULT_CHECKPOINT_INTERVAL)
    if version % interval == 0:
        checkpoint(version)
    return CommitResult(uri, version, files_added=len(adds), rows_added=rows, bytes_added=sum(a.size for a in adds),
                        reason=operation)


def links_work(uri: str) -> bool:
    """Return whether the table is on a local file system that makes hard links (the put-if-absent used here)."""
    fs, root = filesystem(uri)
    return isinstance(fs, pafs.LocalFileSystem) and _links_work(os.path.join(root, "_delta_log"))


def create_once(uri: str, create: Callable[[str], object]) -> bool:
    """Create the table with a put-if-absent first commit; return False (nothing changed) if one is there already.

    ``create(location)`` creates the table in a staging directory inside the table's (hidden: its name starts with
    ``_``, which Delta readers skip); that commit 0 is linked into place and the directory deleted. delta-rs 1.6.6
    retries a ``CREATE TABLE`` that lost the race for version 0 as version 1: a second ``metaData`` with a new
    table id, which every commit prepared at version 0 then conflicts with (four writers starting on a new
    lakehouse did that in most tries).
    """
    _, root = filesystem(uri)
    log = os.path.join(root, "_delta_log")
    staging = os.path.join(root, f"{CREATE_STAGING_PREFIX}{uuid.uuid4().hex}")
    try:
        create(staging)
        os.makedirs(log, exist_ok=True)
        try:
            os.link(os.path.join(staging, "_delta_log", f"{0:020d}.json"), os.path.join(log, f"{0:020d}.json"))
            return True
        except FileExistsError:
            return False
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@functools.cache
def _links_work(log: str) -> bool:
    """Return whether the file system holding ``log`` makes hard links; asked once per log (which it creates)."""
    probe = os.path.join(log, f"{LINK_PROBE_PREFIX}{uuid.uuid4().hex}.tmp")
    try:
        os.makedirs(log, exist_ok=True)
        with open(probe, "xb"):
            pass
        try:
            os.link(probe, probe + ".2")
            os.unlink(probe + ".2")
            return True
        finally:
            os.unlink(probe)
    except OSError:
        return False


class _LostRace(Exception):
    """A concurrent commit conflicts with this one (delta-rs' CommitFailedError)."""


def _add(add: AddAction) -> dict[str, Any]:
    return {
        "path": log_path(add.path),
        "partitionValues": dict(add.partition_values),
        "size": add.size,
        "modificationTime": add.modification_time,
        "dataChange": add.data_change,
        "stats": add.stats,
    }


def _put_next(uri: str, base: int, lines: Sequence[Mapping[str, Any]], app_ids: set[str]) -> int:
    """Write ``lines`` as the first free version after ``base``; return it. Each version taken meanwhile is read:
    one carrying any of ``app_ids``, or a metadata or protocol change, raises :class:`_LostRace`."""
    _, root = filesystem(uri)
    log = os.path.join(root, "_delta_log")
    try:
        # Strict UTF-8: a lone surrogate anywhere would make a commit file no Delta reader can parse.
        body = "\n".join(json.dumps(line, ensure_ascii=False, separators=(",", ":")) for line in lines).encode()
    except UnicodeEncodeError as exc:
        raise TableStoreError(f"{uri}: a value of this commit is not valid Unicode text: {exc}") from None
    staged = os.path.join(log, f"{STAGED_COMMIT_PREFIX}{uuid.uuid4().hex}.json.tmp")
    try:
        with open(staged, "xb") as out:
            out.write(body)
    except BaseException:  # a full disk, a quota: the partial file must not stay behind
        with contextlib.suppress(OSError):
            os.unlink(staged)
        raise
    try:
        version = base + 1
        while True:
            target = os.path.join(log, f"{version:020d}.json")
            try:
                hold()  # traced only: a crash test's kill lands before the link ...
                os.link(staged, target)
                hold()  # ... or after it, with the staged file still there
                return version
            except FileExistsError:
                _check_winner(target, version, app_ids)
                version += 1
    finally:
        os.unlink(staged)


def _check_winner(path: str, version: int, app_ids: set[str]) -> None:
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    for line in text.split("\n"):  # not splitlines(): JSON leaves U+2028 unescaped
        if not line.strip():
            continue
        action = json.loads(line)
        if "txn" in action and str(action["txn"].get("appId")) in app_ids:
            raise _LostRace(f"the concurrent commit {version} carried the app transaction {action['txn']['appId']}")
        if "metaData" in action or "protocol" in action:
            raise _LostRace(f"the concurrent commit {version} changed the table's metadata or protocol")
        if "remove" in action and action["remove"].get("dataChange", True):
            # delta-rs prepares an append as having read the whole table: data deleted meanwhile conflicts
            # (a compaction's rearrangement, dataChange false, does not).
            raise _LostRace(f"a concurrent transaction deleted data: commit {version} removed files")
