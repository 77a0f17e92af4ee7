"""Which hourly buckets may close, and where late events go: pure functions over plain data (no Spark).

Spotify's completionist closes an hourly bucket when two signals agree: the last file written into
it is old enough (the bucket has gone quiet), and the oldest message still unacknowledged upstream
is younger than the hour (nothing of that hour can still be on its way). Here the two signals are:

* **quiet**: the newest data file of the bucket in ``events`` (its add action's modification time)
  is at least ``quiet`` old;
* **backlog**: the *watermark* — the arrival time of the oldest landing input not yet routed, or now
  when everything is routed — is at least ``grace`` past the hour's end; and no input known to hold
  events of the bucket is still unconsumed: neither an unrouted landing file nor routed rows a shard
  writer has not committed yet (writer lag).

Closed buckets are immutable: a late ("skewed") event of a closed bucket goes to its tenant's open
bucket — the first hour at or after now that is not closed — keeping its true ``ts`` and flagged late.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from lakeshard.tables import hour_of, parse_hour

__all__ = [
    "Backlog",
    "BucketDecision",
    "BucketObservation",
    "hour_end",
    "hour_of",
    "late_target",
    "open_hour",
    "plan_closures",
]

Bucket = tuple[str, str]  # (tenant_id, hour "YYYY-MM-DDTHH")
_HOUR = timedelta(hours=1)


def hour_end(hour: str) -> datetime:
    """Return the first instant after the hour ``YYYY-MM-DDTHH``."""
    return parse_hour(hour) + _HOUR


@dataclass(frozen=True)
class BucketObservation:
    """What ``events`` shows of one bucket: its newest file's write time and its rows (file statistics)."""

    tenant_id: str
    hour: str
    newest_file_at: datetime
    rows: int


@dataclass(frozen=True)
class Backlog:
    """What may still be on its way into ``events``.

    ``watermark``: arrival time of the oldest landing input not routed yet (now, when there is none).
    ``in_flight``: buckets with events known to be unconsumed — in an unrouted landing file, or routed
    but not yet committed by a shard writer.
    """

    watermark: datetime
    in_flight: frozenset[Bucket] = field(default_factory=frozenset)
    oldest_input: str = ""  # the landing file that sets the watermark, for the reason text


@dataclass(frozen=True)
class BucketDecision:
    """Whether one bucket closes now, and why (or why not)."""

    tenant_id: str
    hour: str
    close: bool
    reason: str


def plan_closures(
    buckets: Iterable[BucketObservation],
    backlog: Backlog,
    closed: Collection[Bucket],
    *,
    now: datetime,
    quiet: timedelta,
    grace: timedelta,
) -> list[BucketDecision]:
    """Return a decision for every bucket not closed yet (pure; sorted by hour, then tenant).

    A bucket closes when it has been quiet for ``quiet``, the watermark is ``grace`` past its hour's end,
    and none of its events is known to be in flight. So with no backlog every bucket closes at the
    latest ``max(newest file + quiet, hour end + grace)``.
    """
    out = []
    for b in sorted(buckets, key=lambda b: (b.hour, b.tenant_id)):
        if (b.tenant_id, b.hour) in closed:
            continue
        out.append(BucketDecision(b.tenant_id, b.hour, *_decide(b, backlog, now, quiet, grace)))
    return out


def _decide(b: BucketObservation, backlog: Backlog, now: datetime, quiet: timedelta, grace: timedelta
            ) -> tuple[bool, str]:
    idle = now - b.newest_file_at
    due = hour_end(b.hour) + grace
    if (b.tenant_id, b.hour) in backlog.in_flight:
        return False, "events of this hour are still unconsumed upstream (unrouted landing input or writer lag)"
    if idle < quiet:
        return False, f"last file written {_span(idle)} ago; quiet period is {_span(quiet)}"
    if backlog.watermark < due:
        source = f" ({backlog.oldest_input})" if backlog.oldest_input else ""
        return False, (f"oldest unconsumed input arrived {backlog.watermark:%Y-%m-%dT%H:%M:%SZ}{source}, before the "
                       f"hour's end + grace {due:%Y-%m-%dT%H:%M:%SZ}")
    return True, (f"quiet for {_span(idle)} (>= {_span(quiet)}); backlog watermark "
                  f"{backlog.watermark:%Y-%m-%dT%H:%M:%SZ} is past the hour's end + grace")


def _span(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def open_hour(tenant_id: str, now: datetime, closed: Collection[Bucket]) -> str:
    """Return the tenant's currently open bucket: the first hour at or after ``now`` that is not closed."""
    hour = hour_of(now)
    while (tenant_id, hour) in closed:
        hour = hour_of(hour_end(hour))
    return hour


def late_target(tenant_id: str, ts: datetime, closed: Collection[Bucket], now: datetime) -> tuple[str, bool]:
    """Return the bucket hour an event is written to and whether it is late (its own bucket is closed).

    Example::

        late_target("acme", datetime(2026, 1, 1, 9, 30, tzinfo=UTC), {("acme", "2026-01-01T09")},
                    now=datetime(2026, 1, 1, 12, 5, tzinfo=UTC))   # -> ("2026-01-01T12", True)
    """
    own = hour_of(ts)
    if (tenant_id, own) not in closed:
        return own, False
    return open_hour(tenant_id, now, closed), True
