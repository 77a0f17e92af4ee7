"""What the notebooks share: their parameters, Databricks widgets there and the given defaults elsewhere
(:mod:`.params`)."""

from __future__ import annotations

from lakeshard.notebook.params import notebook_params

__all__ = ["notebook_params"]
