"""Outlier split policy (pure): which values are rare, how many rows the outlier lane may take, when to split."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakeshard.compaction.outliers import OutlierError, OutlierSplit

_values = st.sampled_from(["a", "b", "c", "d", "e", None])
_counts = st.dictionaries(st.sampled_from(["status", "env"]),
                          st.dictionaries(_values, st.integers(1, 500), min_size=1), min_size=1)


@settings(max_examples=200)
@given(counts=_counts, fraction=st.floats(0.0, 0.5), max_share=st.floats(0.0, 0.5))
def test_rare_values_are_rare_rarest_first_and_capped(counts: dict[str, dict[str | None, int]], fraction: float,
                                                      max_share: float) -> None:
    """Each chosen value is under the fraction, together they cover at most max_share of the rows, and no
    value left out is rarer than a chosen one while it still fits under the fraction."""
    rows = max(sum(c.values()) for c in counts.values())
    split = OutlierSplit(fraction=fraction, max_share=max_share)
    rare = split.rare_values(counts, rows)
    chosen = [(col, v) for col, vs in rare.items() for v in vs]
    assert all(counts[col][v] < fraction * rows for col, v in chosen)
    assert sum(counts[col][v] for col, v in chosen) <= max_share * rows
    if chosen:
        rarest_left_out = [n for col, vs in counts.items() for v, n in vs.items()
                           if n < fraction * rows and v not in rare.get(col, frozenset())]
        assert all(n >= max(counts[col][v] for col, v in chosen) for n in rarest_left_out)


def test_a_rare_status_and_a_null_are_chosen_common_ones_are_not() -> None:
    """critical (1%) and null env (0.5%) are rare under 2%; info and prod are not; the cap stops at 10%."""
    counts = {"status": {"info": 9_000, "warn": 850, "critical": 100}, "env": {"prod": 9_900, None: 50}}
    assert OutlierSplit(fraction=0.02).rare_values(counts, 10_000) == {"status": frozenset({"critical"}),
                                                                        "env": frozenset({None})}
    # With room for 1% only, the rarest value (null env, 50 rows) goes alone.
    assert OutlierSplit(fraction=0.02, max_share=0.01).rare_values(counts, 10_000) == {"env": frozenset({None})}
    assert OutlierSplit(fraction=0.0).rare_values(counts, 10_000) == {}


def test_small_merges_are_not_split_and_bad_settings_are_named() -> None:
    """Only merges that would write min_outputs files get outlier files; out-of-range knobs raise OutlierError."""
    split = OutlierSplit(min_outputs=3)
    assert not split.applies(300, 150) and split.applies(301, 150)
    assert not OutlierSplit(fraction=0.0).applies(10**6, 10)
    with pytest.raises(OutlierError, match="fraction must be in"):
        OutlierSplit(fraction=1.5)
    with pytest.raises(OutlierError, match="min_outputs must be >= 1"):
        OutlierSplit(min_outputs=0)
