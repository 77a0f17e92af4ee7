"""Fragment pruning (Husky): per file and column, a trimmed automaton rendered as a regex that never
under-matches, so a query can skip files that surely lack a value even when min/max cannot.

Example::

    from lakeshard.pruning import ColumnPruning, may_contain

    meta = ColumnPruning.build(["compactor", "reader", "writer"])
    meta.regex                       # '(?:compactor|reader|writer)'
    may_contain(meta, "metadata")    # False: skip the file
"""

from __future__ import annotations

from lakeshard.pruning.automaton import DEFAULT_MAX_REGEX_CHARS, ColumnPruning, PruningAutomaton, may_contain
from lakeshard.pruning.errors import PruningError

__all__ = ["DEFAULT_MAX_REGEX_CHARS", "ColumnPruning", "PruningAutomaton", "PruningError", "may_contain"]
