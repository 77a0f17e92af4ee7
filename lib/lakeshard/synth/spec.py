"""What the synthetic landing-zone generator is asked to produce: :class:`SynthSpec`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from lakeshard.errors import ConfigError

__all__ = ["SynthSpec"]

# Valid events must never look absurd to a reader (docs/design.md §2: timestamps before 2000 are quarantined),
# and late events reach up to ``late_max_hours`` before the start, so the start keeps a margin.
_EARLIEST_START = datetime(2000, 1, 8, tzinfo=UTC)


@dataclass(frozen=True)
class SynthSpec:
    """The shape of the traffic :func:`lakeshard.synth.generate_landing` writes.

    Counts are exact where they can be (``events`` unique valid events, ``round(retry_rate * events)``
    retries, ``round(bad_rate * events)`` malformed records, ``round(redelivered_files * files)``
    redelivered files); ``late_rate`` and ``gzip_rate`` are per-event / per-file probabilities.

    Example::

        spec = SynthSpec(events=5_000, tenants=20, seed=1, hours=0.5)
    """

    events: int = 100_000
    """Unique valid events to generate."""
    tenants: int = 200
    seed: int = 7
    start: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    """Arrival time of the first landing file (tz-aware; stored as UTC)."""
    hours: float = 2.0
    """Span of arrival time."""
    zipf_s: float = 1.1
    """Tenant volume skew: the tenant of rank r gets volume proportional to r ** -zipf_s."""
    file_seconds: int = 60
    """Arrival time covered by one landing file."""
    burst_tenants: int = 3
    """Tenants whose rate jumps 10-100x for a few minutes."""
    retry_rate: float = 0.03
    """Share of events re-sent as exact duplicate lines, seconds to hours later."""
    redelivered_files: float = 0.02
    """Share of files delivered twice (whole file again, under another name, later)."""
    late_rate: float = 0.02
    """Probability that an event's ts lies minutes to hours before its arrival."""
    bad_rate: float = 0.005
    """Extra malformed records, as a share of ``events``."""
    gzip_rate: float = 0.2
    """Probability that a file is written gzip-compressed (``*.json.gz``; others are ``*.jsonl``)."""
    max_record_bytes: int = 256 * 1024
    """The reader's record size limit; only ``oversize`` bad records exceed it."""
    max_message_bytes: int = 48 * 1024
    """Cap of a valid record's ``message`` (characters); at most ``max_record_bytes // 4``."""
    retry_max_hours: float = 2.0
    """Longest delay of a producer retry."""
    late_max_hours: float = 6.0
    """Longest lateness of a late event."""

    def __post_init__(self) -> None:
        self._check_int("events", 0)
        self._check_int("tenants", 1)
        self._check_int("seed", 0)
        self._check_int("file_seconds", 1)
        self._check_int("burst_tenants", 0)
        self._check_int("max_record_bytes", 4096)
        self._check_int("max_message_bytes", 64)
        for name in ("retry_rate", "redelivered_files", "late_rate", "bad_rate", "gzip_rate"):
            self._check_number(name, 0.0, 1.0)
        self._check_number("hours", 1e-3, 24.0 * 366)
        self._check_number("zipf_s", 0.0, 10.0)
        self._check_number("retry_max_hours", 1e-3, 24.0 * 30)
        self._check_number("late_max_hours", 0.05, 24.0 * 30)
        if self.burst_tenants > self.tenants:
            raise ConfigError(
                f"SynthSpec.burst_tenants must be <= tenants ({self.tenants}), found {self.burst_tenants}"
            )
        if self.max_message_bytes > self.max_record_bytes // 4:
            raise ConfigError(
                "SynthSpec.max_message_bytes must be <= max_record_bytes // 4 "
                f"({self.max_record_bytes // 4}) so valid records stay under the limit, "
                f"found {self.max_message_bytes}"
            )
        if not isinstance(self.start, datetime) or self.start.tzinfo is None:
            raise ConfigError(f"SynthSpec.start must be a timezone-aware datetime, found {self.start!r}")
        start = self.start.astimezone(UTC)
        if start < _EARLIEST_START:
            raise ConfigError(
                f"SynthSpec.start must be on or after {_EARLIEST_START.isoformat()} (earlier timestamps "
                f"are quarantined as absurd), found {start.isoformat()}"
            )
        if start.year > 9000:
            raise ConfigError(f"SynthSpec.start must be before year 9000, found {start.isoformat()}")
        object.__setattr__(self, "start", start)

    def _check_int(self, name: str, low: int) -> None:
        value = getattr(self, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"SynthSpec.{name} must be an integer, found {value!r}")
        if value < low:
            raise ConfigError(f"SynthSpec.{name} must be >= {low}, found {value}")

    def _check_number(self, name: str, low: float, high: float) -> None:
        value = getattr(self, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"SynthSpec.{name} must be a number, found {value!r}")
        if not low <= value <= high:
            raise ConfigError(f"SynthSpec.{name} must be in [{low}, {high}], found {value}")

    @property
    def end(self) -> datetime:
        """Return when the generated arrival window ends (``start`` + ``hours``)."""
        return self.start + timedelta(hours=self.hours)

    def to_dict(self) -> dict[str, Any]:
        """Return the spec as a JSON-serialisable dict (``start`` as an RFC 3339 string)."""
        out = dataclasses.asdict(self)
        out["start"] = self.start.isoformat().replace("+00:00", "Z")
        return out

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> SynthSpec:
        """Return the spec a :meth:`to_dict` result describes.

        Raises:
            ConfigError: a key is unknown or a value is out of range.
        """
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown SynthSpec field(s) {unknown}; known: {sorted(known)}")
        kwargs = dict(values)
        if isinstance(kwargs.get("start"), str):
            try:
                kwargs["start"] = datetime.fromisoformat(kwargs["start"])
            except ValueError:
                raise ConfigError(f"SynthSpec.start is not an ISO timestamp: {kwargs['start']!r}") from None
        return cls(**kwargs)
