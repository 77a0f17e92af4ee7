"""Writes that refuse rows the way a file format refuses a value it cannot encode, for the dead-letter tests."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

PROBE_PREFIX = "lakeshard-probe-"  # where a writer writes rows again to find the ones that fail alone


def refusing_a_second_row_once_the_first_is_out(write: Callable[..., Any], *, first: Collection[str],
                                                second: Collection[str]) -> Callable[..., Any]:
    """Return ``write`` (``write_partitioned``'s signature) refusing every row whose event id is in ``first``,
    and those in ``second`` from the first time the step writes its files without the ``first`` rows: a refusal
    that is not the same on every try, so a writer meets a second round of unwritable rows after it has
    dead-lettered the first."""
    first, second = set(first), set(second)
    seen_without_first = False

    def refusing(rows: Any, target: str, *args: Any, **kwargs: Any) -> Any:
        nonlocal seen_without_first
        ids = set(rows.column("event_id").to_pylist()) if "event_id" in rows.column_names else set()
        if ids and PROBE_PREFIX not in target and not ids & first:
            seen_without_first = True
        if ids & first or (seen_without_first and ids & second):
            raise ValueError("cannot encode this row")
        return write(rows, target, *args, **kwargs)

    return refusing
