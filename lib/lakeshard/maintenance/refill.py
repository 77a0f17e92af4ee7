"""``lakeshard refill``: the events a repaired bucket lost, restored from the landing bytes that fed it.

After ``lakeshard fsck --repair`` removed a damaged ``events`` file, its rows are gone from the bucket but their
keys are still in the ID index (``event_ids``): they were committed, and a copy arriving again is a duplicate.
So a refill does not route the landing files again (the writers would drop every event as a duplicate); it
finds exactly the lost events and commits them back to ``events``:

1. the hours whose events the bucket can hold: its own, and the tenant's closed hours before it (an event of a
   closed hour is written late to its tenant's open bucket), narrowed to the ``ts`` range the removed files'
   statistics give when the log still holds them;
2. the batches that fed those hours: ``routing_metrics`` counts each batch's events per tenant and placement
   window, so the batches with the tenant's events in those hours' windows; for an hour older than the metrics
   keep (they expire), every batch planned since that hour began (less ``landing_format.max_future_seconds``);
3. their plans in ``landing_batches``: the byte ranges of the landing files, their checksums and each plan's
   clock; parsed again as the router parsed them (same bytes, same clock, so the same verdicts);
4. the lost events: the tenant's events of those hours whose key the ID index holds (committed) and no live row of
   the tenant does (an event of a closed hour may be in that hour's bucket, or late in another). The index also
   gives each its ``shard`` and ``routed_version``; an event of another hour is ``late``, so the row committed is
   the one the writer committed, column for column.

A landing file whose planned bytes changed since (rewritten) is read whole as it is now: a lost event it still
holds is found by its key. The ID index stays as it is: it already holds those keys, and after the refill the rows
are there too. A second refill finds nothing lost and commits nothing. What fsck removed, less what this refill and
the earlier ones (the refill commits of the log's history) restored, is the shortfall: rows no landing file holds
any more (a file gone or cut short since), reported with the files that were not as planned, never hidden.

A late event is restored to the bucket asked for when several of the tenant's buckets (a closed one of its own
hour included) lost files whose ``ts`` ranges hold it (or the log no longer gives the ranges): exactly once, in the
first bucket refilled.

A closed bucket is refused: its rows are final and its checksum is recorded; a refill would change it.

Example::

    plan = plan_refill(store, cfg, "acme", "2026-01-01T03")
    result = refill_bucket(store, cfg, plan)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeshard.dedupe import first_of_each_key, key_hashes
from lakeshard.landing import LandingFile, category_of
from lakeshard.maintenance.errors import RefillRefused
from lakeshard.maintenance.fsck import repair_commits
from lakeshard.tables import (
    BUCKETS,
    EVENT_COLUMNS,
    EVENT_KEY,
    EVENTS,
    FSCK_REPAIRS,
    ID_INDEX,
    LANDING_BATCHES,
    ROUTING_METRICS,
    hour_of,
)
from lakeshard.utc import aware, millis

if TYPE_CHECKING:
    from collections.abc import Sequence

    from lakeshard.config import LakeshardConfig
    from lakeshard.lake import CommitInfo, CommitResult, TableStore

__all__ = ["REFILL_OPERATION", "RefillPlan", "plan_refill", "refill_bucket"]

REFILL_OPERATION = "lakeshard.refill"  # the commit metadata key describing a refill


@dataclass(frozen=True, eq=False)  # an Arrow table has no meaningful equality
class RefillPlan:
    """The events one bucket lost, found in the landing bytes that fed it.

    ``rows`` are in ``events``' columns; ``removed`` is what ``fsck_repairs`` records as removed from the bucket
    (rows by the log), ``restored`` what earlier refills of the bucket committed back (by the log's history),
    ``found`` how many of the tenant's events of the hours the bucket can hold (its own, and the closed ones that
    could send it late events) the batches' landing bytes hold, ``problems`` the landing files that were not as
    their batches planned them (changed, so read as they are now; gone or unreadable), one line each.
    """

    tenant_id: str
    hour: str
    batches: tuple[int, ...]
    rows: pa.Table
    removed: int
    found: int
    restored: int = 0
    problems: tuple[str, ...] = ()

    @property
    def missing(self) -> int:
        """Return how many rows fsck removed from the bucket that neither an earlier refill nor this one gives
        back (0 when every removed row is restored; never less than the truth, more when a refill older than the
        log's history restored some)."""
        return max(self.removed - self.restored - int(self.rows.num_rows), 0)


def plan_refill(store: TableStore, cfg: LakeshardConfig, tenant_id: str, hour: str) -> RefillPlan:
    """Return the plan of refilling bucket ``(tenant_id, hour)``: the lost events, read from the landing bytes.

    Raises:
        RefillRefused: the bucket is closed, or the lakehouse has no ``events``/``event_ids``/batch plans to
            refill from.
        DamagedDataFile: a live file of the bucket is damaged still (``lakeshard fsck --repair`` first).
    """
    from lakeshard.buckets import closed_table

    bucket = f"{tenant_id}/{hour}"
    needed = [t for t in (EVENTS, ID_INDEX, LANDING_BATCHES, ROUTING_METRICS) if not store.exists(cfg.table_uri(t))]
    if needed:
        raise RefillRefused(f"cannot refill bucket {bucket}: {cfg.lakehouse} has no {', '.join(needed)} table")
    closed = (closed_table(store, cfg.table_uri(BUCKETS)).to_pylist() if store.exists(cfg.table_uri(BUCKETS))
              else [])
    if {"tenant_id": tenant_id, "hour": hour} in closed:
        raise RefillRefused(f"cannot refill bucket {bucket}: it is closed, so its rows are final and its "
                            "checksum recorded; a closed bucket is not changed")
    history = store.history(cfg.table_uri(EVENTS))  # read once: for the repairs' span and the refills so far
    repairs = _repairs(store, cfg, tenant_id, hour)
    span = _removed_span(store, cfg, repairs, history)
    # Late events come only from the tenant's hours closed before the bucket (an open hour keeps its own events).
    late_hours = sorted(r["hour"] for r in closed if r["tenant_id"] == tenant_id and r["hour"] < hour
                        and (span is None or hour_of(span[0]) <= r["hour"] <= hour_of(span[1])))
    own_hours = [*late_hours, hour]
    batches = _batches_of(store, cfg, tenant_id, set(own_hours))
    parsed, problems = _parsed(store, cfg, batches)
    parsed = parsed.filter(pc.and_(pc.equal(parsed.column("tenant_id"), tenant_id),
                                   pc.is_in(_hours(parsed.column("ts")), pa.array(own_hours, pa.string()))))
    rows = _lost(store, cfg, parsed, tenant_id, hour, own_hours, span)
    return RefillPlan(tenant_id, hour, tuple(batches), rows, int(pc.sum(repairs.column("rows")).as_py() or 0),
                      parsed.num_rows, _restored(history, tenant_id, hour), problems)


def refill_bucket(store: TableStore, cfg: LakeshardConfig, plan: RefillPlan) -> CommitResult | None:
    """Return the commit that added ``plan``'s rows to ``events`` (one commit), or None when nothing was lost."""
    if not plan.rows.num_rows:
        return None
    meta = {"tenant_id": plan.tenant_id, "hour": plan.hour, "rows": plan.rows.num_rows,
            "batches": list(plan.batches), "removed": plan.removed}
    return store.append_arrow(cfg.table_uri(EVENTS), plan.rows, metadata={REFILL_OPERATION: meta})


def _batches_of(store: TableStore, cfg: LakeshardConfig, tenant_id: str, hours: set[str]) -> list[int]:
    """Return the batches that routed events of ``tenant_id`` in placement windows of ``hours``.

    ``routing_metrics`` names them while it keeps their windows; it expires rows older than
    :func:`~lakeshard.maintenance.bookkeeping.metrics_retention` before its newest window. For an hour older than
    that, every batch planned since the hour began, less how far ahead of its arrival an event may be stamped
    (``landing_format.max_future_seconds``), is taken: more bytes to read again, none of the bucket's missed.
    """
    from lakeshard.maintenance.bookkeeping import metrics_retention

    metrics = store.read_table_arrow(cfg.table_uri(ROUTING_METRICS), ["tenant_id", "window_start", "batch"])
    mine = metrics.filter(pc.equal(metrics.column("tenant_id"), tenant_id)).to_pylist()
    batches = {int(r["batch"]) for r in mine if hour_of(aware(r["window_start"])) in hours}
    earliest = datetime.strptime(min(hours), "%Y-%m-%dT%H").replace(tzinfo=UTC)
    newest = pc.max(metrics.column("window_start")).as_py() if metrics.num_rows else None
    if newest is None or earliest < aware(newest) - metrics_retention(cfg) + timedelta(hours=1):
        since = earliest - timedelta(seconds=cfg.landing_format.max_future_seconds)
        plans = store.read_table_arrow(cfg.table_uri(LANDING_BATCHES), ["batch", "planned_at"])
        batches |= {int(r["batch"]) for r in plans.to_pylist() if aware(r["planned_at"]) >= since}
    return sorted(batches)


def _parsed(store: TableStore, cfg: LakeshardConfig, batches: list[int]) -> tuple[pa.Table, tuple[str, ...]]:
    """Return the events of the batches' planned landing bytes, parsed by each plan's clock, in batch order, each
    with its ``batch``; and what was not as planned, one line per landing file.

    A file whose planned bytes changed since (rewritten: the same records in other bytes, or other records) is read
    whole as it is now: a lost event it still holds is found by its key all the same. A file that is gone or cannot
    be read gives nothing, and is named."""
    from lakeshard.landing import FILE_CHANGED, UNREADABLE_FILE, parse_landing_arrow
    from lakeshard.routing import planned_file

    if not batches:
        tenant, event, when = EVENT_KEY
        return pa.table({tenant: pa.array([], pa.string()), event: pa.array([], pa.string()),
                         when: pa.array([], pa.timestamp("us", tz="UTC")), "batch": pa.array([], pa.int64())}), ()
    plans = store.read_table_arrow(cfg.table_uri(LANDING_BATCHES),
                                   where=pc.field("batch").isin(pa.array(batches, pa.int64()))).to_pylist()
    parts: list[pa.Table] = []
    problems: dict[str, str] = {}
    for batch in batches:
        rows = [r for r in plans if int(r["batch"]) == batch]
        if not rows:
            continue
        files = sorted((planned_file(r) for r in rows), key=lambda f: f.path)
        clock = max(millis(aware(r["planned_at"])) for r in rows)
        events, quarantine = parse_landing_arrow(files, limits=cfg.landing_format, now_ms=clock)
        changed = [path for path, category, _ in _file_rows(quarantine) if category == FILE_CHANGED]
        if changed:  # read as the files are now, whole (their events keep their line numbers)
            whole = [LandingFile(f.path, f.size_bytes, f.mtime, target=f.target) for f in files if f.path in changed]
            again, unread = parse_landing_arrow(whole, limits=cfg.landing_format, now_ms=clock)
            events = pa.concat_tables([events, again.cast(events.schema)])
            quarantine = pa.concat_tables([quarantine, unread.cast(quarantine.schema)])
        gone = {path: f"{path} (batch {batch}): gone or unreadable ({detail})"
                for path, category, detail in _file_rows(quarantine) if category == UNREADABLE_FILE}
        problems |= gone | {path: f"{path} (batch {batch}): changed since its batch was planned; read as it is now"
                            for path in changed if path not in gone}
        parts.append(events.append_column("batch", pa.array(np.full(events.num_rows, batch, np.int64))))
    if not parts:
        return _parsed(store, cfg, [])
    return pa.concat_tables(parts), tuple(problems.values())


def _file_rows(quarantine: pa.Table) -> list[tuple[str, str, str]]:
    """Return (file, category, detail) of each quarantine row of a parse."""
    return [(path, category_of(reason), reason.split(":", 1)[-1].strip()) for path, reason in
            zip(quarantine.column("source_file").to_pylist(), quarantine.column("reason").to_pylist(), strict=True)]


def _hours(ts: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Return each timestamp's UTC hour as ``YYYY-MM-DDTHH`` (the bucket hour format)."""
    return pc.strftime(pc.cast(ts, pa.timestamp("us", tz="UTC")), format="%Y-%m-%dT%H")


def _lost(store: TableStore, cfg: LakeshardConfig, parsed: pa.Table, tenant_id: str, hour: str,
          own_hours: list[str], span: tuple[datetime, datetime] | None) -> pa.Table:
    """Return the events of ``parsed`` (of ``own_hours``) the ID index holds and no live row of the tenant does,
    once each (the copy the writers kept: first in landing order), as rows of bucket ``hour`` with the index's
    ``shard`` and ``routed_version``; an event of another hour is ``late``, and kept only inside the removed files'
    ``ts`` range ``span`` (when known)."""
    schema = store.arrow_schema(cfg.table_uri(EVENTS))
    if not parsed.num_rows:
        return schema.empty_table()
    hi, lo = key_hashes(parsed)
    kept = first_of_each_key(hi, lo, [parsed.column(c) for c in ("batch", "source_file", "line_number")])
    first = pa.table({"row": pa.array(kept), "key_hi": hi[kept], "key_lo": lo[kept]})
    index = store.read_table_arrow(cfg.table_uri(ID_INDEX), ["shard", "routed_version", "key_hi", "key_lo"],
                                   where=pc.field("interval").isin(pa.array(own_hours, pa.string())))
    committed = first.join(index, ["key_hi", "key_lo"], join_type="inner", use_threads=False)
    live = _live_keys(store, cfg, tenant_id, own_hours[0])
    lost = committed.join(live, ["key_hi", "key_lo"], join_type="left anti", use_threads=False).sort_by("row")
    events = parsed.take(lost.column("row"))
    late = pc.not_equal(_hours(events.column("ts")), hour)
    if span is not None:  # a late event outside every removed file's ts range was not in this bucket
        ts = pc.cast(events.column("ts"), pa.timestamp("us", tz="UTC"))
        inside = pc.and_(pc.greater_equal(ts, pa.scalar(span[0], ts.type)),
                         pc.less_equal(ts, pa.scalar(span[1], ts.type)))
        keep = pc.or_(pc.invert(late), inside)
        events, lost, late = events.filter(keep), lost.filter(keep), late.filter(keep)
    events = events.select(list(EVENT_COLUMNS))
    n = events.num_rows
    columns: dict[str, Any] = {name: events.column(name) for name in EVENT_COLUMNS}
    columns |= {"shard": lost.column("shard"), "routed_version": lost.column("routed_version"),
                "hour": pa.array([hour] * n, pa.string()), "late": late}
    return pa.table({f.name: columns[f.name] for f in schema}).cast(schema)


def _live_keys(store: TableStore, cfg: LakeshardConfig, tenant_id: str, since: str) -> pa.Table:
    """Return the key hashes of the tenant's live ``events`` rows in buckets from hour ``since`` on (where a copy of
    an event of that hour or later can be: its own bucket, or a later one it came late to)."""
    uri = cfg.table_uri(EVENTS)
    files = [f for f in store.files(uri) if f.partition_values.get("tenant_id") == tenant_id
             and str(f.partition_values.get("hour")) >= since]
    live = store.read_arrow(uri, files, list(EVENT_KEY))
    live_hi, live_lo = key_hashes(live)
    return pa.table({"key_hi": live_hi, "key_lo": live_lo})


def _removed_span(store: TableStore, cfg: LakeshardConfig, repairs: pa.Table, history: Sequence[CommitInfo]
                  ) -> tuple[datetime, datetime] | None:
    """Return the smallest and largest ``ts`` the statistics of the files fsck removed (``repairs``: the bucket's
    ``fsck_repairs`` rows) held (the snapshot before each repair commit gives them), or None when the log no longer
    gives every such file's range."""
    wanted = {str(path) for path in repairs.column("path").to_pylist()}
    if not wanted:
        return None
    ranges = []
    for _, before in repair_commits(store, cfg.table_uri(EVENTS), set(wanted), history):
        if before is None:
            return None
        ranges += [r for f in before.values() if (r := f.time_range("ts")) is not None]
        wanted -= {f.path for f in before.values() if f.time_range("ts") is not None}
    if wanted or not ranges:
        return None
    return min(r[0] for r in ranges), max(r[1] for r in ranges)


def _repairs(store: TableStore, cfg: LakeshardConfig, tenant_id: str, hour: str) -> pa.Table:
    """Return the ``fsck_repairs`` rows of the bucket's ``events`` files (path and rows by the log)."""
    if not store.exists(cfg.table_uri(FSCK_REPAIRS)):
        return pa.table({"path": pa.array([], pa.string()), "rows": pa.array([], pa.int64())})
    return store.read_table_arrow(cfg.table_uri(FSCK_REPAIRS), ["path", "rows"],
                                  where=(pc.field("table_name") == EVENTS) & (pc.field("tenant_id") == tenant_id)
                                  & (pc.field("hour") == hour))


def _restored(history: Sequence[CommitInfo], tenant_id: str, hour: str) -> int:
    """Return the rows the refills of the bucket ``events``' history still holds committed back to ``events``."""
    rows = 0
    for commit in history:
        meta = commit.custom_metadata.get(REFILL_OPERATION)
        if isinstance(meta, str):
            meta = json.loads(meta)
        if isinstance(meta, dict) and (meta.get("tenant_id"), meta.get("hour")) == (tenant_id, hour):
            rows += int(meta.get("rows") or 0)
    return rows
