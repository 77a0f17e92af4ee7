"""The latest snapshot of a Delta table replayed without listing its ``_delta_log`` (the embedded adapter's).

delta-rs lists the whole ``_delta_log`` directory on every load and incremental update (on a local filesystem
and on object stores alike, its listing starts at the first file), so a reader's cost grew with the number of
commits the log keeps, not with what changed. :func:`probed_state` reads ``_last_checkpoint``, the checkpoint it
names, then the commit files after it by name until the first that does not exist, and replays them with
:func:`~lakeshard.lake.protocol.log.replay`. The checkpoint's file statistics are parsed by Arrow's JSON reader
in one pass, typed by the table's schema, so the live files are the values delta-rs' own listing gives
(:func:`~lakeshard.lake.embedded.log.live_files`). See docs/decisions.md ("The latest snapshot without listing
the log").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, date, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.json as pajson
import pyarrow.parquet as pq

from lakeshard.lake.protocol.filesystem import filesystem
from lakeshard.lake.protocol.log import LogState, parse_commit, replay, state_from_checkpoint_rows, unsupported_features
from lakeshard.lake.types import FileInfo
from lakeshard.utc import aware

__all__ = ["missing", "probed_files", "probed_state"]


def probed_state(uri: str, known: LogState | None = None) -> LogState | None:
    """Return the table's latest state replayed without listing its ``_delta_log``, or None when it cannot be.

    The replay starts at ``known`` (a state replayed earlier, while its commit file is still in the log) or at
    the checkpoint ``_last_checkpoint`` names (single- or multi-part; none: version 0), then reads the commit
    files after it one by one until the first that does not exist. Commits are put-if-absent, so the versions
    are contiguous and the first missing one is the next to be written: each look costs a read per new commit
    and one miss, whatever the number of commits the log keeps. The state's files are as :func:`live_files`
    gives them (statistics typed by the schema). None (the caller asks delta-rs) when there is no table there,
    ``_last_checkpoint`` names a V2 checkpoint or a missing part, or the table uses a feature a plain replay
    gets wrong (deletion vectors, column mapping).
    """
    fs, base = filesystem(uri)
    log = f"{base}/_delta_log"
    if known is not None and missing(fs, f"{log}/{known.version:020d}.json"):
        known = None  # the table was re-created, or its log cleaned up past the version known
    state = known if known is not None else _last_checkpoint_state(fs, log)
    if state is None:
        return None
    commits: list[tuple[int, list[dict[str, Any]]]] = []
    version = state.version + 1
    while True:
        try:
            with fs.open_input_stream(f"{log}/{version:020d}.json") as stream:
                text = stream.read().decode("utf-8")
        except FileNotFoundError:
            break
        commits.append((version, parse_commit(text, version, table=uri)[1]))
        version += 1
    if not commits and (state.version < 0 or (known is None and missing(fs, f"{log}/{state.version:020d}.json"))):
        # No table; or a checkpoint followed by no commit whose own commit is gone too: log cleanup removed the
        # versions after it, so ``_last_checkpoint`` is behind a newer checkpoint and delta-rs must list.
        return None
    if commits:
        state = replay(commits, base=state)
        typed = _StatsTypes(state.schema_json)
        for path in {str(a["add"]["path"]) for _, actions in commits for a in actions if a.get("add")}:
            if (f := state.files.get(path)) is not None:
                state.files[path] = replace(f, min_values=typed(f.min_values), max_values=typed(f.max_values),
                                            null_counts=typed.counts(f.null_counts))
    return None if unsupported_features(state) else state


def missing(fs: pafs.FileSystem, path: str) -> bool:
    """Return whether nothing exists at ``path`` (one metadata look, no listing)."""
    return bool(fs.get_file_info(path).type == pafs.FileType.NotFound)


class _StatsTypes:
    """Turns JSON statistics into the values :func:`live_files` has: timestamps as UTC datetimes, dates as dates,
    nested columns' statistics named ``outer.inner``."""

    def __init__(self, schema_json: Mapping[str, Any]) -> None:
        kinds = {f["name"]: f["type"] for f in schema_json.get("fields", [])}
        self.parsers = {n: _parse_date if k == "date" else _parse_timestamp for n, k in kinds.items()
                        if k in ("timestamp", "timestamp_ntz", "date")}
        self.nested = {n for n, k in kinds.items() if isinstance(k, dict)}

    def __call__(self, values: Mapping[str, Any] | None) -> dict[str, Any]:
        if not values:
            return {}
        # Called twice per file: the plain case (flat columns, a timestamp or two) stays cheap.
        flat = _flat(values) if self.nested & values.keys() else {k: v for k, v in values.items() if v is not None}
        for column, parse in self.parsers.items():
            value = flat.get(column)
            if isinstance(value, str):
                flat[column] = parse(value)
        return flat

    def counts(self, values: Mapping[str, Any] | None) -> dict[str, Any]:
        """Return null counts by column (nested columns' as ``outer.inner``)."""
        if not values:
            return {}
        return _flat(values) if self.nested & values.keys() else {k: v for k, v in values.items() if v is not None}


def _last_checkpoint_state(fs: pafs.FileSystem, log: str) -> LogState | None:
    """Return the state of the checkpoint ``_last_checkpoint`` names, the empty state (version -1) without one,
    or None when the checkpoint cannot be read as a classic one."""
    try:
        with fs.open_input_stream(f"{log}/_last_checkpoint") as stream:
            hint = json.loads(stream.read().decode("utf-8"))
    except FileNotFoundError:
        return LogState()
    except ValueError:
        return None
    if not isinstance(hint, dict) or "v2Checkpoint" in hint or not isinstance(hint.get("version"), int):
        return None
    version, parts = int(hint["version"]), hint.get("parts")
    names = ([f"{version:020d}.checkpoint.parquet"] if not parts else
             [f"{version:020d}.checkpoint.{i:010d}.{int(parts):010d}.parquet" for i in range(1, int(parts) + 1)])
    tables = []
    try:
        for name in names:
            with fs.open_input_file(f"{log}/{name}") as handle:
                present = [c for c in ("add", "txn", "metaData", "protocol") if c in pq.read_schema(handle).names]
                tables.append(pq.read_table(handle, columns=present))
    except FileNotFoundError:
        return None

    table = pa.concat_tables(tables, promote_options="default")
    others = [c for c in table.column_names if c != "add"]
    # The few non-file actions row by row; the adds (one per live file) column by column.
    small: list[dict[str, Any]] = []
    if others:
        keep = pc.is_valid(table[others[0]])
        for c in others[1:]:
            keep = pc.or_(keep, pc.is_valid(table[c]))
        small = table.select(others).filter(keep).to_pylist()
    state = state_from_checkpoint_rows(version, small)
    if "add" in table.column_names:
        adds = table["add"].combine_chunks()
        adds = adds.filter(adds.is_valid())
        for f in _files_from_adds(adds, state.schema_json):
            state.files[f.path] = f
    return state


def _files_from_adds(adds: pa.StructArray, schema_json: Mapping[str, Any]) -> list[FileInfo]:
    """Return the FileInfos of a checkpoint's add actions, their statistics parsed in one pass by Arrow."""
    fields = {adds.type.field(i).name for i in range(adds.type.num_fields)}

    def column(name: str) -> list[Any]:
        return adds.field(name).to_pylist() if name in fields else [None] * len(adds)

    raw = column("stats")
    parsed = _parse_stats(raw, schema_json)
    if parsed is None:  # a column type the Arrow parse does not cover: one JSON parse per file
        typed = _StatsTypes(schema_json)
        stats = [json.loads(r) if r else {} for r in raw]
        records = [s.get("numRecords") for s in stats]
        mins = [typed(s.get("minValues")) for s in stats]
        maxs = [typed(s.get("maxValues")) for s in stats]
        nulls = [typed.counts(s.get("nullCount")) for s in stats]
    else:
        records, mins, maxs, nulls = parsed
    return [FileInfo(path=str(path), size_bytes=int(size or 0), num_records=None if n is None else int(n),
                     partition_values=dict(pvals or {}),
                     modification_time=datetime.fromtimestamp((millis or 0) / 1000, tz=UTC),
                     min_values=lo, max_values=hi, null_counts=nc)
            for path, size, millis, pvals, n, lo, hi, nc in zip(
                column("path"), column("size"), column("modificationTime"), column("partitionValues"), records,
                mins, maxs, nulls, strict=True)]


# Delta primitive types whose JSON statistics Arrow reads as these types (timestamps and dates as text, then cast).
_STATS_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(), "long": pa.int64(), "integer": pa.int64(), "short": pa.int64(), "byte": pa.int64(),
    "double": pa.float64(), "float": pa.float64(), "boolean": pa.bool_(), "timestamp": pa.string(),
    "timestamp_ntz": pa.string(), "date": pa.string(),
}
_CASTS: dict[str, pa.DataType] = {"timestamp": pa.timestamp("us", tz="UTC"), "timestamp_ntz": pa.timestamp("us"),
                                  "date": pa.date32()}
_NO_MIN_MAX = ("array", "map")


def _stats_schema(fields: Any, counts: bool) -> tuple[pa.DataType, dict[str, str]] | None:
    """Return the Arrow struct type of a ``minValues``/``maxValues`` (or, ``counts``, ``nullCount``) object for
    these Delta schema fields and the types to cast to by flattened name, or None for a type not covered."""
    out, casts = [], {}
    for f in fields:
        kind = f["type"]
        if isinstance(kind, dict) and kind.get("type") == "struct":
            inner = _stats_schema(kind["fields"], counts)
            if inner is None:
                return None
            out.append(pa.field(f["name"], inner[0]))
            casts.update({f"{f['name']}.{k}": v for k, v in inner[1].items()})
        elif counts:
            out.append(pa.field(f["name"], pa.int64()))
        elif isinstance(kind, dict) and kind.get("type") in _NO_MIN_MAX:
            continue
        elif isinstance(kind, str) and kind in _STATS_TYPES:
            out.append(pa.field(f["name"], _STATS_TYPES[kind]))
            if kind in _CASTS:
                casts[f["name"]] = kind
        else:
            return None  # decimals and the like: parsed per file
    return pa.struct(out), casts


def _parse_stats(raw: list[str | None], schema_json: Mapping[str, Any]
                 ) -> tuple[list[Any], list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]] | None:
    """Return per file its record count, min, max and null count values from the ``stats`` JSON strings, or
    None when the schema has a column type this parse does not cover."""
    fields = schema_json.get("fields", [])
    values, counts = _stats_schema(fields, False), _stats_schema(fields, True)
    if values is None or counts is None or not raw:
        return None if raw else ([], [], [], [])
    schema = pa.schema([("numRecords", pa.int64()), ("minValues", values[0]), ("maxValues", values[0]),
                        ("nullCount", counts[0])])
    # Statistics are one-line JSON objects (the protocol escapes newlines inside strings).
    text = "\n".join(r or "{}" for r in raw).encode("utf-8")
    table = pajson.read_json(pa.BufferReader(text), parse_options=pajson.ParseOptions(
        explicit_schema=schema, unexpected_field_behavior="ignore"))
    while any(pa.types.is_struct(t) for t in table.schema.types):
        table = table.flatten()

    def group(prefix: str, casts: Mapping[str, str]) -> list[dict[str, Any]]:
        cols = []
        for name in table.column_names:
            if name.startswith(prefix):
                col = table.column(name)
                kind = casts.get(name[len(prefix):])
                if kind is not None:
                    col = pc.cast(col, _CASTS[kind])
                cols.append((name[len(prefix):], col.to_pylist()))
        return [{k: v[i] for k, v in cols if v[i] is not None} for i in range(table.num_rows)]

    return (table.column("numRecords").to_pylist(), group("minValues.", values[1]), group("maxValues.", values[1]),
            group("nullCount.", {}))


def probed_files(state: LogState) -> list[FileInfo]:
    """Return the live files of a state :func:`probed_state` replayed."""
    return list(state.files.values())


def _parse_timestamp(text: str) -> datetime:
    parsed = datetime.fromisoformat(text)  # Delta writes "2026-03-01T07:01:00.000Z"
    return aware(parsed)


def _parse_date(text: str) -> date:
    return date.fromisoformat(text)


def _flat(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        elif value is not None:
            out[f"{prefix}{key}"] = value
    return out
