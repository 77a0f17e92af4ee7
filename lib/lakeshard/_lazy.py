"""Lazy re-exports for packages whose submodules load Spark or Arrow: import on first use, not on import."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, home: Mapping[str, str], namespace: dict[str, Any]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Return a module ``__getattr__`` and ``__dir__`` that import ``name`` from ``package.<home[name]>`` on first use.

    Example (in a package's ``__init__.py``)::

        __getattr__, __dir__ = lazy_exports(__name__, {"read_landing": "reader"}, globals())
    """

    def getattr_(name: str) -> Any:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value  # cache: the next lookup is an ordinary global
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *home})

    return getattr_, dir_
