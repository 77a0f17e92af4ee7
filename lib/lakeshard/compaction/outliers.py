"""Outlier outputs: rows carrying a value rare in a merge go to their own sorted file(s), so needles find them.

With a lexicographic sort ``(service, status, env, ts)`` a rare status (``critical``, 1% of rows) sits in
every service's run, so nearly every output holds it and its regex cannot prune. A merge therefore splits
its rows in two *lanes*: rows with a value that is rare in the merge for some non-leading string sort
column (fewer than ``fraction`` of the merge's rows; the leading column is already clustered by the sort)
go to the **outlier** outputs, the others to the **regular** outputs. Regular outputs then lack the rare
values, their regexes reject them, and a needle on a rare value reads about one outlier file per bucket;
a needle on a common value reads one file more (the outlier file holds a bit of everything).

Both lanes are sorted by the sort schema, and each lane's outputs are disjoint in sort order — but the two
lanes overlap each other (the outlier file spans nearly the whole key range). Fragment metadata marks
outlier files (``outlier: true``); the locality planner keeps "disjoint outputs" per (level, lane).

Rare values are picked rarest first while the rows they cover (summed counts, an upper bound of the rows
they select) stay within ``max_share`` of the merge, so a column with many rare values (hosts) cannot send
most rows to the outlier lane. Merges too small to need several regular outputs are not split.

Example::

    split = OutlierSplit(fraction=0.02, max_share=0.1)
    rare = split.rare_values({"status": {"info": 900, "critical": 10}}, rows=910)   # {"status": {"critical"}}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lakeshard.compaction.errors import CompactionError

__all__ = ["OutlierError", "OutlierSplit", "RareValues"]

RareValues = Mapping[str, frozenset[str | None]]
"""``{column: values}`` whose rows go to the outlier lane (``None`` is the null value)."""


class OutlierError(CompactionError):
    """An outlier setting is out of range."""


@dataclass(frozen=True)
class OutlierSplit:
    """When and how a merge puts rows with rare values into separate outlier outputs.

    Args:
        fraction: a value is rare when fewer than this share of the merge's rows carry it (0 switches the
            split off).
        max_share: the outlier lane takes at most this share of the merge's rows.
        min_outputs: split only merges that would write at least this many files unsplit (a merge into one
            or two files gains nothing from a third, overlapping file).
    """

    fraction: float = 0.02
    max_share: float = 0.1
    min_outputs: int = 3

    def __post_init__(self) -> None:
        if not 0 <= self.fraction < 1:
            raise OutlierError(f"outlier fraction must be in [0, 1), found {self.fraction}")
        if not 0 <= self.max_share < 1:
            raise OutlierError(f"outlier max_share must be in [0, 1), found {self.max_share}")
        if self.min_outputs < 1:
            raise OutlierError(f"outlier min_outputs must be >= 1, found {self.min_outputs}")

    def applies(self, rows: int, target_rows: int) -> bool:
        """Return whether a merge of ``rows`` rows into ``target_rows``-row outputs is split."""
        return self.fraction > 0 and self.max_share > 0 and rows > (self.min_outputs - 1) * target_rows

    def rare_values(self, counts: Mapping[str, Mapping[str | None, int]],
                    rows: int) -> dict[str, frozenset[str | None]]:
        """Return the values whose rows go to the outlier lane, from each column's value counts (pure).

        Every chosen value has fewer than ``fraction * rows`` rows, and the chosen values' counts sum to at
        most ``max_share * rows``; the rarest values are chosen first (ties by column, then value).
        """
        limit = self.fraction * rows
        candidates = sorted(((n, col, v) for col, values in counts.items() for v, n in values.items()
                             if 0 < n < limit), key=lambda c: (c[0], c[1], "" if c[2] is None else "\x01" + c[2]))
        budget = self.max_share * rows
        chosen: dict[str, set[str | None]] = {}
        taken = 0
        for n, col, v in candidates:
            if taken + n > budget:
                break
            taken += n
            chosen.setdefault(col, set()).add(v)
        return {col: frozenset(vs) for col, vs in chosen.items()}
