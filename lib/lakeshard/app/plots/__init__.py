"""Figures saved as PNG, one module per domain: what a person would rather see than read. matplotlib is imported
only in this package."""

from __future__ import annotations

__all__ = ["require_matplotlib"]


def require_matplotlib() -> None:
    """Import matplotlib now, so a command that draws stops before its work when the ``app`` extra is missing."""
    import matplotlib  # noqa: F401
