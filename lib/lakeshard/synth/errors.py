"""The base of every error :mod:`lakeshard.synth` raises on purpose: catch it to catch them all."""

from __future__ import annotations

from lakeshard.errors import LakeshardError

__all__ = ["ManifestError"]


class ManifestError(LakeshardError):
    """A landing zone has no readable ground truth (missing, or not written by this generator)."""
