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


def write_with_a_second_round_of_refusals(spark: Any, store: Any, cfg: Any, monkeypatch: Any) -> Any:
    """Run shard writers for shards 0 and 1 of a routed lakehouse while two of their events are refused, the second
    only once the first is out; check each refused row is dead-lettered once, naming its landing line, and every
    other event is written exactly once. Return the quarantine's URI."""
    import lakeshard.lake
    from lakeshard.dedupe.writer import EVENTS, ShardWriter
    from lakeshard.landing.reasons import WRITE_FAILED
    from lakeshard.tables import QUARANTINE, ROUTED

    routed = store.read(cfg.table_uri(ROUTED)).where("shard IN (0, 1)")
    first, second = sorted({str(r["event_id"]) for r in routed.select("event_id").limit(40).collect()})[:2]
    monkeypatch.setattr(lakeshard.lake, "write_partitioned", refusing_a_second_row_once_the_first_is_out(
        lakeshard.lake.write_partitioned, first={first}, second={second}))
    reports = ShardWriter(spark, store, cfg, [0, 1]).run()

    poisoned = routed.where(routed.event_id.isin([first, second]))
    quarantine = cfg.table_uri(QUARANTINE)
    dead = store.read(quarantine).where(f"category = '{WRITE_FAILED}'")
    assert sum(r.dead_lettered for r in reports) == poisoned.count() == dead.count() >= 2
    assert {(r["source_file"], r["line_number"]) for r in dead.collect()} == \
        {(r["source_file"], r["line_number"]) for r in poisoned.collect()}
    events = store.read(cfg.table_uri(EVENTS))
    key = ["tenant_id", "event_id", "ts"]
    expected = routed.where(~routed.event_id.isin([first, second])).dropDuplicates(key).count()
    assert events.count() == events.dropDuplicates(key).count() == expected
    return quarantine
