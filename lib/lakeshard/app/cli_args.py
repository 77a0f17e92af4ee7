"""Argument handling shared by every ``lakeshard`` sub-command: config from flags, ISO timestamps."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from lakeshard.config import LakeshardConfig, load_config
from lakeshard.utc import aware

__all__ = ["config_from_args", "iso_timestamp"]


def config_from_args(args: argparse.Namespace, **extra: Any) -> LakeshardConfig:
    """Return the configuration ``--config``, ``--lakehouse`` and ``--landing`` (where given) ask for."""
    overrides: dict[str, Any] = dict(extra)
    if getattr(args, "lakehouse", None):
        overrides["lakehouse"] = args.lakehouse
    if getattr(args, "landing", None):
        overrides["landing"] = args.landing
    return load_config(getattr(args, "config", None), overrides=overrides)


def iso_timestamp(text: str) -> datetime:
    """Parse an ISO timestamp argument (``Z`` allowed; UTC when no offset is given)."""
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO timestamp like 2026-01-01T10:00:00Z, found {text!r}") from None
    return aware(when)
