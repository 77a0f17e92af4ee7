"""The Arrow route gives each event the shard and window the allocator's own placement gives it, one event at a time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakeshard.config import load_config
from lakeshard.lake import TableStore
from lakeshard.routing.allocator import ShardAllocator
from lakeshard.routing.arrow_route import route_arrow
from lakeshard.routing.errors import RoutingError

T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
tenants = st.sampled_from(["acme", "zeta", "ünïcødé", "a/b c", "t" * 40])
events = st.lists(st.tuples(tenants, st.integers(-600, 3 * 3600), st.text(max_size=12)), min_size=1, max_size=80)


@pytest.fixture
def allocator(store: TableStore, tmp_path: Path) -> ShardAllocator:
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh"),
                                 "routing": {"total_shards": 16, "default_shard_count": 3}}, env={})
    return ShardAllocator(store, cfg)


def _events(rows: list[tuple[str, int, str]]) -> pa.Table:
    return pa.table({"tenant_id": pa.array([t for t, _, _ in rows], pa.string()),
                     "event_id": pa.array([e for _, _, e in rows], pa.string()),
                     "ts": pa.array([T0 + timedelta(seconds=s) for _, s, _ in rows], pa.timestamp("us", tz="UTC"))})


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=events)
def test_each_event_lands_where_its_placement_puts_it(allocator: ShardAllocator, rows: list[tuple[str, int, str]]
                                                      ) -> None:
    routed = route_arrow(_events(rows), allocator)
    for (tenant, seconds, event_id), window, shard in zip(rows, routed.column("window_start").to_pylist(),
                                                          routed.column("shard").to_pylist(), strict=True):
        placement = allocator.get_placement(tenant, T0 + timedelta(seconds=seconds))
        assert (window, shard) == (placement.window_start, placement.shard_for(event_id))


def test_an_event_without_a_tenant_is_named(allocator: ShardAllocator) -> None:
    rows = _events([("acme", 0, "e1")]).set_column(0, "tenant_id", pa.array([None], pa.string()))
    with pytest.raises(RoutingError, match="expected every event to have a tenant_id, found 1 without"):
        route_arrow(rows, allocator)
