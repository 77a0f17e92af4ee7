"""The integrity check of a closing bucket and its versioned checksum.

A bucket's checksum is order-independent (compaction rewrites the same rows into new files and keeps it) and
recorded with the closure, prefixed by its **kind**, so a bucket is always verified by the formula it was closed
with:

* ``rowjson`` (kind 1, recorded without a prefix): the sum, as an exact decimal, of Spark's
  ``xxhash64(to_json(row))`` over the bucket's rows, with a ``count_distinct`` of the event keys — one Spark job,
  a JSON rendering of every row.
* ``rowhash2`` (kind 2, recorded as ``"rowhash2:<16 hex digits>"``, the default): read in this process with
  Arrow, per bucket from only that bucket's files; each row's 64-bit hash chains XXH64 over its columns in name
  order (strings by their UTF-8 bytes, numbers, booleans and timestamps as longs, a null as a marker, a map as the
  sum of its entries' hashes), and the checksum is the sum of the row hashes modulo 2**64. Distinct keys are
  counted exactly by Arrow's hash grouping.

Example::

    checks = check_buckets(store, events_uri, {("acme", "2026-01-01T00"): files})   # kind 2
    checks = check_buckets(store, events_uri, buckets, kind=ROWJSON)                # what older closures used
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeshard.buckets.errors import BucketsError
from lakeshard.buckets.planner import Bucket
from lakeshard.errors import DamagedDataFile
from lakeshard.lake import FileInfo, TableStore, naming_damaged_files
from lakeshard.sparkhash import SPARK_HASH_SEED, U64, xxhash64_longs, xxhash64_strings
from lakeshard.tables import EVENT_KEY
from lakeshard.versions import rows_in

__all__ = ["CHECKSUM_KINDS", "ROWHASH2", "ROWJSON", "BucketCheck", "ChecksumError", "check_buckets",
           "checksum_kind", "rowhash2", "rowhash2_groups"]

ROWJSON = "rowjson"  # kind 1: recorded without a prefix
ROWHASH2 = "rowhash2"
CHECKSUM_KINDS = (ROWJSON, ROWHASH2)
_NULL = np.int64(0x6E756C6C)  # what a null value contributes to its row's hash ("null")
K = TypeVar("K")


class ChecksumError(BucketsError):
    """A checksum of an unknown kind, or a column type the checksum cannot hash."""


@dataclass(frozen=True)
class BucketCheck:
    """The integrity check of one bucket at one ``events`` version."""

    tenant_id: str
    hour: str
    rows: int
    distinct_keys: int
    stats_rows: int  # what the log's file statistics say the bucket holds
    checksum: str  # prefixed by its kind (none for ``rowjson``)
    damage: str = ""  # a data file of the bucket that cannot be read as the log describes it (then nothing was)

    @property
    def problem(self) -> str:
        """Return what is wrong with the bucket, or "" when nothing is."""
        if self.damage:
            return self.damage
        issues = []
        if self.rows != self.distinct_keys:
            issues.append(f"{self.rows - self.distinct_keys} duplicate event keys")
        if self.rows != self.stats_rows:
            issues.append(f"{self.rows} rows read but the log's statistics promise {self.stats_rows}")
        return "; ".join(issues)


def checksum_kind(checksum: str | None) -> str:
    """Return the kind a recorded checksum was computed with: its prefix, or ``rowjson`` when it has none."""
    if checksum is None or ":" not in checksum:
        return ROWJSON
    kind = checksum.split(":", 1)[0]
    if kind not in CHECKSUM_KINDS:
        raise ChecksumError(f"checksum {checksum!r} is of unknown kind {kind!r}; known: {', '.join(CHECKSUM_KINDS)}")
    return kind


def check_buckets(store: TableStore, events: str, files: Mapping[Bucket, Sequence[FileInfo]],
                  kind: str = ROWHASH2) -> dict[Bucket, BucketCheck]:
    """Return the integrity check of each bucket with a checksum of ``kind``, reading exactly the given files
    of each (``rowhash2``: in this process, all buckets hashed at once; ``rowjson``: one Spark job for all)."""
    if kind not in CHECKSUM_KINDS:
        raise ChecksumError(f"unknown checksum kind {kind!r}; known: {', '.join(CHECKSUM_KINDS)}")
    empty = "0" if kind == ROWJSON else f"{ROWHASH2}:{0:016x}"
    out = {b: BucketCheck(b[0], b[1], rows=0, distinct_keys=0, stats_rows=0, checksum=empty)
           for b, fs in files.items() if not fs}  # buckets without live files hold no rows
    live = {b: fs for b, fs in files.items() if fs}
    if not live:
        return out
    if kind == ROWJSON:
        return out | _check_rowjson(store, events, live)
    try:
        groups = store.read_arrow_groups(events, live)
    except DamagedDataFile:
        # Found out bucket by bucket which ones hold a damaged file: they fail their check, the others are checked.
        groups = {}
        for bucket, fs in live.items():
            try:
                groups[bucket] = store.read_arrow(events, fs)
            except DamagedDataFile as exc:
                out[bucket] = BucketCheck(bucket[0], bucket[1], 0, 0, rows_in(fs), "", damage=str(exc))
    for bucket, (rows, keys, checksum) in rowhash2_groups(groups).items():
        out[bucket] = BucketCheck(bucket[0], bucket[1], rows, keys, rows_in(live[bucket]), checksum)
    return out


def rowhash2(rows: pa.Table) -> tuple[int, int, str]:
    """Return ``(rows, distinct event keys, rowhash2 checksum)`` of one bucket's rows."""
    return rowhash2_groups({0: rows})[0]


def rowhash2_groups(groups: Mapping[K, pa.Table]) -> dict[K, tuple[int, int, str]]:
    """Return :func:`rowhash2` of each group's rows, hashing the rows of all groups with one schema at once.

    A closing hour has hundreds of small buckets: hashed one by one, numpy's per-call cost was most of the
    check (2,000 buckets of 175 rows: 5.0 s one by one, 1.0 s at once; ``bench/bench_close_check.py``). Groups are
    concatenated per schema (a row's hash depends only on its columns), hashed in one pass per column, and the
    row hashes summed per group from a running sum; distinct keys are counted by one grouping with the group.
    """
    out = {key: (0, 0, f"{ROWHASH2}:{0:016x}") for key, t in groups.items() if t.num_rows == 0}
    by_schema: dict[pa.Schema, list[K]] = {}
    for key, t in groups.items():
        if t.num_rows:
            by_schema.setdefault(t.schema, []).append(key)
    for schema, keys in by_schema.items():
        tables = [groups[k] for k in keys]
        sizes = np.array([t.num_rows for t in tables], np.int64)
        rows = pa.concat_tables(tables)
        group = np.repeat(np.arange(len(keys), dtype=np.int64), sizes)
        h = np.full(rows.num_rows, SPARK_HASH_SEED, np.uint64)
        for name in sorted(schema.names):
            h = _chain(rows.column(name), h, name)
        ends = np.cumsum(sizes)
        with np.errstate(over="ignore"):  # sums modulo 2**64: a group's is the difference of running sums
            running = np.concatenate([np.zeros(1, np.uint64), np.cumsum(h, dtype=np.uint64)])
            totals = running[ends] - running[ends - sizes]
        distinct = (rows.select(list(EVENT_KEY)).append_column("_group", pa.array(group))
                    .group_by(["_group", *EVENT_KEY], use_threads=False).aggregate([]).column("_group"))
        key_counts = np.bincount(distinct.to_numpy(), minlength=len(keys))
        for i, key in enumerate(keys):
            out[key] = (int(sizes[i]), int(key_counts[i]), f"{ROWHASH2}:{int(totals[i]):016x}")
    return out


def _chain(column: pa.ChunkedArray, h: U64, name: str) -> U64:
    """Return ``h`` chained with each row's value of ``column`` (a null chains a marker)."""
    arr = column.combine_chunks()
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    t = arr.type
    if pa.types.is_null(t):
        hashed = h
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        hashed = xxhash64_strings(arr, h)
    elif pa.types.is_map(t):
        hashed = xxhash64_longs(_map_hashes(arr), h)
    elif pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_timestamp(t):
        if pa.types.is_timestamp(t):
            arr = pc.cast(arr, pa.timestamp("us", tz=t.tz))
        longs = pc.cast(arr, pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
        hashed = xxhash64_longs(longs, h)
    else:
        raise ChecksumError(f"column {name!r} of type {t} cannot be hashed by the {ROWHASH2} checksum")
    return np.where(valid, hashed, xxhash64_longs(np.full(len(h), _NULL, np.int64), h))


def _map_hashes(arr: pa.Array) -> np.ndarray:
    """Return, per map, the sum of its entries' hashes (each: XXH64 of the value seeded by the key's), as longs:
    independent of the entries' order."""
    maps = arr.cast(pa.map_(pa.large_string(), pa.large_string()))
    keys, items = maps.keys, maps.items
    seed = np.full(len(keys), SPARK_HASH_SEED, np.uint64)
    entry = xxhash64_strings(items, xxhash64_strings(keys, seed))
    entry = np.where(items.is_valid().to_numpy(zero_copy_only=False), entry,
                     xxhash64_longs(np.full(len(keys), _NULL, np.int64), entry))
    offsets = maps.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    sums = np.zeros(len(arr), np.uint64)
    if len(entry):
        with np.errstate(over="ignore"):
            csum = np.concatenate([np.zeros(1, np.uint64), np.cumsum(entry, dtype=np.uint64)])
            sums = csum[offsets[1:]] - csum[offsets[:-1]]
    return sums.view(np.int64)


def _check_rowjson(store: TableStore, events: str, files: Mapping[Bucket, Sequence[FileInfo]]
                   ) -> dict[Bucket, BucketCheck]:
    """Return the ``rowjson`` check of each bucket (one Spark job over all their files).

    A bucket holding a file Spark cannot read fails its check with the file named (``damage``), and the job runs
    again over the other buckets: one damaged file does not stop the others' checks.
    """
    from pyspark.sql import functions as F

    out: dict[Bucket, BucketCheck] = {}
    left = dict(files)
    agg: list[Any] = []
    while left:
        read = [f for fs in left.values() for f in fs]
        try:
            with naming_damaged_files(events, read):
                df = store.read_files(events, read)
                row_hash = F.xxhash64(F.to_json(F.struct(*[F.col(f"`{c}`") for c in df.columns])))
                agg = (df.groupBy("tenant_id", "hour")
                       .agg(F.count(F.lit(1)).alias("rows"),
                            F.count_distinct(*[F.col(c) for c in EVENT_KEY]).alias("keys"),
                            F.sum(row_hash.cast("decimal(38,0)")).cast("string").alias("checksum"))
                       .collect())
            break
        except DamagedDataFile as exc:
            bucket = next((b for b, fs in left.items() if any(f.path == exc.path for f in fs)), None)
            if bucket is None:
                raise
            out[bucket] = BucketCheck(bucket[0], bucket[1], 0, 0, rows_in(left.pop(bucket)), "", damage=str(exc))
    found = {(str(r["tenant_id"]), str(r["hour"])): r for r in agg}
    for bucket, fs in left.items():
        r = found.get(bucket)
        out[bucket] = BucketCheck(
            bucket[0], bucket[1], rows=int(r["rows"]) if r else 0, distinct_keys=int(r["keys"]) if r else 0,
            stats_rows=rows_in(fs), checksum=str(r["checksum"]) if r else "0",
        )
    return out
