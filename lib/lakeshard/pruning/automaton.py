"""Trimmed automata for fragment pruning (Husky): a regex per file and column that never under-matches.

A file's column holds a set of strings. :class:`PruningAutomaton` builds the minimal acyclic DFA that
accepts exactly that set (a trie whose equivalent sub-tries are merged), then, if its regex would be longer
than a size bound, *trims* it: every path is cut at a depth ``d`` and the cut states accept any suffix.
Trimming only ever adds strings to the language, so a trimmed regex may match values the file lacks
(like a Bloom filter's false positive) but never rejects a value the file holds. The deepest cut that fits
the bound is kept, so the regex is as precise as the bound allows.

Why not min/max: ``{"compactor", "reader", "writer"}`` has range ``[compactor, writer]``, which contains
``"metadata"``; the automaton's regex ``(?:compactor|reader|writer)`` rejects it.

Nulls are not strings: :class:`ColumnPruning` carries them as a flag next to the regex.

Example::

    meta = ColumnPruning.build(["compactor", "reader", "writer", None], max_regex_chars=256)
    may_contain(meta, "metadata")   # False
    may_contain(meta, None)         # True
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lakeshard.pruning.errors import PruningError

__all__ = [
    "DEFAULT_MAX_REGEX_CHARS",
    "ColumnPruning",
    "PruningAutomaton",
    "may_contain",
]

DEFAULT_MAX_REGEX_CHARS = 512
"""Default bound on one column's regex: a few hundred bytes per file and column in the Delta log."""

_ANY = "[\\s\\S]*"  # any suffix, newlines included, without needing the DOTALL flag
_NOTHING = "(?!)"  # the empty language: a column with no non-null value
# Tries bigger than this are not built: a depth is too deep for the bound long before the trie gets this big.
_NODES_PER_BOUND_CHAR = 16


# A state of the acyclic DFA: (accepts here, accepts any suffix from here, sorted (char, next state id) edges).
# States are interned by this key, so equal right languages get the same id: that is the minimisation.
_State = tuple[bool, bool, tuple[tuple[str, int], ...]]
# Paths longer than this are always cut (recursion depth; a longer exact value cannot fit a sane bound anyway).
_MAX_DEPTH = 600


def _escape_char(ch: str) -> str:
    code = ord(ch)
    if 0xD800 <= code <= 0xDFFF or code < 0x20 or code == 0x7F:
        # Lone surrogates cannot be written as UTF-8 into the Delta log; control characters are unreadable.
        return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
    return re.escape(ch)


class PruningAutomaton:
    """The minimal acyclic automaton of a set of strings, optionally trimmed to a depth.

    Args:
        values: the strings to accept (duplicates and order do not matter).
        depth: cut every path after this many characters; the cut state then accepts any suffix.
            ``None`` keeps every path whole (the exact language).
    """

    def __init__(self, values: Iterable[str], depth: int | None = None) -> None:
        if depth is not None and depth < 0:
            raise PruningError(f"trim depth must be >= 0, found {depth}")
        self.values = tuple(sorted(set(values)))
        self.depth = depth
        self._ids: dict[_State, int] = {}
        self._states: list[_State] = []
        self.root: int | None = self._build(self.values, 0) if self.values else None

    # --------------------------------------------------------------------------------- building
    def _make(self, final: bool, wildcard: bool, edges: tuple[tuple[str, int], ...]) -> int:
        key: _State = (final, wildcard, edges)
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = len(self._states)
            self._states.append(key)
        return found

    def _build(self, values: Sequence[str], at: int) -> int:
        """Return the state reached after ``at`` characters of ``values`` (sorted, all sharing that prefix)."""
        cut = _MAX_DEPTH if self.depth is None else min(self.depth, _MAX_DEPTH)
        if at >= cut and any(len(v) > at for v in values):
            return self._make(True, True, ())
        final = len(values[0]) == at  # sorted: the shortest (the prefix itself) comes first
        rest = values[1:] if final else values
        edges: list[tuple[str, int]] = []
        start = 0
        while start < len(rest):
            ch = rest[start][at]
            end = start
            while end < len(rest) and rest[end][at] == ch:
                end += 1
            edges.append((ch, self._build(rest[start:end], at + 1)))
            start = end
        return self._make(final, False, tuple(edges))

    @property
    def exact(self) -> bool:
        """Return whether the automaton accepts exactly its values (no path was cut)."""
        return not any(state[1] for state in self._states)

    @property
    def states(self) -> int:
        """Return the number of distinct states (after minimisation)."""
        return len(self._states)

    # -------------------------------------------------------------------------------- rendering
    def regex(self) -> str:
        """Return a regex (for :func:`re.fullmatch`) accepting exactly this automaton's language."""
        if self.root is None:
            return _NOTHING
        rendered: dict[int, str] = {}
        for sid, state in enumerate(self._states):  # children are built before parents: ids are topological
            rendered[sid] = _render(state, rendered)
        return rendered[self.root]

    def accepts(self, value: str) -> bool:
        """Return whether the automaton accepts ``value`` (walks the states; no regex involved)."""
        if self.root is None:
            return False
        state = self._states[self.root]
        for ch in value:
            if state[1]:
                return True
            nxt = dict(state[2]).get(ch)
            if nxt is None:
                return False
            state = self._states[nxt]
        return state[0] or state[1]

    # --------------------------------------------------------------------------------- trimming
    @classmethod
    def trimmed(cls, values: Iterable[str], max_regex_chars: int = DEFAULT_MAX_REGEX_CHARS) -> PruningAutomaton:
        """Return the deepest-trimmed automaton of ``values`` whose regex has at most ``max_regex_chars`` chars.

        Depth 0 accepts every string (``[\\s\\S]*``), so a bound of at least that long always succeeds.
        Raises:
            PruningError: ``max_regex_chars`` is shorter than the any-string regex.
        """
        if max_regex_chars < len(_ANY):
            raise PruningError(f"max_regex_chars must be >= {len(_ANY)} (the any-string regex), "
                               f"found {max_regex_chars}")
        distinct = sorted(set(values))
        exact = cls(distinct) if _trie_nodes(distinct, None) <= max_regex_chars * _NODES_PER_BOUND_CHAR else None
        if exact is not None and len(exact.regex()) <= max_regex_chars:
            return exact
        # Binary search the deepest depth that fits; depth 0 always fits.
        # A regex has at least one char per char of a path, so depths beyond the bound never fit.
        low, high = 0, min(max((len(v) for v in distinct), default=0), max_regex_chars, _MAX_DEPTH)
        best = cls(distinct, depth=0)
        while low <= high:
            mid = (low + high) // 2
            fits = False
            if _trie_nodes(distinct, mid) <= max_regex_chars * _NODES_PER_BOUND_CHAR:
                candidate = cls(distinct, depth=mid)
                if len(candidate.regex()) <= max_regex_chars:
                    best, fits = candidate, True
            if fits:
                low = mid + 1
            else:
                high = mid - 1
        return best


def _trie_nodes(sorted_values: Sequence[str], depth: int | None) -> int:
    """Return how many trie nodes the values need when cut at ``depth``: the cost of building it."""
    nodes = 1
    previous = ""
    for value in sorted_values:
        cut = value if depth is None else value[:depth]
        common = 0
        for a, b in zip(previous, cut, strict=False):
            if a != b:
                break
            common += 1
        nodes += len(cut) - common
        previous = cut
    return nodes


def _render(state: _State, rendered: Mapping[int, str]) -> str:
    """Return the regex of one state, given the regexes of the states its edges lead to."""
    final, wildcard, edges = state
    if wildcard:
        return _ANY
    # Edges into the same state share one character class: [abc]X instead of aX|bX|cX.
    by_target: dict[int, list[str]] = {}
    for ch, target in edges:
        by_target.setdefault(target, []).append(ch)
    alternatives = []
    for target, chars in by_target.items():
        head = _escape_char(chars[0]) if len(chars) == 1 else _char_class(chars)
        alternatives.append(head + rendered[target])
    if not alternatives:
        return ""
    body = alternatives[0] if len(alternatives) == 1 else "(?:" + "|".join(alternatives) + ")"
    if final:
        return (body + "?") if _is_atom(body) else f"(?:{body})?"
    return body


def _char_class(chars: Sequence[str]) -> str:
    """Return a character class for ``chars`` (sorted), with runs of 3+ consecutive code points as ranges."""
    parts: list[str] = []
    i = 0
    while i < len(chars):
        j = i
        while j + 1 < len(chars) and ord(chars[j + 1]) == ord(chars[j]) + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{_class_char(chars[i])}-{_class_char(chars[j])}")
        else:
            parts.extend(_class_char(c) for c in chars[i:j + 1])
        i = j + 1
    return "[" + "".join(parts) + "]"


def _class_char(ch: str) -> str:
    if ch in "\\]^-[":
        return "\\" + ch
    return _escape_char(ch) if not ch.isalnum() else ch


def _is_atom(body: str) -> bool:
    """Return whether ``?`` after ``body`` applies to all of it (it is one non-capturing group)."""
    return body.startswith("(?:") and body.endswith(")") and _balanced_group(body)


def _balanced_group(body: str) -> bool:
    depth = 0
    escaped = in_class = False
    for i, ch in enumerate(body):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0 and i != len(body) - 1:
                return False
    return depth == 0


@dataclass(frozen=True)
class ColumnPruning:
    """What one file's column may hold: a regex over its non-null values, and whether it has nulls.

    ``exact`` says the regex accepts exactly the values (no trimming was needed).
    """

    regex: str
    has_null: bool
    exact: bool = True

    @classmethod
    def build(cls, values: Iterable[str | None], *, max_regex_chars: int = DEFAULT_MAX_REGEX_CHARS) -> ColumnPruning:
        """Return the pruning metadata of a column's values (``None`` is a null)."""
        strings: set[str] = set()
        has_null = False
        for v in values:
            if v is None:
                has_null = True
            elif isinstance(v, str):
                strings.add(v)
            else:
                raise PruningError(f"pruning automata take strings or None, found {type(v).__name__} {v!r}")
        automaton = PruningAutomaton.trimmed(strings, max_regex_chars)
        return cls(automaton.regex(), has_null, exact=automaton.exact)

    def to_json(self) -> dict[str, Any]:
        """Return the form stored in the Delta log: ``{"re": ..., "null": ..., "exact": ...}``."""
        return {"re": self.regex, "null": self.has_null, "exact": self.exact}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ColumnPruning:
        """Return the metadata stored by :meth:`to_json`.

        Raises:
            PruningError: a key is missing or the regex does not compile.
        """
        try:
            regex, has_null = data["re"], data["null"]
        except (KeyError, TypeError):
            raise PruningError(f"column pruning metadata needs 're' and 'null', found {data!r}") from None
        if not isinstance(regex, str) or not isinstance(has_null, bool):
            raise PruningError(f"column pruning metadata has ill-typed 're'/'null': {data!r}")
        _compiled(regex)
        return cls(regex, has_null, bool(data.get("exact", True)))


@functools.lru_cache(maxsize=4096)
def _compiled(regex: str) -> re.Pattern[str]:
    try:
        return re.compile(regex)
    except re.error as exc:
        raise PruningError(f"pruning regex {regex[:80]!r} does not compile: {exc}") from None


def may_contain(meta: ColumnPruning | str, value: str | None) -> bool:
    """Return False only when the column surely lacks ``value``; True means "may hold it, read the file".

    Args:
        meta: a file's :class:`ColumnPruning`, or a bare regex (then nulls are assumed possible).
        value: the predicate's value; ``None`` asks for nulls.
    """
    if isinstance(meta, str):
        return True if value is None else _compiled(meta).fullmatch(value) is not None
    if value is None:
        return meta.has_null
    return _compiled(meta.regex).fullmatch(value) is not None
