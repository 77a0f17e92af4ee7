"""Arrow sorts in Spark's ascending order (nulls first, stable) on every pyarrow the declared range allows.

pyarrow 25 moved where a sort says where its nulls go: before it, one ``null_placement`` for every key (a
``SortOptions`` argument) and two-part keys ``(name, order)``; from 25 on, three-part keys ``(name, order,
null_placement)``, and the shared argument warns as deprecated. Three-part keys fail on older pyarrow with
``ValueError: too many values to unpack``, so every sort of the library asks here.

Example::

    rows.take(sort_indices(rows, ["tenant_id", "ts"]))  # Spark's ORDER BY tenant_id, ts
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["sort_indices"]

# The first pyarrow whose sort keys carry their own null placement.
_PER_KEY_NULLS = (25,)


def _major(version: str) -> tuple[int, ...]:
    return (int(version.split(".", 1)[0]),)


def _options(columns: Sequence[str]) -> dict[str, Any]:
    if _major(pa.__version__) >= _PER_KEY_NULLS:
        return {"sort_keys": [(c, "ascending", "at_start") for c in columns]}
    return {"sort_keys": [(c, "ascending") for c in columns], "null_placement": "at_start"}


def sort_indices(table: pa.Table, columns: Sequence[str]) -> pa.Array:
    """Return the indices that put ``table``'s rows in Spark's ascending order of ``columns``: nulls first in each
    column, rows equal on every column in their present order."""
    return pc.sort_indices(table, **_options(columns))
