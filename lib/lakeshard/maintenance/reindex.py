"""``lakeshard refill --ids``: the ID index partitions fsck removed, rebuilt from ``events``.

An ``event_ids`` file that ``lakeshard fsck --repair`` removed held the key hashes of events that are in
``events``: without them a copy of one of those events arriving again would pass dedupe and be written twice. The
events themselves say what was lost: an ID lives in the partition ``(shard, interval)`` of its event's shard and
own UTC hour, whatever bucket the event was written to (late events included). So a refill reads the events of
that shard whose ``ts`` statistics meet that hour, hashes their keys as the writers do, and appends to
``event_ids`` those the partition's remaining files do not hold, each with the ``routed_version`` its event row
carries. Nothing is parsed again: the landing zone may have changed or gone since.

The commit carries the app transaction ``refill-ids/<shard>/<interval>``
(:func:`~lakeshard.tables.id_refill_app_id`) at the number of that partition's files fsck removed, so a refill
run twice (or crashed and run again) commits once, and a file a refill wrote that fsck removes in turn is rebuilt
again. A writer running meanwhile keeps the IDs it cached; the next one to page the partition in reads them back.

Example::

    for refill in plan_id_refills(store, cfg).pending:
        refill_ids(store, cfg, refill)
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeshard.lake import AppTransaction
from lakeshard.tables import EVENTS, FSCK_REPAIRS, HOUR_FORMAT, ID_INDEX, id_refill_app_id

if TYPE_CHECKING:
    from lakeshard.config import LakeshardConfig
    from lakeshard.lake import CommitResult, FileInfo, TableStore

__all__ = ["IdRefill", "IdRefills", "plan_id_refills", "refill_ids"]


@dataclass(frozen=True, eq=False)  # an Arrow table has no meaningful equality
class IdRefill:
    """One ``(shard, interval)`` partition of the ID index rebuilt: ``rows`` in ``event_ids``' columns (the keys
    its remaining files lack), ``removed`` the rows the log said fsck's removed files held, ``version`` the app
    transaction's (how many of the partition's files were removed)."""

    shard: int
    interval: str
    version: int
    removed: int
    rows: pa.Table

    @property
    def app_transaction(self) -> AppTransaction:
        """Return the app transaction the refill's commit carries (a replay of it is skipped)."""
        return AppTransaction(id_refill_app_id(self.shard, self.interval), self.version)


@dataclass(frozen=True)
class IdRefills:
    """The partitions still to rebuild, and how many an earlier run rebuilt already."""

    pending: tuple[IdRefill, ...]
    done: int


def plan_id_refills(store: TableStore, cfg: LakeshardConfig) -> IdRefills:
    """Return the rebuild of every ``event_ids`` partition ``fsck_repairs`` records a removed file of (those an
    earlier run committed are counted in ``done``, not planned)."""
    ids_uri, events_uri = cfg.table_uri(ID_INDEX), cfg.table_uri(EVENTS)
    if not store.exists(ids_uri) or not store.exists(cfg.table_uri(FSCK_REPAIRS)):
        return IdRefills((), 0)
    repairs = store.read_table_arrow(cfg.table_uri(FSCK_REPAIRS), ["partition_values", "rows"],
                                     where=pc.field("table_name") == ID_INDEX).to_pylist()
    files: Counter[tuple[int, str]] = Counter()
    rows: Counter[tuple[int, str]] = Counter()
    for r in repairs:
        values = json.loads(r["partition_values"])
        key = int(values["shard"]), str(values["interval"])
        files[key] += 1
        rows[key] += int(r["rows"] or 0)
    pending, done = [], 0
    live = store.files(events_uri) if files and store.exists(events_uri) else []
    schema = store.arrow_schema(ids_uri)
    for (shard, interval), version in sorted(files.items()):
        if (store.transaction_version(ids_uri, id_refill_app_id(shard, interval)) or 0) >= version:
            done += 1
            continue
        lost = _lost_ids(store, ids_uri, events_uri, live, shard, interval, schema)
        pending.append(IdRefill(shard, interval, version, rows[shard, interval], lost))
    return IdRefills(tuple(pending), done)


def refill_ids(store: TableStore, cfg: LakeshardConfig, refill: IdRefill) -> CommitResult:
    """Return the commit appending ``refill``'s rows to ``event_ids`` (skipped when an earlier run committed it)."""
    meta = {"refill_ids": {"shard": refill.shard, "interval": refill.interval, "rows": refill.rows.num_rows,
                           "removed": refill.removed}}
    return store.append_arrow(cfg.table_uri(ID_INDEX), refill.rows, app_transactions=[refill.app_transaction],
                              metadata=meta)


def _lost_ids(store: TableStore, ids_uri: str, events_uri: str, live: list[FileInfo], shard: int, interval: str,
              schema: pa.Schema) -> pa.Table:
    """Return the ID rows of the events of ``shard`` whose own hour is ``interval`` that the partition's remaining
    ``event_ids`` files do not hold, in ``schema``."""
    from lakeshard.dedupe import key_hashes, own_hour_arrow
    from lakeshard.tables import EVENT_KEY

    start = datetime.strptime(interval, HOUR_FORMAT).replace(tzinfo=UTC)
    candidates = [f for f in live if _may_hold(f, shard, start, start + timedelta(hours=1))]
    columns = [*EVENT_KEY, "shard", "routed_version"]
    events = store.read_arrow(events_uri, candidates, columns=columns) if candidates else None
    if events is None or not events.num_rows:
        return schema.empty_table()
    events = events.filter(pc.equal(events.column("shard"), pa.scalar(shard, events.schema.field("shard").type)))
    events = events.filter(pc.equal(own_hour_arrow(events.column("ts")), interval))
    hi, lo = key_hashes(events)
    held = store.read_table_arrow(ids_uri, ["key_hi", "key_lo"],
                                  where=(pc.field("shard") == shard) & (pc.field("interval") == interval))
    have = set(zip(held.column("key_hi").to_pylist(), held.column("key_lo").to_pylist(), strict=True))
    missing = np.array([(h, low) not in have for h, low in zip(hi.tolist(), lo.tolist(), strict=True)], dtype=bool)
    rows = (events.append_column("interval", pa.array([interval] * events.num_rows, pa.string()))
            .append_column("key_hi", pa.array(hi)).append_column("key_lo", pa.array(lo))).filter(pa.array(missing))
    return rows.select(schema.names).cast(schema)


def _may_hold(f: FileInfo, shard: int, start: datetime, end: datetime) -> bool:
    """Return whether an ``events`` file's statistics allow rows of ``shard`` with ``ts`` in ``[start, end)``."""
    lo, hi = f.min_values.get("shard"), f.max_values.get("shard")
    if lo is not None and hi is not None and not int(lo) <= shard <= int(hi):
        return False
    span = f.time_range("ts")
    return span is None or (span[0] < end and span[1] >= start)
