"""The Delta log as the protocol writes it: pure parsing and replay of commit and checkpoint actions.

Both adapters read per-version deltas (:class:`~lakeshard.lake.store.LogEntry`) and checkpoints from the
log files themselves; the native adapter also replays the log for a version's live files and app
transaction versions. Everything here works on already-read text and rows (no I/O), so it is tested
without Spark or a Delta JVM, on logs written by delta-rs and on actions shaped as delta-spark writes them.

What is parsed is the documented Delta protocol (``PROTOCOL.md`` of delta-io/delta): one JSON action per
line in ``_delta_log/<version:020d>.json``; classic checkpoints ``<v>.checkpoint.parquet`` or
``<v>.checkpoint.<part>.<parts>.parquet`` (rows with ``add``/``remove``/``txn``/``metaData``/``protocol``
columns); ``_last_checkpoint``. Replay rules: a later ``add`` or ``remove`` of a path wins over an earlier
one (an absolute local path in any of its spellings, ``/x``, ``file:/x``, ``file:///x``, as Delta
canonicalises it); the newest ``txn`` of an app id wins; the newest ``metaData`` and ``protocol`` win.

Tables using features a plain replay would get wrong are reported by :func:`unsupported_features`:
deletion vectors (a file's rows are not all live), column mapping (Parquet column names differ from the
table's) and V2 checkpoints (UUID-named checkpoints with sidecar files).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from lakeshard.errors import TableStoreError
from lakeshard.lake.types import BYTES_ADDED, ROWS_ADDED, AppTransaction, FileChange, FileInfo, LogEntry
from lakeshard.utc import aware

__all__ = [
    "COMMIT_ID",
    "LogState",
    "add_action",
    "canonical_path",
    "checkpoint_parts",
    "commit_id_of",
    "commit_versions",
    "custom_metadata",
    "decode_user_metadata",
    "encode_user_metadata",
    "file_from_action",
    "is_temporary_commit",
    "parse_commit",
    "remove_action",
    "replay",
    "state_from_checkpoint_rows",
    "table_id",
    "txn_action",
    "typed_stats",
    "unhonoured_features",
    "unsupported_features",
    "v2_checkpoint_versions",
]

# Every lakeshard commit carries a random id so the writer can find the version it landed at afterwards.
COMMIT_ID = "lakeshard.commitId"

# commitInfo fields that Delta writers (delta-spark, Databricks, delta-rs) fill in themselves; anything else
# in a commitInfo is custom metadata (delta-rs writes custom metadata as top-level commitInfo keys).
_COMMIT_INFO_KEYS = frozenset({
    COMMIT_ID, "timestamp", "operation", "operationParameters", "operationMetrics", "version", "engineInfo",
    "clientVersion", "readVersion", "isBlindAppend", "userId", "userName", "job", "notebook", "clusterId",
    "isolationLevel", "userMetadata", "tags", "txnId", "inCommitTimestamp",
})
# Operations whose operationMetrics count what an append added (delta-spark's DataFrame writer, streaming).
_APPEND_OPERATIONS = frozenset({"WRITE", "STREAMING UPDATE"})
# Readers of these features must not treat a data file as "all its rows are live, columns named as in the
# table"; a plain Parquet read of the live files (and this replay) would be wrong.
_UNSUPPORTED_FEATURES = ("deletionVectors", "columnMapping", "v2Checkpoint")


@dataclass
class LogState:
    """A table version replayed from its log: live files, app transaction versions, metadata and protocol."""

    version: int = -1
    files: dict[str, FileInfo] = field(default_factory=dict)
    app_versions: dict[str, int] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)  # the newest metaData action
    protocol: dict[str, Any] = field(default_factory=dict)  # the newest protocol action

    @property
    def partition_columns(self) -> list[str]:
        """Return the table's partition columns from its metadata."""
        return list(self.metadata.get("partitionColumns") or [])

    @property
    def schema_json(self) -> dict[str, Any]:
        """Return the table's schema as Delta's JSON (a Spark ``StructType``), or an empty struct."""
        raw = self.metadata.get("schemaString")
        return json.loads(raw) if raw else {"type": "struct", "fields": []}


def commit_versions(names: Iterable[str]) -> set[int]:
    """Return the versions that have a commit file among these ``_delta_log`` file names."""
    return {int(n[:20]) for n in names if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()}


# Delta writes a commit file to a hidden temporary name, then renames it into place (its HDFSLogStore); Hadoop's
# local filesystem adds a checksum file beside it. A process killed between the two leaves them: never a commit.
_TEMPORARY_COMMIT = re.compile(r"\.\.?\d{20}\.json\.[0-9A-Za-z-]+\.tmp(?:\.crc)?")


def is_temporary_commit(name: str) -> bool:
    """Return whether a ``_delta_log`` file name is a commit file's temporary name (or its checksum file)."""
    return _TEMPORARY_COMMIT.fullmatch(name) is not None


def checkpoint_parts(entries: Iterable[tuple[str, str]]) -> dict[int, list[str]]:
    """Return, per classic checkpoint version, its part locations in order ([] when a part is missing).

    ``entries`` are (file name, location) pairs of a ``_delta_log`` listing. V2 checkpoints
    (``<v>.checkpoint.<uuid>.parquet|json``) are not classic and are left out.
    """
    found: dict[int, dict[int, str]] = {}
    expected: dict[int, int] = {}
    for name, location in entries:
        bits = name.split(".")
        if len(bits) < 3 or bits[1] != "checkpoint" or bits[-1] != "parquet" or not bits[0].isdigit():
            continue
        version = int(bits[0])
        if len(bits) == 3:  # <v>.checkpoint.parquet
            found.setdefault(version, {})[1] = location
            expected[version] = 1
        elif len(bits) == 5 and bits[2].isdigit() and bits[3].isdigit():  # <v>.checkpoint.<part>.<parts>.parquet
            found.setdefault(version, {})[int(bits[2])] = location
            expected[version] = int(bits[3])
    return {v: [parts[i] for i in sorted(parts)] if len(parts) == expected[v] else [] for v, parts in found.items()}


def v2_checkpoint_versions(names: Iterable[str]) -> set[int]:
    """Return the versions that have a V2 checkpoint (``<v>.checkpoint.<uuid>.json|parquet``) among these names.

    A V2 checkpoint keeps its file actions in sidecar files; this reader does not follow them, so a table
    that has one is refused (see :func:`unsupported_features`) rather than replayed without it.
    """
    found = set()
    for name in names:
        bits = name.split(".")
        if (len(bits) == 4 and bits[0].isdigit() and bits[1] == "checkpoint" and bits[3] in ("json", "parquet")
                and not bits[2].isdigit()):
            found.add(int(bits[0]))
    return found


def encode_user_metadata(metadata: Mapping[str, Any]) -> str:
    """Return commit metadata as the one string Delta's ``userMetadata`` holds (a JSON object of strings).

    delta-spark keeps no arbitrary commitInfo keys, only ``userMetadata``; lakeshard's keys (e.g.
    :data:`~lakeshard.lake.store.ROWS_ADDED`) travel in it as a JSON object.
    """
    return json.dumps({k: v if isinstance(v, str) else json.dumps(v, default=str) for k, v in metadata.items()},
                      sort_keys=True, separators=(",", ":"))


def decode_user_metadata(raw: str | None) -> dict[str, Any]:
    """Return the metadata a ``userMetadata`` string carries: its JSON object, or ``{"userMetadata": raw}``."""
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {"userMetadata": raw}
    return dict(value) if isinstance(value, dict) else {"userMetadata": raw}


def custom_metadata(commit_info: Mapping[str, Any]) -> dict[str, Any]:
    """Return a commitInfo's custom metadata: its non-standard keys plus what its ``userMetadata`` encodes.

    A plain Delta append (``WRITE`` / ``STREAMING UPDATE``) that carries no lakeshard row and byte counts
    gets them from Delta's own ``operationMetrics`` (``numOutputRows``, ``numOutputBytes``), so every
    append tells a consumer what it added.
    """
    custom = {k: v for k, v in commit_info.items() if k not in _COMMIT_INFO_KEYS}
    decoded = decode_user_metadata(commit_info.get("userMetadata"))
    decoded.pop(COMMIT_ID, None)
    out = {**custom, **decoded}
    metrics = commit_info.get("operationMetrics") or {}
    if commit_info.get("operation") in _APPEND_OPERATIONS and ROWS_ADDED not in out and "numOutputRows" in metrics:
        out[ROWS_ADDED] = str(metrics["numOutputRows"])
        out[BYTES_ADDED] = str(metrics.get("numOutputBytes", 0))
    return out


def commit_id_of(commit_info: Mapping[str, Any]) -> str | None:
    """Return the lakeshard commit id a commitInfo carries (top-level or in ``userMetadata``), or None."""
    if commit_info.get(COMMIT_ID):
        return str(commit_info[COMMIT_ID])
    found = decode_user_metadata(commit_info.get("userMetadata")).get(COMMIT_ID)
    return None if found is None else str(found)


def file_from_action(action: Mapping[str, Any], millis: int | None) -> FileInfo:
    """Return the FileInfo an add or remove action (from a commit file or a checkpoint) describes."""
    raw_parts = action.get("partitionValues") or {}
    # A checkpoint's Parquet map reads back as a list of (key, value) pairs; a commit's JSON as an object.
    parts = dict(raw_parts)
    stats = json.loads(action["stats"]) if action.get("stats") else {}
    return FileInfo(
        path=str(action["path"]),
        size_bytes=int(action.get("size") or 0),
        num_records=None if stats.get("numRecords") is None else int(stats["numRecords"]),
        partition_values=parts,
        modification_time=datetime.fromtimestamp((millis or 0) / 1000, tz=UTC),
        min_values=stats.get("minValues") or {},
        max_values=stats.get("maxValues") or {},
        null_counts=stats.get("nullCount") or {},
    )


def table_id(first_commit: str) -> str | None:
    """Return the table id (``metaData.id``) the text of a table's first commit sets, or None when it sets none.

    A table dropped and created again at the same place gets a new id, so it tells a cached snapshot of the old
    table from the new one without loading either.
    """
    for line in first_commit.split("\n"):  # lines end at "\n" only (see parse_commit)
        if '"metaData"' in line:
            meta = json.loads(line).get("metaData")
            if meta is not None:
                return str(meta["id"])
    return None


def parse_commit(text: str, version: int, *, table: str) -> tuple[LogEntry, list[dict[str, Any]]]:
    """Return one commit file's entry and its raw actions (one JSON object a line, as the protocol writes it).

    Raises:
        TableStoreError: the commit is not JSON lines (torn or overwritten); the message names ``table``.
    """
    try:
        # Lines end at "\n" only (not splitlines()): JSON leaves U+0085 and U+2028 unescaped, and ids hold them.
        actions = [json.loads(line) for line in text.split("\n") if line.strip()]
    except ValueError as exc:
        raise TableStoreError(f"{table}: commit {version} of the Delta log ({version:020d}.json) is not valid JSON "
                              f"lines (torn or overwritten): {exc}") from None
    info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    changes = []
    for a in actions:
        if "add" in a:
            add = a["add"]
            changes.append(FileChange("add", file_from_action(add, add.get("modificationTime")),
                                      bool(add.get("dataChange", True))))
        elif "remove" in a:
            rem = a["remove"]
            changes.append(FileChange("remove", file_from_action(rem, rem.get("deletionTimestamp")),
                                      bool(rem.get("dataChange", True))))
    txns = tuple(AppTransaction(str(a["txn"]["appId"]), int(a["txn"]["version"])) for a in actions if "txn" in a)
    millis = info.get("inCommitTimestamp") or info.get("timestamp") or 0
    entry = LogEntry(
        version=version,
        timestamp=datetime.fromtimestamp(int(millis) / 1000, tz=UTC),
        operation=str(info.get("operation", "")),
        custom_metadata=custom_metadata(info),
        changes=tuple(changes),
        app_transactions=txns,
        metadata_changed=any("metaData" in a for a in actions),
    )
    return entry, actions


def _is_absolute(path: str) -> bool:
    return path.startswith("/") or path.startswith("file:")


def canonical_path(path: str) -> str:
    """Return an absolute local path of a log action the way Delta compares it: ``/x``, ``file:/x``,
    ``file:///x`` and ``file://localhost/x`` are all ``file:/x`` (still URI-encoded, as in the log). Relative
    paths and other schemes are returned as they are."""
    if path.startswith("file://"):
        host, slash, rest = path[len("file://"):].partition("/")
        return f"file:/{rest}" if slash and host in ("", "localhost") else path
    if path.startswith("file:/") or not path.startswith("/") or path.startswith("//"):
        return path
    return "file:" + path


def replay(
    commits: Sequence[tuple[int, Sequence[Mapping[str, Any]]]],
    *,
    base: LogState | None = None,
) -> LogState:
    """Return the state after applying ``commits`` (version, raw actions), oldest first, on top of ``base``.

    ``base`` is a checkpoint's state (see :func:`state_from_checkpoint_rows`) or None for version -1.

    Raises:
        TableStoreError: the commits do not follow each other (or ``base``) without a gap.
    """
    state = LogState() if base is None else LogState(base.version, dict(base.files), dict(base.app_versions),
                                                    dict(base.metadata), dict(base.protocol))
    for version, actions in commits:
        if version != state.version + 1:
            raise TableStoreError(f"Delta log replay: version {version} follows version {state.version}")
        for a in actions:
            _apply(state, a)
        state.version = version
    return state


def state_from_checkpoint_rows(version: int, rows: Iterable[Mapping[str, Any]]) -> LogState:
    """Return the state a classic checkpoint at ``version`` records; ``rows`` are its Parquet rows as dicts."""
    state = LogState()
    for row in rows:
        _apply(state, {k: v for k, v in row.items() if v is not None})
    state.version = version
    return state


def _same_file_forms(path: str) -> tuple[str, ...]:
    """Return the spellings of an absolute local path that Delta takes for the same file (``/x``, ``file:/x``,
    ``file:///x``, ``file://localhost/x``); a relative path or another scheme has only its own."""
    if not _is_absolute(path):
        return (path,)
    key = canonical_path(path)
    if not key.startswith("file:/") or key.startswith("file://"):  # file://host/x: another machine's file
        return (path,)
    rest = key[len("file:"):]
    return (rest, key, f"file://{rest}", f"file://localhost{rest}")


def _apply(state: LogState, action: Mapping[str, Any]) -> None:
    # Delta keys files by their canonicalised path: an add of `/x` is removed, or added again, as `file:/x`
    # or `file:///x` (Delta's golden tables `canonicalized-paths-*`), so every spelling of it goes first.
    if action.get("add"):
        add = action["add"]
        path = str(add["path"])
        for form in _same_file_forms(path):
            state.files.pop(form, None)
        state.files[path] = file_from_action(add, add.get("modificationTime"))
    elif action.get("remove"):
        for form in _same_file_forms(str(action["remove"]["path"])):
            state.files.pop(form, None)
    elif action.get("txn"):
        txn = action["txn"]
        state.app_versions[str(txn["appId"])] = int(txn["version"])
    elif action.get("metaData"):
        state.metadata = dict(action["metaData"])
    elif action.get("protocol"):
        state.protocol = dict(action["protocol"])


def unsupported_features(state: LogState) -> list[str]:
    """Return the table features in use that a plain replay and Parquet read of live files would get wrong."""
    features = set(state.protocol.get("readerFeatures") or []) | set(state.protocol.get("writerFeatures") or [])
    found = [f for f in _UNSUPPORTED_FEATURES if f in features]
    config = dict(state.metadata.get("configuration") or {})
    if config.get("delta.columnMapping.mode", "none") != "none" and "columnMapping" not in found:
        found.append("columnMapping")
    if config.get("delta.enableDeletionVectors") == "true" and "deletionVectors" not in found:
        found.append("deletionVectors")
    return found


# Table features lakeshard's writes cannot honour, with how to switch each off (docs/lake.md, "Table features").
_UNHONOURED = {
    "rowTracking": "row tracking (a swap would give rows new ids): ALTER TABLE ... SET TBLPROPERTIES "
                   "('delta.enableRowTracking' = 'false')",
    "typeWidening": "type widening (statistics and pruning assume one type per column): ALTER TABLE ... SET "
                    "TBLPROPERTIES ('delta.enableTypeWidening' = 'false')",
    "catalogManaged": "catalog-managed commits (the file log is no longer the truth): recreate the table as a "
                      "path-based table without them",
    "catalogOwned-preview": "catalog-owned commits (the file log is no longer the truth): recreate the table as "
                            "a path-based table without them",
    "coordinatedCommits-preview": "coordinated commits (the file log is no longer the truth): ALTER TABLE ... "
                                  "UNSET TBLPROPERTIES ('delta.coordinatedCommits.commitCoordinator-preview')",
}
_UNHONOURED_SETTINGS = {
    "delta.enableRowTracking": "rowTracking",
    "delta.enableTypeWidening": "typeWidening",
    "delta.autoOptimize.optimizeWrite": "optimized writes (they rewrite files outside lakeshard's locks and pruning "
                                        "metadata): ALTER TABLE ... SET TBLPROPERTIES "
                                        "('delta.autoOptimize.optimizeWrite' = 'false')",
    "delta.autoOptimize.autoCompact": "auto compaction (it rewrites files outside lakeshard's locks and pruning "
                                      "metadata): ALTER TABLE ... SET TBLPROPERTIES "
                                      "('delta.autoOptimize.autoCompact' = 'false')",
}


def unhonoured_features(state: LogState) -> list[str]:
    """Return, for each table feature in use that lakeshard's commits cannot honour, the feature and how to switch
    it off (row tracking, type widening, catalog-managed or coordinated commits, optimized writes, auto compaction).

    A feature only listed in the protocol but switched off in the table's settings is not in use.
    """
    features = set(state.protocol.get("readerFeatures") or []) | set(state.protocol.get("writerFeatures") or [])
    config = {k: str(v).lower() for k, v in (state.metadata.get("configuration") or {}).items()}
    found: list[str] = []
    for feature, how in _UNHONOURED.items():
        setting = next((k for k, v in _UNHONOURED_SETTINGS.items() if v == feature), None)
        if feature in features and (setting is None or config.get(setting) != "false"):
            found.append(how)
    for setting, what in _UNHONOURED_SETTINGS.items():
        if config.get(setting) == "true":
            how = _UNHONOURED.get(what, what)
            if how not in found:
                found.append(how)
    return found


def typed_stats(values: Mapping[str, Any], schema_json: Mapping[str, Any]) -> dict[str, Any]:
    """Return JSON min/max statistics as Python values of the columns' types (dates, UTC datetimes, numbers).

    Statistics of nested or unknown columns are left as they are.
    """
    types = {f["name"]: f["type"] for f in schema_json.get("fields", [])}
    out: dict[str, Any] = {}
    for name, value in values.items():
        kind = types.get(name)
        if value is None or not isinstance(kind, str):
            out[name] = value
        elif kind in ("timestamp", "timestamp_ntz") and isinstance(value, str):
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
            out[name] = aware(parsed)
        elif kind == "date" and isinstance(value, str):
            out[name] = date.fromisoformat(value)
        else:
            out[name] = value
    return out


def add_action(file: FileInfo, *, data_change: bool, stats: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Return the ``add`` action (protocol JSON) that commits ``file`` (its path URI-encoded, as in the log)."""
    add: dict[str, Any] = {
        "path": file.path,
        "partitionValues": dict(file.partition_values),
        "size": file.size_bytes,
        "modificationTime": int(file.modification_time.timestamp() * 1000),
        "dataChange": data_change,
    }
    if stats is not None:
        add["stats"] = json.dumps(stats, separators=(",", ":"), default=str)
    return {"add": add}


def remove_action(file: FileInfo, *, data_change: bool, deletion_millis: int) -> dict[str, Any]:
    """Return the ``remove`` action (protocol JSON) that removes the live file ``file`` (path as in the log)."""
    return {"remove": {
        "path": file.path,
        "deletionTimestamp": deletion_millis,
        "dataChange": data_change,
        "extendedFileMetadata": True,
        "partitionValues": dict(file.partition_values),
        "size": file.size_bytes,
    }}


def txn_action(txn: AppTransaction, *, millis: int) -> dict[str, Any]:
    """Return the ``txn`` (SetTransaction) action recording that ``txn.app_id`` reached ``txn.version``."""
    return {"txn": {"appId": txn.app_id, "version": txn.version, "lastUpdated": millis}}
