"""Pruning automata: never a false negative, regex within its bound, tighter than min/max."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeshard.pruning import ColumnPruning, PruningAutomaton, PruningError, may_contain
from lakeshard.synth.vocabulary import ENVS, SERVICES, STATUSES

# Adversarial alphabet: regex metacharacters, class syntax, whitespace/newlines, non-BMP, a lone surrogate.
_NASTY = "\\.^$*+?{}[]|()-#& \t\n\r\x00\x7f/é中😀\ud800"
_values = st.lists(st.one_of(st.text(max_size=12), st.text(alphabet=_NASTY, max_size=8), st.none()), max_size=40)
_bounds = st.integers(min_value=len("[\\s\\S]*"), max_value=300)


@settings(max_examples=300)
@given(values=_values, bound=_bounds)
def test_every_value_matches_its_trimmed_regex(values: list[str | None], bound: int) -> None:
    """No false negative: each value (nulls included) is accepted, whatever the bound trimmed away."""
    meta = ColumnPruning.build(values, max_regex_chars=bound)
    for v in values:
        assert may_contain(meta, v), (v, meta)


@settings(max_examples=300)
@given(values=_values, bound=_bounds)
def test_regex_stays_within_its_bound(values: list[str | None], bound: int) -> None:
    """The rendered regex never exceeds the bound, and it survives a JSON/UTF-8 round trip into the log."""
    meta = ColumnPruning.build(values, max_regex_chars=bound)
    assert len(meta.regex) <= bound
    meta.regex.encode("utf-8")  # raises on a lone surrogate: the Delta log is UTF-8
    assert ColumnPruning.from_json(meta.to_json()) == meta


@settings(max_examples=300)
@given(values=st.lists(st.text(alphabet=_NASTY + "ab", max_size=6), max_size=20),
       probe=st.text(alphabet=_NASTY + "ab", max_size=6))
def test_exact_regex_accepts_exactly_the_values(values: list[str], probe: str) -> None:
    """Untrimmed, regex and automaton agree with set membership: no false positive either."""
    automaton = PruningAutomaton(values)
    assert automaton.exact
    expected = probe in set(values)
    assert automaton.accepts(probe) == expected
    assert (re.fullmatch(automaton.regex(), probe) is not None) == expected


@settings(max_examples=200)
@given(values=st.lists(st.text(max_size=10), min_size=1, max_size=30), depth=st.integers(0, 10),
       probe=st.text(max_size=10))
def test_trimming_only_adds_strings(values: list[str], depth: int, probe: str) -> None:
    """A cut automaton accepts a superset of the exact one, and its regex agrees with its states."""
    exact, cut = PruningAutomaton(values), PruningAutomaton(values, depth=depth)
    if exact.accepts(probe):
        assert cut.accepts(probe)
    assert (re.fullmatch(cut.regex(), probe) is not None) == cut.accepts(probe)


def test_husky_example_rejects_a_value_between_present_ones() -> None:
    """``metadata`` sorts between ``compactor`` and ``writer`` (min/max keeps the file); the regex skips it."""
    meta = ColumnPruning.build(["compactor", "reader", "writer"])
    assert meta.regex == "(?:compactor|reader|writer)"
    assert not may_contain(meta, "metadata")
    assert "compactor" < "metadata" < "writer"


def test_empty_string_null_and_no_values_are_distinct() -> None:
    """The empty string is a value, null is a flag, and an all-null column matches no string."""
    only_null = ColumnPruning.build([None, None])
    assert only_null.has_null and not may_contain(only_null, "") and not may_contain(only_null, "x")
    empty = ColumnPruning.build([""])
    assert may_contain(empty, "") and not may_contain(empty, None) and not may_contain(empty, "a")


def test_bad_inputs_raise_clear_errors() -> None:
    """A non-string value, an impossible bound and a malformed stored entry each name what was wrong."""
    with pytest.raises(PruningError, match="int 3"):
        ColumnPruning.build(["a", 3])  # type: ignore[list-item]
    with pytest.raises(PruningError, match="max_regex_chars must be >= 7"):
        ColumnPruning.build(["a"], max_regex_chars=3)
    with pytest.raises(PruningError, match="does not compile"):
        ColumnPruning.from_json({"re": "(", "null": False})
    with pytest.raises(PruningError, match="needs 're' and 'null'"):
        ColumnPruning.from_json({"regex": "a"})


def _min_max_may_contain(values: list[str], probe: str) -> bool:
    return min(values) <= probe <= max(values)


@pytest.mark.parametrize(("vocabulary", "per_file"), [(SERVICES, 5), (STATUSES, 3), (ENVS, 2)])
def test_tighter_than_min_max_on_realistic_columns(vocabulary: tuple[str, ...], per_file: int) -> None:
    """On files holding a few vocabulary words each, the regex skips strictly more (file, probe) pairs."""
    words = sorted(vocabulary)
    regex_skips = min_max_skips = 0
    for start in range(0, len(words) - per_file + 1):
        # Every other word of a window: gaps inside [min, max] are exactly where min/max fails.
        held = words[start:start + 2 * per_file:2]
        meta = ColumnPruning.build(held, max_regex_chars=128)
        for probe in words:
            by_regex, by_range = may_contain(meta, probe), _min_max_may_contain(held, probe)
            assert by_regex or not by_range or probe not in held  # the regex never keeps less than needed
            regex_skips += not by_regex
            min_max_skips += not by_range
    assert regex_skips > min_max_skips


def test_many_distinct_values_trim_to_a_useful_prefix() -> None:
    """Five thousand host names still fit 200 chars, and the regex keeps their shared structure."""
    hosts = [f"host-{i:05d}.eu" for i in range(5000)]
    meta = ColumnPruning.build(hosts, max_regex_chars=200)
    assert len(meta.regex) <= 200 and not meta.exact
    assert all(may_contain(meta, h) for h in hosts)
    assert not may_contain(meta, "db-00001.eu") and not may_contain(meta, "host-9")
