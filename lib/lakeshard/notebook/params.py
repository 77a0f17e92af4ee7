"""Notebook parameters: Databricks widgets when running there, the given defaults everywhere else."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["notebook_params"]


def _dbutils() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return None if shell is None else shell.user_ns.get("dbutils")


def notebook_params(defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Return the notebook's parameters: widget values on Databricks (typed like the defaults), else ``defaults``.

    A widget left empty keeps the default. Example::

        p = notebook_params({"landing": "/tmp/landing", "events": 20_000})
    """
    dbutils = _dbutils()
    if dbutils is None:
        return dict(defaults)
    values: dict[str, Any] = {}
    for key, default in defaults.items():
        dbutils.widgets.text(key, "" if default is None else str(default))
        raw = dbutils.widgets.get(key)
        if raw == "" or default is None:
            values[key] = default if raw == "" else raw
        elif isinstance(default, bool):
            values[key] = raw.strip().lower() in {"1", "true", "yes"}
        else:
            values[key] = type(default)(raw)
    return values
