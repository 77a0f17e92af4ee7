"""The ID index of a writer's shards: the ``event_ids`` table and the in-memory cache in front of it.

:class:`IdIndex` owns what a writer knows of the IDs its shards committed: the byte-bounded LRU of intervals
(:mod:`lakeshard.dedupe.cache`), the newest hour seen per shard (the retention cutoff counts back from it) and
the listing of ``event_ids`` files by interval (once per table version). It answers which keys of a batch are
already committed (paging missing intervals in), remembers the keys a step committed, rebuilds IDs that lag
behind ``events`` after a crash, merges the ID files of sealed intervals (below their shard's newest hour in
the listing) and expires intervals past the retention. An interval is one ``(shard, hour)`` partition; the
hour is the event's own UTC hour, computed by :func:`own_hour` in Spark and :func:`own_hour_arrow` in the driver.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from urllib.parse import unquote

import numpy as np

from lakeshard.dedupe.cache import IdCache, IdInterval, Interval, hash_order
from lakeshard.dedupe.commit import commits_per_shard
from lakeshard.dedupe.keyhash import key_hash_columns
from lakeshard.dedupe.report import IndexCheck
from lakeshard.errors import CommitConflict
from lakeshard.lake import AppTransaction, FileInfo, TableStore, WrittenFile
from lakeshard.tables import EVENT_KEY, EVENT_KEY_HASH, FUSED_APP_ID, HOUR_FORMAT, SPARK_HOUR_FORMAT, writer_app_id

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

# The ID rows of its own files an index keeps for the merge (IdIndex.wrote): a 1M-event run writes about 20 MB.
_OWN_BYTES = 64 << 20

__all__ = ["IdIndex", "group_indices", "interval_of", "own_hour", "own_hour_arrow"]


class IdIndex:
    """The IDs committed to ``event_ids`` for ``shards``, cached in memory up to ``cache_bytes``.

    ``spark`` gives the session a repair too big for the driver runs on (``arrow_max_bytes`` bounds the
    driver's share); ``before_commit`` is called with ``"page-in"`` before IDs are read and with
    ``"id-compaction"`` before a merge commits (the crash tests stop the process there).
    """

    def __init__(self, store: TableStore, shards: tuple[int, ...], *, ids_uri: str, events_uri: str,
                 retention: timedelta, cache_bytes: int, arrow_max_bytes: int, spark: Callable[[], SparkSession],
                 before_commit: Callable[[str], None]) -> None:
        self.store = store
        self.shards = shards
        self.ids_uri = ids_uri
        self.events_uri = events_uri
        self.retention = retention
        self.cache = IdCache(cache_bytes)
        self.arrow_max_bytes = arrow_max_bytes
        self._spark = spark
        self._before_commit = before_commit
        self._newest_hour: dict[int, str] = {}  # per shard, the newest interval committed to the index
        self._schema: pa.Schema | None = None  # event_ids' Arrow schema, read once
        self._listing: tuple[int, dict[Interval, list[FileInfo]]] | None = None  # (event_ids version, files)
        # The rows of the ID files this index wrote, by their path in the table, oldest first (see wrote()).
        self._own: OrderedDict[str, pa.Table] = OrderedDict()
        self._own_bytes = 0

    def arrow_schema(self) -> pa.Schema:
        """Return the Arrow schema of ``event_ids`` (read once)."""
        if self._schema is None:
            self._schema = self.store.arrow_schema(self.ids_uri)
        return self._schema

    def columns(self) -> list[str]:
        """Return the columns an ``event_ids`` row holds, in the table's order: an index made with the exact keys
        beside their hash keeps being written with them."""
        return list(self.arrow_schema().names)

    # ------------------------------------------------------------------------------------- checking
    def check(self, keys: pa.Table) -> IndexCheck:
        """Return which unique batch keys (``shard``, ``interval``, ``key_hi``, ``key_lo``) the index already
        holds, paging missing intervals in."""
        shard = keys.column("shard").to_numpy()
        hi, lo = keys.column("key_hi").to_numpy(), keys.column("key_lo").to_numpy()
        groups = group_indices(shard, keys.column("interval"))
        self.saw_intervals(groups)
        expired = np.zeros(len(hi), dtype=bool)
        live = {}
        for (s, h), idx in groups.items():
            if h < self.cutoff_hour(s):
                expired[idx] = True
            else:
                live[(s, h)] = idx
        missing = self.cache.lookup(live)
        # The step holds every interval it checks, cached or paged in, until the check is done: paging one in
        # may evict another of the same step from a cache smaller than their sum, and an interval not held
        # would pass its duplicates as new.
        pinned = {key: ids for key in live if key not in missing and (ids := self.cache.get(key)) is not None}
        page_started = time.perf_counter()
        paged = self.page_in(missing, pinned) if missing else 0
        page_seconds = time.perf_counter() - page_started if missing else 0.0
        duplicate = np.zeros(len(hi), dtype=bool)
        for key, idx in live.items():
            duplicate[idx] = pinned[key].contains(hi[idx], lo[idx])
        return IndexCheck(duplicate, expired, len(missing), len(live) - len(missing), paged, page_seconds)

    def saw_intervals(self, intervals: Iterable[Interval]) -> None:
        """Remember the newest hour seen per shard: the retention cutoff counts back from it."""
        for shard, hour in intervals:
            if hour > self._newest_hour.get(shard, ""):
                self._newest_hour[shard] = hour

    def mergeable(self) -> dict[Interval, list[FileInfo]]:
        """Return the sealed intervals of these shards that hold more than one ID file, with their files.

        Decided from the ``event_ids`` listing alone (cached per table version), not from what this object saw:
        an interval is sealed once its shard holds a newer hour, so a writer built for one short run merges
        what earlier runs, late events or other writers left behind just as a long-lived one does.
        """
        listing = self._files_by_interval()
        newest: dict[int, str] = {}
        for shard, hour in listing:
            if shard in self.shards and hour > newest.get(shard, ""):
                newest[shard] = hour
        return {key: files for key, files in listing.items()
                if key[0] in newest and key[1] < newest[key[0]] and len(files) > 1}

    def cutoff_hour(self, shard: int) -> str:
        """Return the oldest hour of ``shard`` still checked: the retention before its newest hour ("" if none)."""
        newest = self._newest_hour.get(shard)
        if newest is None:
            return ""
        return (datetime.strptime(newest, HOUR_FORMAT) - self.retention).strftime(HOUR_FORMAT)

    def page_in(self, intervals: set[Interval], into: dict[Interval, IdInterval]) -> int:
        """Read these intervals' key hashes from ``event_ids`` into the cache and ``into``; return how many IDs
        were read.

        Only ``key_hi`` and ``key_lo`` of the intervals' files are read (their partition values say which
        interval a file holds), all files at once on the store's reader threads, no Spark job. Files are
        written sorted by the hash, so building an interval merges sorted runs instead of sorting.
        """
        self._before_commit("page-in")
        listing = self._files_by_interval()
        wanted = {key: listing[key] for key in intervals if key in listing}
        read = self.store.read_arrow_groups(self.ids_uri, wanted, columns=list(EVENT_KEY_HASH)) if wanted else {}
        total = 0
        for key in sorted(intervals):
            ids = read.get(key)
            if ids is None or not ids.num_rows:
                into[key] = IdInterval.empty()
            else:
                total += ids.num_rows
                into[key] = IdInterval(ids.column("key_hi").to_numpy(), ids.column("key_lo").to_numpy())
            self.cache.put(key, into[key])
        return total

    def _files_by_interval(self) -> dict[Interval, list[FileInfo]]:
        """Return the live ``event_ids`` files grouped by interval, listed and grouped once per table version (a
        step pages in a few intervals; the listing grows with every shard and hour retained)."""
        version = self.store.version(self.ids_uri)
        if self._listing is None or self._listing[0] != version:
            grouped: dict[Interval, list[FileInfo]] = {}
            for f in self.store.files(self.ids_uri, version=version):
                grouped.setdefault(interval_of(f), []).append(f)
            self.saw_intervals(grouped)
            self._listing = (version, grouped)
        return self._listing[1]

    def remember(self, committed: pa.Table) -> None:
        """Add the keys just committed to the cached intervals they belong to."""
        shard = committed.column("shard").to_numpy()
        hi, lo = committed.column("key_hi").to_numpy(), committed.column("key_lo").to_numpy()
        groups = group_indices(shard, committed.column("interval"))
        for key, idx in groups.items():
            self.cache.add(key, hi[idx], lo[idx])
        self.saw_intervals(groups)

    # ------------------------------------------------------------------------------------ upkeep
    def repair(self, progress: dict[int, int]) -> int:
        """Return how many IDs were rebuilt from ``events`` for shards whose ``event_ids`` lag behind
        ``progress`` (per shard, the routed version committed to ``events``)."""
        indexed = self.store.transaction_versions(self.ids_uri, [writer_app_id(s) for s in self.shards])
        lag = {s: indexed[writer_app_id(s)] or 0 for s in self.shards}
        behind = sorted(s for s in self.shards if lag[s] < progress[s])
        if not behind:
            return 0
        self.cache.drop_shards(behind)  # cached intervals lack the IDs about to be rebuilt
        oldest = min(lag[s] for s in behind)
        # File statistics narrow the read to files that can hold these shards' newer events.
        candidates = [f for f in self.store.files(self.events_uri)
                      if _may_hold(f, "routed_version", oldest + 1, None) and _may_hold_any(f, "shard", behind)]
        txns = [AppTransaction(writer_app_id(s), progress[s]) for s in behind]
        if self.arrow_max_bytes and sum(f.size_bytes for f in candidates) <= self.arrow_max_bytes:
            return self._repair_arrow(candidates, behind, lag, progress, txns)
        return self._repair_spark(candidates, behind, lag, progress, txns)

    def repair_fused(self, batch: int) -> int:
        """Return how many IDs of fused batch plan ``batch`` were rebuilt from ``events`` (its rows carry
        ``routed_version = -batch``), committed with ``fused`` → ``batch``: a crash between a fused batch's two
        commits is repaired from what ``events`` holds, not from a new parse of landing files that may have changed.
        """
        import pyarrow as pa

        from lakeshard.dedupe.keyhash import key_hashes
        from lakeshard.lake import write_partitioned

        self.cache.drop_shards(self.shards)  # cached intervals lack the IDs about to be rebuilt
        candidates = [f for f in self.store.files(self.events_uri) if _may_hold(f, "routed_version", -batch, -batch)]
        rows = self.store.read_arrow(self.events_uri, candidates, columns=[*EVENT_KEY, "shard", "routed_version"])
        rows = rows.filter(pa.array(rows.column("routed_version").to_numpy() == -batch))
        hi, lo = key_hashes(rows)
        rows = (rows.append_column("interval", own_hour_arrow(rows.column("ts")))
                .append_column("key_hi", pa.array(hi)).append_column("key_lo", pa.array(lo)))
        ids_schema = self.arrow_schema()
        self.store.append(self.ids_uri, None, app_transactions=[AppTransaction(FUSED_APP_ID, batch)],
                          metadata={"repair": True, "fused": batch},
                          write=lambda target: write_partitioned(rows, target, ids_schema, ["shard", "interval"],
                                                                 EVENT_KEY_HASH))
        return int(rows.num_rows)

    def _repair_spark(self, candidates: Sequence[FileInfo], behind: Sequence[int], lag: dict[int, int],
                      progress: dict[int, int], txns: Sequence[AppTransaction]) -> int:
        """Return how many IDs were rebuilt, reading the candidate event files with a Spark job."""
        from pyspark.sql import functions as F

        if not candidates:
            rows = self._spark().createDataFrame([], self.store.schema(self.ids_uri))
        else:
            events = self.store.read_files(self.events_uri, candidates)
            # A join with one small row per shard keeps the plan one node whatever the number of shards behind
            # (a predicate per shard grows the expression tree until the analyser overflows the JVM stack).
            bounds = self._spark().createDataFrame([(s, lag[s], progress[s]) for s in behind],
                                                   "shard int, _lag long, _progress long")
            version = F.col("routed_version")
            wanted = (events.join(F.broadcast(bounds), "shard")
                      .where((version > F.col("_lag")) & (version <= F.col("_progress"))))
            # Laid out as a step writes IDs: one file per (shard, interval), sorted by hash (a page-in's order).
            rows = (wanted.withColumns(key_hash_columns())
                    .withColumn("interval", own_hour()).select(*self.columns())
                    .repartition("shard", "interval").sortWithinPartitions("shard", "interval", *EVENT_KEY_HASH))
        rows = rows.persist()
        try:
            n = rows.count()
            if commits_per_shard(self.store):
                self._repair_by_shard(rows, {s: progress[s] for s in behind})
            else:
                self.store.append(self.ids_uri, rows, app_transactions=txns, metadata={"repair": True})
        finally:
            rows.unpersist()
        return n

    def _repair_arrow(self, candidates: Sequence[FileInfo], behind: Sequence[int], lag: dict[int, int],
                      progress: dict[int, int], txns: Sequence[AppTransaction]) -> int:
        """Return how many IDs were rebuilt, reading the candidate event files in the driver (no Spark job)."""
        import pyarrow as pa

        from lakeshard.dedupe.keyhash import key_hashes
        from lakeshard.lake import write_partitioned

        rows = self.store.read_arrow(self.events_uri, candidates, columns=[*EVENT_KEY, "shard", "routed_version"])
        shard, version = rows.column("shard").to_numpy(), rows.column("routed_version").to_numpy()
        # Each row's shard bounds by lookup in the sorted shards behind: one pass, whatever their number.
        order = np.array(sorted(behind), dtype=np.int64)
        at = np.minimum(np.searchsorted(order, shard), len(order) - 1)
        low = np.array([lag[s] for s in order], dtype=np.int64)[at]
        high = np.array([progress[s] for s in order], dtype=np.int64)[at]
        wanted = (order[at] == shard) & (version > low) & (version <= high)
        rows = rows.filter(pa.array(wanted))
        hi, lo = key_hashes(rows)
        rows = (rows.append_column("interval", own_hour_arrow(rows.column("ts")))
                .append_column("key_hi", pa.array(hi)).append_column("key_lo", pa.array(lo)))
        ids_schema = self.arrow_schema()
        if commits_per_shard(self.store):
            self._repair_by_shard(rows, {s: progress[s] for s in behind})
        else:
            self.store.append(self.ids_uri, None, app_transactions=txns, metadata={"repair": True},
                              write=lambda target: write_partitioned(rows, target, ids_schema, ["shard", "interval"],
                                                                     EVENT_KEY_HASH))
        return int(rows.num_rows)

    def _repair_by_shard(self, rows: DataFrame | pa.Table, versions: dict[int, int]) -> None:
        """Commit the rebuilt IDs of each shard behind on its own, with its ``writer/<shard>`` alone (a store whose
        commit carries one app transaction, :mod:`lakeshard.dedupe.commit`)."""
        from lakeshard.dedupe.commit import Layout, ShardCommits

        ShardCommits(self.store, lambda _: None).ids(
            self.ids_uri, rows, Layout(("shard", "interval"), EVENT_KEY_HASH), versions, metadata={"repair": True})

    def wrote(self, directory: str, written: Sequence[WrittenFile]) -> None:
        """Keep the rows of the ID files just written under ``directory``, a store's fresh write directory whose
        files are committed as ``<directory's name>/<file>``: merging their interval later takes them from memory
        instead of opening each file again (a run's own files are most of what its end-of-run merge reads).

        Only what the writer kept (:attr:`WrittenFile.rows`) is kept, up to :data:`_OWN_BYTES`, oldest dropped
        first. A file whose commit failed is never listed, so its rows are never used. Exact either way: a path
        names one immutable file, and the rows are the ones that file was written from.
        """
        name = directory.rstrip("/").rsplit("/", 1)[-1]
        for f in written:
            if f.rows is None:
                continue
            path = f"{name}/{f.path}"
            self._own[path] = f.rows
            self._own_bytes += f.rows.nbytes
        while self._own_bytes > _OWN_BYTES and self._own:
            self._own_bytes -= self._own.popitem(last=False)[1].nbytes

    def _forget(self, paths: Iterable[str]) -> None:
        for path in paths:
            if (rows := self._own.pop(path, None)) is not None:
                self._own_bytes -= rows.nbytes

    def _merge_rows(self, merge: dict[Interval, list[FileInfo]]) -> dict[Interval, list[pa.Table]]:
        """Return the rows of each interval's files, in the columns and types of ``event_ids``: the files this
        index wrote from memory (:meth:`wrote`), the others read on the store's reader threads."""
        import pyarrow as pa

        schema = self.arrow_schema()
        common = pa.schema([schema.field(n).with_nullable(True) for n in schema.names])
        parts: dict[Interval, list[pa.Table]] = {key: [] for key in merge}
        unread: dict[Interval, list[FileInfo]] = {}
        for key, files in merge.items():
            for f in files:
                rows = self._own.get(unquote(f.path))
                if rows is None:
                    unread.setdefault(key, []).append(f)
                    continue
                n = rows.num_rows
                values = {"shard": pa.array(np.full(n, key[0])), "interval": pa.array([key[1]] * n, pa.string())}
                own = pa.table({name: values[name] if name in values else rows.column(name)
                                for name in schema.names})
                parts[key].append(own.cast(common))
        if unread:
            for key, group in self.store.read_arrow_groups(self.ids_uri, unread).items():
                parts[key].append(group.select(schema.names).cast(common))
        return parts

    def compact(self, intervals: Iterable[Interval] | None = None) -> int:
        """Merge the ID files of each sealed interval of these shards with more than one file (``intervals``:
        only these; :meth:`mergeable`) into one file sorted by the key hash; return how many files were merged
        away (0 when there are none, or when another commit removed some of them first). See
        :meth:`lakeshard.dedupe.writer.ShardWriter.compact_ids`."""
        from lakeshard.lake import write_partitioned

        only = None if intervals is None else set(intervals)
        merge = {key: files for key, files in self.mergeable().items() if only is None or key in only}
        if not merge:
            return 0
        import pyarrow as pa

        runs = []
        for parts in self._merge_rows(merge).values():
            group = pa.concat_tables(parts)
            # Each file is sorted by the hash: a stable sort of the high half merges the runs.
            order = hash_order(group.column("key_hi").to_numpy(), group.column("key_lo").to_numpy())
            runs.append(group if order is None else group.take(pa.array(order)))
        rows = pa.concat_tables(runs)
        ids_schema = self.arrow_schema()
        doomed = [f.path for group in merge.values() for f in group]
        self._before_commit("id-compaction")
        metadata = {"compacted_intervals": sorted(f"{s}/{h}" for s, h in merge)}
        try:
            if self.store.writes_in_process:
                self.store.replace_files(
                    self.ids_uri, doomed, None, data_change=False, metadata=metadata,
                    # The partition sort is stable: each interval keeps its hash order.
                    write=lambda target: write_partitioned(rows, target, ids_schema, ["shard", "interval"],
                                                           plain=EVENT_KEY_HASH))
            else:  # the merged rows go to Spark (a Spark Connect session: no files written by this process)
                merged = (self.store.frame(self.ids_uri, rows).repartition("shard", "interval")
                          .sortWithinPartitions("shard", "interval", *EVENT_KEY_HASH))
                self.store.replace_files(self.ids_uri, doomed, merged, data_change=False, metadata=metadata)
        except CommitConflict:
            return 0  # an expiry or another writer's merge removed some of these files first: merged next time
        self._forget(unquote(path) for path in doomed)
        return len(doomed)

    def expire(self) -> int:
        """Delete the index partitions of these shards older than the retention; return files removed.

        The cutoff is per shard: the retention before the newest interval in its index.
        """
        files = self.store.files(self.ids_uri)
        self.saw_intervals(interval_of(f) for f in files)
        doomed = [f for f in files if (iv := interval_of(f))[0] in self.shards and iv[1] < self.cutoff_hour(iv[0])]
        if doomed:
            self.store.replace_files(self.ids_uri, [f.path for f in doomed], None, data_change=True,
                                     metadata={"expired_before": {str(s): self.cutoff_hour(s) for s in self.shards}})
            self.cache.drop_shards(self.shards)
            self._forget(unquote(f.path) for f in doomed)
        return len(doomed)


def own_hour() -> Column:
    """Return the event's own UTC hour, ``YYYY-MM-DDTHH``, as a Spark column: the ID index interval, whatever
    bucket the event lands in (:func:`own_hour_arrow` computes it in the driver)."""
    from pyspark.sql import functions as F

    return F.date_format("ts", SPARK_HOUR_FORMAT)


def own_hour_arrow(ts: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Return each timestamp's UTC hour as ``YYYY-MM-DDTHH`` (what :func:`own_hour` gives in Spark), formatting
    each distinct hour once: a batch spans a few hours, so this is integer division and a gather."""
    import pyarrow as pa
    import pyarrow.compute as pc

    micros = pc.cast(pc.cast(ts, pa.timestamp("us", tz="UTC")), pa.int64()).to_numpy(zero_copy_only=False)
    hours = np.floor_divide(micros, 3_600_000_000)
    distinct, index = np.unique(hours, return_inverse=True)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    text = [(epoch + timedelta(hours=int(h))).strftime(HOUR_FORMAT) for h in distinct]
    return pc.take(pa.array(text, pa.string()), pa.array(index.reshape(-1)))


def interval_of(f: FileInfo) -> Interval:
    """Return the ``(shard, hour)`` interval an ``event_ids`` file belongs to, from its partition values."""
    return int(f.partition_values["shard"] or -1), f.partition_values["interval"] or ""


def group_indices(shard: np.ndarray, hour: np.ndarray | pa.Array | pa.ChunkedArray) -> dict[Interval, np.ndarray]:
    """Return the row indices of each distinct ``(shard, hour)`` pair, ascending within a pair (``hour``: strings,
    as numpy or Arrow; never null)."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    if not len(shard):
        return {}
    if isinstance(hour, (pa.Array, pa.ChunkedArray)):
        encoded = pc.dictionary_encode(hour)
        encoded = encoded.combine_chunks() if isinstance(encoded, pa.ChunkedArray) else encoded
        hour_code = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        hours = encoded.dictionary.to_pylist()
    else:
        hour_code, hours = pd.factorize(hour)
    # One integer per pair; a stable sort keeps each pair's rows in ascending order.
    width = max(len(hours), 1)
    key = shard.astype(np.int64) * width + hour_code
    order = np.argsort(key, kind="stable")
    ranked = key[order]
    starts = np.flatnonzero(np.concatenate([[True], ranked[1:] != ranked[:-1]]))
    return {(k // width, str(hours[k % width])): idx.astype(np.int64, copy=False)
            for k, idx in zip(ranked[starts].tolist(), np.split(order, starts[1:]), strict=True)}


def _may_hold(f: FileInfo, column: str, low: int | None, high: int | None) -> bool:
    """Return whether a file's min/max statistics allow a value of ``column`` within [low, high]."""
    lo, hi = f.min_values.get(column), f.max_values.get(column)
    if lo is None or hi is None:
        return True
    return (low is None or int(hi) >= low) and (high is None or int(lo) <= high)


def _may_hold_any(f: FileInfo, column: str, values: Sequence[int]) -> bool:
    """Return whether a file's min/max statistics allow any of the sorted ``values`` in ``column``."""
    import bisect

    lo, hi = f.min_values.get(column), f.max_values.get(column)
    if lo is None or hi is None:
        return True
    first = bisect.bisect_left(values, int(lo))
    return first < len(values) and values[first] <= int(hi)
