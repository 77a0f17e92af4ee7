"""The base of every error :mod:`lakeshard.pipelines` raises on purpose: catch it to catch them all."""

from __future__ import annotations

from lakeshard.errors import LakeshardError

__all__ = ["PipelineError"]


class PipelineError(LakeshardError):
    """Root of the pipelines package's errors; raised itself when a pipeline declaration or a run request is
    inconsistent (unknown table or flow, cycle, bad parameter)."""
