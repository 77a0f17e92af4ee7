"""The invariants a fault campaign checks after every round (bench/chaos.py), read from a real lakehouse.

* ``events`` holds each event of the generator's truth exactly once: an event the landing zone still holds
  (the truth as of now, since a fault may truncate or remove a landing file) and ``events`` lacks is **lost**;
  a second row of one event key is **duplicated**; a key the truth never had is **invented**.
* Every closed bucket keeps its recorded checksum and its rows (hashed here with the bucket checksum's formula,
  :func:`lakeshard.buckets.checksum.rowhash2_groups`) from the round it was first seen closed.
* ``quarantine`` holds each rejected record once (files the campaign rewrote in place are left out: their bad
  lines are new records of a new file version).
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["ClosedBucket", "Ledger", "RoundCheck", "check_round", "closed_buckets", "landing_keys", "open_store",
           "truth_keys"]

Key = tuple[str, str]


@dataclass(frozen=True)
class ClosedBucket:
    """A closed bucket as first seen: its recorded checksum and rows, and the checksum of its rows read then."""

    recorded: str
    rows: int
    read: str


@dataclass
class Ledger:
    """What the checker carries from round to round: closed buckets as first seen, files rewritten in place, and
    the events found lost or duplicated at an earlier check (a campaign counts each such event once, not once per
    round it stays so)."""

    closed: dict[Key, ClosedBucket] = field(default_factory=dict)
    rewritten: set[str] = field(default_factory=set)  # landing file names (basename) rewritten in place
    lost: set[Key] = field(default_factory=set)
    duplicated: set[Key] = field(default_factory=set)


@dataclass(frozen=True)
class RoundCheck:
    """The invariants after one round: counts that must all be 0, and what they were counted over."""

    lost: int
    duplicated: int
    invented: int
    closed_changed: int
    quarantine_repeated: int
    events: int
    expected: int
    closed: int
    examples: tuple[str, ...] = ()
    lost_new: int = 0  # of ``lost``, the events no earlier check of the campaign found lost
    duplicated_new: int = 0  # of ``duplicated``, the extra rows of keys no earlier check found duplicated

    @property
    def broken(self) -> bool:
        """Return whether any invariant broke."""
        return bool(self.lost or self.duplicated or self.invented or self.closed_changed or self.quarantine_repeated)

    def as_dict(self) -> dict[str, Any]:
        return {"lost": self.lost, "duplicated": self.duplicated, "invented": self.invented,
                "closed_changed": self.closed_changed, "quarantine_repeated": self.quarantine_repeated,
                "events": self.events, "expected": self.expected, "closed": self.closed,
                "examples": list(self.examples), "lost_new": self.lost_new, "duplicated_new": self.duplicated_new}


def open_store(lakehouse: Path) -> tuple[Any, Any]:
    """Return ``(store, cfg)``: the embedded store reading ``lakehouse`` (tables either engine wrote)."""
    from lakeshard.config import load_config
    from lakeshard.lake import open_lazy_store

    cfg = load_config(overrides={"lakehouse": str(lakehouse), "spark": {"adapter": "embedded"}}, env={})
    return open_lazy_store(cfg), cfg


def truth_keys(landing: Path) -> set[Key]:
    """Return the (tenant_id, event_id) of every event the generator's runs under ``landing`` wrote."""
    keys: set[Key] = set()
    for truth in sorted(landing.glob("**/_truth/events.parquet")):
        t = pq.read_table(truth, columns=["tenant_id", "event_id"])
        keys.update(zip(t.column("tenant_id").to_pylist(), t.column("event_id").to_pylist(), strict=True))
    return keys


def _complete_lines(path: Path) -> list[bytes]:
    """Return the newline-ended lines of a landing file as they can be read now (a cut gzip file: its readable
    head)."""
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        unpack = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            raw = unpack.decompress(raw)
        except zlib.error:
            try:
                raw = gzip.decompress(raw)
            except (OSError, EOFError, zlib.error):
                raw = b""
    lines = raw.split(b"\n")
    return lines[:-1]  # the last piece has no newline: a whole file ends with one, a cut file's tail is partial


def landing_keys(landing: Path) -> set[Key]:
    """Return the (tenant_id, event_id) of every record the landing zone holds now, read line by line."""
    keys: set[Key] = set()
    for path in landing.rglob("*"):
        if not path.is_file() or "_truth" in path.parts or path.name.startswith((".", "_")):
            continue
        for line in _complete_lines(path):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                tenant, event = record.get("tenant_id"), record.get("event_id")
                if isinstance(tenant, str) and isinstance(event, str):
                    keys.add((tenant, event))
    return keys


def closed_buckets(store: Any, cfg: Any) -> dict[Key, tuple[str, int]]:
    """Return the (recorded checksum, rows) of every bucket ``buckets`` holds as closed."""
    from lakeshard.tables import BUCKETS

    uri = cfg.table_uri(BUCKETS)
    if not store.exists(uri):
        return {}
    rows = store.read_table_arrow(uri, ["tenant_id", "hour", "state", "checksum", "rows"]).to_pylist()
    return {(r["tenant_id"], r["hour"]): (str(r["checksum"]), int(r["rows"] or 0))
            for r in rows if r["state"] == "closed"}


def _bucket_hashes(events: pa.Table, buckets: set[Key]) -> dict[Key, str]:
    from lakeshard.buckets.checksum import rowhash2_groups

    if not buckets:
        return {}
    tenants, hours = events.column("tenant_id").to_pylist(), events.column("hour").to_pylist()
    rows: dict[Key, list[int]] = {b: [] for b in buckets}
    for i, key in enumerate(zip(tenants, hours, strict=True)):
        if key in rows:
            rows[key].append(i)
    groups = {b: events.take(pa.array(ix, pa.int64())) for b, ix in rows.items()}
    return {b: got[2] for b, got in rowhash2_groups(groups).items()}


def check_round(lakehouse: Path, landing: Path, ledger: Ledger) -> RoundCheck:
    """Return the invariants of the lakehouse against the landing zone's truth, updating ``ledger``'s closed
    buckets with those closed since the last check."""
    from lakeshard.tables import EVENTS, QUARANTINE

    store, cfg = open_store(lakehouse)
    truth = truth_keys(landing)
    expected = truth & landing_keys(landing)
    events = store.read_table_arrow(cfg.table_uri(EVENTS)) if store.exists(cfg.table_uri(EVENTS)) else None
    counts: Counter[Key] = Counter()
    if events is not None:
        counts.update(zip(events.column("tenant_id").to_pylist(), events.column("event_id").to_pylist(),
                          strict=True))
    lost = sorted(expected - counts.keys())
    duplicated = {k: n for k, n in counts.items() if n > 1}
    invented = sorted(counts.keys() - truth)
    examples = [f"lost {k}" for k in lost[:3]] + [f"duplicated {k} x{n}" for k, n in list(duplicated.items())[:3]]
    examples += [f"invented {k}" for k in invented[:3]]

    closed_now = closed_buckets(store, cfg)
    hashes = _bucket_hashes(events, set(closed_now)) if events is not None else {}
    changed = 0
    for bucket, (recorded, rows) in closed_now.items():
        read = hashes.get(bucket, "")
        first = ledger.closed.setdefault(bucket, ClosedBucket(recorded, rows, read))
        if (recorded, rows, read) != (first.recorded, first.rows, first.read):
            changed += 1
            examples.append(f"closed bucket {bucket} changed: {first} -> {(recorded, rows, read)}")
    changed += sum(1 for b in ledger.closed if b not in closed_now)  # a closed bucket that is no longer closed

    repeated = 0
    q_uri = cfg.table_uri(QUARANTINE)
    if store.exists(q_uri):
        q = store.read_table_arrow(q_uri, ["source_file", "line_number", "start_byte", "end_byte", "reason"])
        keys = Counter((r["source_file"], r["line_number"], r["start_byte"], r["end_byte"], r["reason"])
                       for r in q.to_pylist()
                       if not r["source_file"] or Path(r["source_file"]).name not in ledger.rewritten)
        repeated = sum(n - 1 for n in keys.values() if n > 1)
        examples += [f"quarantined {n}x: {k}" for k, n in list(keys.items()) if n > 1][:3]
    lost_new = len(set(lost) - ledger.lost)
    duplicated_new = sum(n - 1 for k, n in duplicated.items() if k not in ledger.duplicated)
    ledger.lost.update(lost)
    ledger.duplicated.update(duplicated)
    return RoundCheck(lost=len(lost), duplicated=sum(n - 1 for n in duplicated.values()), invented=len(invented),
                      closed_changed=changed, quarantine_repeated=repeated, events=sum(counts.values()),
                      expected=len(expected), closed=len(closed_now), examples=tuple(examples[:8]),
                      lost_new=lost_new, duplicated_new=duplicated_new)
