"""Time in lakeshard is UTC: every timestamp a table holds, every window and bucket hour. Arrow and Spark give
Delta's UTC timestamps back without a zone in some paths; these helpers read such a naive datetime as UTC and
convert to and from the integer microseconds and milliseconds tables and logs keep."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["EPOCH", "as_utc", "aware", "from_micros", "micros", "millis"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def aware(when: datetime) -> datetime:
    """Return ``when`` with a time zone: a naive datetime is taken as UTC, an aware one is kept as it is."""
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def as_utc(when: datetime) -> datetime:
    """Return ``when`` in UTC: a naive datetime (Arrow and Spark give Delta's UTC timestamps back without a zone
    in some paths) is taken as UTC."""
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def micros(ts: datetime) -> int:
    """Return ``ts`` as microseconds since the Unix epoch (naive datetimes are taken as UTC)."""
    delta = aware(ts) - EPOCH  # exact integer arithmetic (a float timestamp() would round far-off microseconds)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(value: int) -> datetime:
    """Return the UTC datetime of ``value`` microseconds since the Unix epoch."""
    return EPOCH + timedelta(microseconds=value)


def millis(when: datetime) -> int:
    """Return an aware ``when`` as whole milliseconds since the Unix epoch (rounded down)."""
    return (when - EPOCH) // timedelta(milliseconds=1)
