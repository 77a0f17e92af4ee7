"""Lazy package faces: a package's public names are imported from their modules on first use, not on import.

Most packages' modules load Spark or Arrow (1-4 s and a JVM's client libraries); a worker that needs one pure
function of a package, and ``lakeshard --help``, should not pay for them. A face imports its public names in an
``if TYPE_CHECKING:`` block (what type checkers and readers see) and lists them in ``__all__``;
:func:`lazy_exports` reads that block to know where each name lives, so no third list maps names to modules.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["lazy_exports"]


def _homes(face: Path) -> dict[str, tuple[str, str]]:
    """Return name -> (module, name there) of every import in the ``if TYPE_CHECKING:`` blocks of the face at
    ``face`` (the two names differ for ``import x as y``)."""
    homes: dict[str, tuple[str, str]] = {}
    for node in ast.parse(face.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                if not isinstance(statement, ast.ImportFrom) or not statement.module:
                    continue
                module = statement.module
                # Only lakeshard's own names are exported; a face may also import a type it only annotates with.
                if module.startswith("lakeshard."):
                    for alias in statement.names:
                        homes[alias.asname or alias.name] = (module, alias.name)
    return homes


def lazy_exports(namespace: dict[str, Any]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Return a face's module ``__getattr__`` and ``__dir__``: the names its ``if TYPE_CHECKING:`` block imports,
    each imported from its module on first use.

    Example (a package's ``__init__.py``)::

        if TYPE_CHECKING:
            from lakeshard.landing.spark_read import read_landing

        __all__ = ["read_landing"]

        __getattr__, __dir__ = lazy_exports(globals())
    """
    package = namespace["__name__"]
    homes = _homes(Path(namespace["__file__"]))

    def getattr_(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home[0]), home[1])
        namespace[name] = value  # cache: the next lookup is an ordinary global
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *homes})

    return getattr_, dir_
