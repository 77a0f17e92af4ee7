"""Argument handling shared by every ``lakeshard`` sub-command: config from flags, ISO timestamps, numbers checked
against their range, and a parser whose errors are one line."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from datetime import datetime
from typing import Any, NoReturn

from lakeshard.config import Bounds, LakeshardConfig, load_config
from lakeshard.utc import aware

__all__ = ["LakeshardParser", "bucket", "clock", "config_from_args", "count", "iso_timestamp", "number"]


class LakeshardParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (``error: lakeshard ingest: ...``) and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def bucket(text: str) -> tuple[str, str]:
    """Return ``(tenant, hour)`` of a bucket named ``TENANT/YYYY-MM-DDTHH`` (the tenant may hold slashes)."""
    tenant, sep, hour = text.rpartition("/")
    if not sep or not tenant or len(hour) != 13 or hour[10] != "T":
        raise argparse.ArgumentTypeError(f"expected TENANT/HOUR like acme/2026-01-01T10, found {text!r}")
    return tenant, hour


def count(low: int) -> Callable[[str], int]:
    """Return an argparse type for a whole number >= ``low``; the message names the range and what was found."""
    bounds = Bounds(low)

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number {bounds}, found {text!r}") from None
        if not bounds.admits(value):
            raise argparse.ArgumentTypeError(f"expected a whole number {bounds}, found {text!r}")
        return value

    parse.__name__ = "count"  # argparse names the type in its fallback message
    return parse


def number(low: float = 0, *, low_open: bool = False) -> Callable[[str], float]:
    """Return an argparse type for a finite number >= ``low`` (> ``low`` when ``low_open``)."""
    bounds = Bounds(low, low_open=low_open)

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not bounds.admits(value) or math.isinf(value):
            raise argparse.ArgumentTypeError(f"expected a number {bounds}, found {text!r}")
        return value

    parse.__name__ = "number"
    return parse


def config_from_args(args: argparse.Namespace, **extra: Any) -> LakeshardConfig:
    """Return the configuration ``--config``, ``--lakehouse`` and ``--landing`` (where given) ask for.

    Raises:
        ConfigError: a setting is out of range or unknown, or ``--landing`` names a file.
    """
    overrides: dict[str, Any] = dict(extra)
    if getattr(args, "lakehouse", None):
        overrides["lakehouse"] = args.lakehouse
    if getattr(args, "landing", None):
        overrides["landing"] = args.landing
    return load_config(getattr(args, "config", None), overrides=overrides)


def clock(text: str) -> datetime:
    """Parse an ISO timestamp argument standing for the current time (``--as-of``): from 1970 to 8999, so that the
    windows looked back over and ahead of it stay within what a datetime holds."""
    when = iso_timestamp(text)
    if not 1970 <= when.year < 9000:
        raise argparse.ArgumentTypeError(f"expected an ISO timestamp from 1970 to 8999, found {text!r}")
    return when


def iso_timestamp(text: str) -> datetime:
    """Parse an ISO timestamp argument (``Z`` allowed; UTC when no offset is given)."""
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO timestamp like 2026-01-01T10:00:00Z, found {text!r}") from None
    return aware(when)
