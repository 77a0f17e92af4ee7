"""The error of :mod:`lakeshard.bundle`: a bundle that cannot be read, or a target it does not declare."""

from __future__ import annotations

from lakeshard.errors import ConfigError

__all__ = ["BundleError"]


class BundleError(ConfigError):
    """The asset bundle cannot be read as asked: no ``databricks.yml``, malformed YAML, an unknown target.

    The message names the file or the target, and what was expected vs found.
    """
