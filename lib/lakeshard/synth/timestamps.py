"""How synthetic events spell their ``ts``: RFC 3339 strings with varied offsets, or epoch milliseconds.

Every rendering is exact to the millisecond, so the ground truth's ``ts_ms`` is the one true value:
``digits=0`` is only used for whole seconds, and ``digits=6`` prints milliseconds followed by ``000``.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt

__all__ = ["FRACTION_DIGITS", "OFFSETS", "format_rfc3339", "format_rfc3339_many", "offset_suffix"]

# (suffix, minutes east of UTC). "Z" and "+00:00" are both UTC, spelled differently on purpose.
OFFSETS: tuple[tuple[str, int], ...] = (
    ("Z", 0),
    ("+00:00", 0),
    ("+01:00", 60),
    ("+02:00", 120),
    ("+03:00", 180),
    ("+05:30", 330),
    ("+05:45", 345),
    ("+09:00", 540),
    ("+13:00", 780),
    ("-03:30", -210),
    ("-05:00", -300),
    ("-05:30", -330),
    ("-08:00", -480),
    ("-10:00", -600),
)

FRACTION_DIGITS: tuple[int, ...] = (0, 3, 6)

_Unit = Literal["s", "ms", "us"]
_UNIT: dict[int, _Unit] = {0: "s", 3: "ms", 6: "us"}


def offset_suffix(minutes: int | None) -> str:
    """Return the RFC 3339 offset for ``minutes`` east of UTC (``"Z"`` for ``None``)."""
    if minutes is None:
        return "Z"
    sign = "+" if minutes >= 0 else "-"
    hours, mins = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}:{mins:02d}"


def format_rfc3339_many(
    ts_ms: npt.NDArray[np.int64],
    offset_codes: npt.NDArray[np.integer],
    digits: npt.NDArray[np.integer],
) -> list[str]:
    """Return RFC 3339 renderings of ``ts_ms`` (epoch ms, UTC), one per element.

    Args:
        ts_ms: instants in epoch milliseconds; where ``digits`` is 0 they must be whole seconds.
        offset_codes: index into :data:`OFFSETS` per element (the local offset to print).
        digits: fractional-second digits per element, each one of :data:`FRACTION_DIGITS`.
    """
    n = len(ts_ms)
    out: list[str] = [""] * n
    minutes = np.array([m for _, m in OFFSETS], dtype=np.int64)
    suffixes = [s for s, _ in OFFSETS]
    local = ts_ms.astype(np.int64) + minutes[offset_codes] * 60_000
    codes = offset_codes.tolist()
    for d, unit in _UNIT.items():
        idx = np.flatnonzero(digits == d)
        if len(idx) == 0:
            continue
        if d == 0 and bool(np.any(ts_ms[idx] % 1000)):
            raise ValueError("whole-second rendering asked for instants with milliseconds")
        stamps = local[idx].astype("datetime64[ms]").astype(f"datetime64[{unit}]")
        texts = np.datetime_as_string(stamps, unit=unit).tolist()
        for i, text in zip(idx.tolist(), texts, strict=True):
            out[i] = text + suffixes[codes[i]]
    return out


def format_rfc3339(ts_ms: int, offset_minutes: int | None = None, digits: int = 3) -> str:
    """Return one RFC 3339 rendering of ``ts_ms`` at ``offset_minutes`` east of UTC (``None``: ``Z``).

    Digits below ``digits`` are truncated. Example::

        format_rfc3339(1767225600123, 120)  # '2026-01-01T02:00:00.123+02:00'
    """
    if digits not in _UNIT:
        raise ValueError(f"digits must be one of {FRACTION_DIGITS}, found {digits}")
    suffix = offset_suffix(offset_minutes)
    minutes = 0 if offset_minutes is None else offset_minutes
    local = np.array([ts_ms + minutes * 60_000], dtype=np.int64)
    stamp = local.astype("datetime64[ms]").astype(f"datetime64[{_UNIT[digits]}]")
    return str(np.datetime_as_string(stamp, unit=_UNIT[digits])[0]) + suffix
