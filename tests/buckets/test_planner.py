"""The completionist's planner and the late-event rule: pure functions, properties over random buckets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from lakeshard.buckets import Backlog, BucketObservation, late_target, open_hour, plan_closures
from lakeshard.buckets.planner import hour_end, hour_of

T0 = datetime(2026, 1, 1, tzinfo=UTC)
QUIET, GRACE = timedelta(minutes=10), timedelta(minutes=15)

buckets = st.lists(
    st.builds(
        lambda tenant, hour, written_after: BucketObservation(
            f"t{tenant}", hour_of(T0 + timedelta(hours=hour)),
            T0 + timedelta(hours=hour, seconds=written_after), rows=1),
        st.integers(0, 3), st.integers(0, 5), st.integers(0, 3 * 3600)),  # files written up to 2h after the hour
    min_size=1, max_size=12, unique_by=lambda b: (b.tenant_id, b.hour))


def _due(b: BucketObservation) -> datetime:
    return max(b.newest_file_at + QUIET, hour_end(b.hour) + GRACE)


@settings(max_examples=200)
@given(buckets, st.integers(0, 12 * 3600))
def test_with_no_backlog_a_bucket_closes_exactly_when_quiet_and_past_its_hour_plus_grace(
    seen: list[BucketObservation], after: int
) -> None:
    now = T0 + timedelta(seconds=after)
    decisions = plan_closures(seen, Backlog(now), set(), now=now, quiet=QUIET, grace=GRACE)
    by_bucket = {(d.tenant_id, d.hour): d for d in decisions}
    assert len(by_bucket) == len(seen)
    for b in seen:
        assert by_bucket[(b.tenant_id, b.hour)].close == (now >= _due(b)), (b, now)


@settings(max_examples=200)
@given(buckets, st.integers(0, 6 * 3600))
def test_a_bucket_never_closes_while_the_watermark_is_before_its_hour_end_plus_grace(
    seen: list[BucketObservation], watermark_after: int
) -> None:
    now = T0 + timedelta(days=1)  # every bucket is long quiet
    watermark = T0 + timedelta(seconds=watermark_after)
    decisions = plan_closures(seen, Backlog(watermark, oldest_input="file:///landing/late.jsonl"), set(), now=now,
                              quiet=QUIET, grace=GRACE)
    for d in decisions:
        assert d.close == (watermark >= hour_end(d.hour) + GRACE)
        if not d.close:
            assert "file:///landing/late.jsonl" in d.reason


@given(buckets)
def test_buckets_with_events_in_flight_stay_open_and_closed_ones_are_not_decided_again(
    seen: list[BucketObservation]
) -> None:
    now = T0 + timedelta(days=1)
    first = (seen[0].tenant_id, seen[0].hour)
    decisions = plan_closures(seen, Backlog(now, frozenset({first})), set(), now=now, quiet=QUIET, grace=GRACE)
    assert [d.close for d in decisions if (d.tenant_id, d.hour) == first] == [False]
    assert all(d.close for d in decisions if (d.tenant_id, d.hour) != first)
    again = plan_closures(seen, Backlog(now), {first}, now=now, quiet=QUIET, grace=GRACE)
    assert first not in {(d.tenant_id, d.hour) for d in again} and len(again) == len(seen) - 1


def test_reasons_say_why_a_bucket_is_open() -> None:
    b = BucketObservation("acme", "2026-01-01T10", T0 + timedelta(hours=10, minutes=58), 5)
    now = T0 + timedelta(hours=11, minutes=3)
    [d] = plan_closures([b], Backlog(now), set(), now=now, quiet=QUIET, grace=GRACE)
    assert not d.close and d.reason == "last file written 5m00s ago; quiet period is 10m00s"
    later = T0 + timedelta(hours=11, minutes=20)
    [d] = plan_closures([b], Backlog(later), set(), now=later, quiet=QUIET, grace=GRACE)
    assert d.close and d.reason.startswith("quiet for 22m00s (>= 10m00s); backlog watermark 2026-01-01T11:20:00Z")


def test_late_events_go_to_the_open_bucket_with_their_flag() -> None:
    now = datetime(2026, 1, 1, 12, 5, tzinfo=UTC)
    closed = {("acme", "2026-01-01T09"), ("acme", "2026-01-01T12")}
    assert late_target("acme", datetime(2026, 1, 1, 10, 30, tzinfo=UTC), closed, now) == ("2026-01-01T10", False)
    assert late_target("zeta", datetime(2026, 1, 1, 9, 30, tzinfo=UTC), closed, now) == ("2026-01-01T09", False)
    # acme's 09 is closed; its current hour (12) is closed too (a clock running behind): the next open one.
    assert late_target("acme", datetime(2026, 1, 1, 9, 30, tzinfo=UTC), closed, now) == ("2026-01-01T13", True)
    assert open_hour("zeta", now, closed) == "2026-01-01T12"
