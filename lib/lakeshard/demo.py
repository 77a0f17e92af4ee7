"""The main job end to end on the embedded lakehouse, as far as lakeshard goes today.

Steps: generate a landing zone (``lakeshard.synth``) → route it (``lakeshard.routing``: validate every
record, quarantine the bad ones, give each event its tenant's time-bounded placement and shard, record
per-shard metrics; exactly once per landing file) → write it (``lakeshard.dedupe``: shard writers drop
retries and redeliveries against the IDs kept in the lakehouse and commit each event to ``events``
once) → check the lakehouse against the generator's ground truth → report (text + PNG).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from lakeshard.config import LakeshardConfig
from lakeshard.dedupe.writer import EVENTS, ShardWriter, WriteReport
from lakeshard.lake import TableStore
from lakeshard.landing import reasons
from lakeshard.report import format_table
from lakeshard.report.landing import landing_overview_plot
from lakeshard.report.routing import ShardLoad, shard_load, shard_load_plot
from lakeshard.routing.router import QUARANTINE, ROUTED, Router, RouteReport
from lakeshard.synth import Manifest, SynthSpec, generate_landing
from lakeshard.synth.verify import TruthCheck, check_against_truth

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DemoReport", "run_demo"]

T = TypeVar("T")


@dataclass(frozen=True)
class DemoReport:
    """Everything the demo measured, with the paths of what it wrote."""

    lakehouse: str
    landing: str
    manifest: Manifest
    batches: list[RouteReport]
    writes: list[WriteReport]
    quarantine_by_category: dict[str, int]
    routed_truth: TruthCheck
    truth: TruthCheck
    load: ShardLoad
    seconds: dict[str, float] = field(default_factory=dict)
    plots: list[Path] = field(default_factory=list)

    @property
    def records(self) -> int:
        """Return the landing records the router read."""
        return sum(b.records for b in self.batches)

    @property
    def quarantined(self) -> int:
        """Return the records the router quarantined."""
        return sum(b.quarantined for b in self.batches)

    @property
    def routed(self) -> int:
        """Return the events the router routed."""
        return sum(b.routed for b in self.batches)

    @property
    def ok(self) -> bool:
        """Return whether every check held: conservation, quarantine as generated, events as generated."""
        m, r = self.manifest, self.routed_truth
        return (
            self.records == m.records == self.routed + self.quarantined
            and self.quarantine_by_category == {k: v for k, v in m.bad_by_category.items() if v}
            and r.missing == 0 and r.unexpected == 0 and r.duplicate_rows == m.duplicate_records
            and self.truth.exactly_once and self.truth.rows == m.unique_events
            and self.routed == self.written + self.duplicates_dropped
        )

    @property
    def written(self) -> int:
        """Return the events the writers committed to ``events``."""
        return sum(w.written for w in self.writes)

    @property
    def duplicates_dropped(self) -> int:
        """Return the routed rows the writers dropped as duplicates (within a batch or against the ID index)."""
        return sum(w.duplicates_in_batch + w.duplicates_in_index for w in self.writes)

    def render(self) -> str:
        """Return the report as text for the terminal."""
        m, r, t, load = self.manifest, self.routed_truth, self.truth, self.load
        checks = [
            ["records read from landing", m.records, self.records],
            ["routed + quarantined", self.records, self.routed + self.quarantined],
            ["quarantined (bad records)", m.bad_records, self.quarantined],
            ["events routed, duplicates included", m.unique_events + m.duplicate_records, r.rows],
            ["duplicates dropped by the writers", m.duplicate_records, self.duplicates_dropped],
            ["events in 'events'", m.unique_events, t.rows],
            ["events lost", 0, t.missing],
            ["events invented", 0, t.unexpected],
            ["events twice in 'events'", 0, t.duplicate_rows],
        ]
        lines = [
            f"lakehouse: {self.lakehouse}",
            f"landing:   {self.landing}",
            "",
            format_table(["check", "expected (ground truth)", "found", "ok"], [[*c, c[1] == c[2]] for c in checks]),
            "",
            format_table(
                ["quarantine reason", "generated", "quarantined"],
                [[c, m.bad_by_category.get(c, 0), self.quarantine_by_category.get(c, 0)]
                 for c in reasons.CATEGORIES if m.bad_by_category.get(c, 0) or self.quarantine_by_category.get(c, 0)],
            ),
            "",
            format_table(
                ["routing", "value"],
                [["batches (landing files)", f"{len(self.batches)} ({sum(b.files for b in self.batches)})"],
                 ["placements", load.placements],
                 ["shards used / total", f"{load.shards_used} / {load.total_shards}"],
                 ["max / mean shard bytes", round(load.max_over_mean, 2)],
                 ["tenants on more than one shard", load.multi_shard_tenants]],
            ),
            "",
            format_table(["step", "seconds"], [[k, round(v, 2)] for k, v in self.seconds.items()]),
            "",
            "not yet in the pipeline: compaction and pruning, autosharding and balancing, bucket completeness",
            "— see the open issues.",
        ]
        lines += [f"plot: {p}" for p in self.plots]
        lines.append("result: " + ("all checks passed" if self.ok else "CHECKS FAILED"))
        return "\n".join(lines)


def run_demo(
    spark: SparkSession,
    store: TableStore,
    cfg: LakeshardConfig,
    spec: SynthSpec,
    *,
    out: Path,
    say: Callable[[str], None] = print,
    progress: bool = True,
) -> DemoReport:
    """Return the report of one end-to-end run into ``cfg.lakehouse`` from a fresh landing zone.

    Args:
        spark: the session (see :func:`lakeshard.runtime.get_spark`).
        store: the TableStore for the session.
        cfg: configuration; ``cfg.lakehouse`` and ``cfg.landing`` say where tables and input go.
        spec: the synthetic traffic to generate into ``cfg.landing``.
        out: directory for the report's PNGs.
        say: where progress lines go.
        progress: show a progress bar while generating.
    """
    seconds: dict[str, float] = {}
    steps = 5

    def step(n: int, name: str, fn: Callable[[], T]) -> T:
        say(f"[{n}/{steps}] {name} ...")
        start = time.perf_counter()
        result = fn()
        seconds[name] = time.perf_counter() - start
        return result

    manifest = step(1, "generate landing zone", lambda: generate_landing(cfg.landing, spec, progress=progress,
                                                                          overwrite=True))
    say(f"      {manifest.records:,} records in {manifest.files} files ({manifest.unique_events:,} events, "
        f"{manifest.duplicate_records:,} duplicates, {manifest.bad_records} bad)")

    def on_batch(r: RouteReport) -> None:
        say(f"      batch {r.batch}: {r.files} files, {r.routed:,} routed, {r.quarantined} quarantined")

    router = Router(spark, store, cfg)
    batches = step(2, "route (validate, place, shard, commit)", lambda: router.run(on_batch=on_batch))

    shards = list(range(router.allocator.tables.topology().total_shards))
    writes = step(3, "write exactly once (dedupe against the ID index)",
                  lambda: ShardWriter(spark, store, cfg, shards).run())

    def check() -> tuple[TruthCheck, TruthCheck, dict[str, int]]:
        from pyspark.sql import functions as F

        routed = check_against_truth(spark, store.read(cfg.table_uri(ROUTED)), cfg.landing)
        events = check_against_truth(spark, store.read(cfg.table_uri(EVENTS)), cfg.landing)
        by_cat = store.read(cfg.table_uri(QUARANTINE)).groupBy("category").agg(F.count(F.lit(1)).alias("n"))
        return routed, events, {str(r["category"]): int(r["n"]) for r in by_cat.collect()}

    routed_truth, truth, by_category = step(4, "check against ground truth", check)

    def plots() -> tuple[ShardLoad, list[Path]]:
        load = shard_load(store, cfg)
        return load, [
            landing_overview_plot(cfg.landing, manifest, by_category, out / "landing-overview.png"),
            shard_load_plot(load, out / "shard-load.png"),
        ]

    load, pngs = step(5, "plots", plots)
    return DemoReport(cfg.lakehouse, cfg.landing, manifest, batches, writes, by_category, routed_truth, truth, load,
                      seconds, pngs)
