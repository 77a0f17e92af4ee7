"""The main job end to end on the embedded lakehouse: the declared pipeline, checked against ground truth.

Steps: generate a landing zone (``lakeshard.synth``) → run the declared pipeline through its runner
(``lakeshard.pipelines``): route (validate, quarantine, place, shard) → ingest (shard writers, exactly once
against the IDs kept in the lakehouse) → close buckets (the completionist, with an integrity check) →
compact (closed buckets sealed, under replace locks, with pruning regexes) → autoshard → balance; every
flow lands in the ``pipeline_events`` log → check the lakehouse against the generator's ground truth and
the event log against the landing zone → needle queries with regex pruning vs min/max only → report
(text + PNG).

The generated landing zone is complete before the run starts and its hours are long over, so the demo
lets buckets close without a quiet period, and has the router and writers take the stream in slices
(``route.batch_files``, ``dedupe.max_batch_bytes``) as a live stream would arrive, leaving several small
files per bucket for compaction to merge.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from lakeshard.app.plots.landing import landing_overview_plot
from lakeshard.app.plots.pipeline import pipeline_plot
from lakeshard.app.plots.routing import shard_load_plot
from lakeshard.app.progress import landing_bar
from lakeshard.config import LakeshardConfig
from lakeshard.lake import TableStore, naming_damaged_files
from lakeshard.landing import CATEGORIES
from lakeshard.report import ShardLoad, format_table, shard_load
from lakeshard.runtime import runtime_name
from lakeshard.synth import Manifest, SynthSpec, TruthCheck, check_against_truth, generate_landing
from lakeshard.tables import EVENTS, QUARANTINE, ROUTED

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakeshard.balancing import AutoshardRun, BalanceRun
    from lakeshard.pipelines import RunReport
    from lakeshard.query import PruningReport

__all__ = ["DEMO_FLOW_PARAMS", "DemoReport", "NeedleQuery", "run_demo"]

T = TypeVar("T")

# The landing zone is complete and its hours are over: buckets may close at once. Routing 20 files a
# batch slices the stream as it would arrive live.
DEMO_FLOW_PARAMS: dict[str, dict[str, Any]] = {"close_buckets": {"quiet_minutes": 0.0},
                                               "route": {"batch_files": 20}}
# One routed commit per writer step (the memory gate at its smallest): several small files per bucket.
DEMO_WRITER_BATCH_BYTES = 1


@dataclass(frozen=True)
class NeedleQuery:
    """One needle query: what it asked, the rows found, and the files read with regexes vs min/max only."""

    label: str
    tenant: str
    predicates: Mapping[str, str]
    rows: int
    rows_full_scan: int
    with_regex: PruningReport
    min_max_only: PruningReport

    @property
    def ok(self) -> bool:
        """Return whether pruning lost nothing and regexes read no more files than min/max alone."""
        return self.rows == self.rows_full_scan and len(self.with_regex.read) <= len(self.min_max_only.read)


@dataclass(frozen=True)
class DemoReport:
    """Everything the demo measured, with the paths of what it wrote."""

    lakehouse: str
    landing: str
    manifest: Manifest
    run: RunReport
    log: dict[str, dict[str, int]]  # per flow, the counts its ``completed`` row in ``pipeline_events`` holds
    quarantine_by_category: dict[str, int]
    routed_truth: TruthCheck
    truth: TruthCheck
    load: ShardLoad
    buckets_closed: int
    buckets_changed: int  # closed buckets whose rows differ from their closing checksum (must be 0)
    files_before_compaction: int
    files_after_compaction: int
    queries: list[NeedleQuery] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    plots: list[Path] = field(default_factory=list)
    autoshard: AutoshardRun | None = None  # what the autoshard flow planned and committed (None: it did not run)
    balance: BalanceRun | None = None
    target_bytes_per_second: float = 0.0  # the bytes/s one shard takes from one tenant (balancing config)
    runtime: str = ""  # the Spark runtime it ran on: "Spark Connect" or "classic"

    def load_story(self) -> list[str]:
        """Return what autosharding and balancing did, and why max/mean shard bytes is what it is."""
        load, lines = self.load, []
        a, b = self.autoshard, self.balance
        if a is not None:
            p = a.plan
            lines.append(f"autoshard: {p.ups} tenants up, {p.downs} down" if p.changes
                         else f"autoshard changed no shard count: {p.skipped}")
        if b is not None:
            p2 = b.plan
            lines.append(
                f"balance: per-shard load of the last metric windows, max/mean {p2.before.max_over_mean:.2f} -> "
                f"{p2.after.max_over_mean:.2f} with {len(p2.moves)} salt moves (each from the tenant's next "
                f"placement window; the events above were placed before); stopped: {p2.stopped}")
        tenant, size = load.biggest_tenant
        busiest = a.plan.busiest if a is not None else None
        rate = f" (the busiest tenant's newest rate: {busiest[1]:,.0f} bytes/s)" if busiest else ""
        if tenant:
            share = size / max(1, sum(load.bytes_by_shard.values()))
            lines.append(
                f"why max/mean shard bytes is {load.max_over_mean:.2f}: {tenant} alone sends {share:.0%} of all "
                f"bytes, {load.floor:.2f}x a mean shard's share on {load.total_shards} shards, and a shard takes "
                f"whole tenants; a tenant gets a second shard only above {self.target_bytes_per_second:,.0f} "
                f"bytes/s{rate}")
        return lines

    @property
    def records(self) -> int:
        """Return the landing records the router read (from the event log)."""
        return self.log["route"]["rows_in"]

    @property
    def accounted(self) -> int:
        """Return the records the event log says went somewhere: events, duplicates, quarantine, dropped."""
        route, ingest = self.log["route"], self.log["ingest"]
        return (ingest["rows_out"] + ingest["duplicates_dropped"] + route["quarantined"] + ingest["quarantined"]
                + ingest["dropped"])

    @property
    def ok(self) -> bool:
        """Return whether every check held: the run, conservation, quarantine, exactly once, buckets, pruning."""
        m, r, route, ingest = self.manifest, self.routed_truth, self.log["route"], self.log["ingest"]
        return (
            self.run.ok
            and self.records == m.records == route["rows_out"] + route["quarantined"] == self.accounted
            and ingest["rows_in"] == route["rows_out"]
            and self.quarantine_by_category == {k: v for k, v in m.bad_by_category.items() if v}
            and r.missing == 0 and r.unexpected == 0 and r.duplicate_rows == m.duplicate_records
            and self.truth.exactly_once and self.truth.rows == m.unique_events == ingest["rows_out"]
            and self.buckets_closed > 0 and self.buckets_changed == 0
            and self.files_after_compaction < self.files_before_compaction
            and bool(self.queries) and all(q.ok for q in self.queries)
        )

    def render(self) -> str:
        """Return the report as text for the terminal."""
        m, r, t, load = self.manifest, self.routed_truth, self.truth, self.load
        route, ingest = self.log["route"], self.log["ingest"]
        checks = [
            ["records read from landing (event log)", m.records, self.records],
            ["routed + quarantined", self.records, route["rows_out"] + route["quarantined"]],
            ["quarantined (bad records)", m.bad_records, route["quarantined"]],
            ["events routed, duplicates included", m.unique_events + m.duplicate_records, r.rows],
            ["duplicates dropped by the writers", m.duplicate_records, ingest["duplicates_dropped"]],
            ["events in 'events'", m.unique_events, t.rows],
            ["events lost", 0, t.missing],
            ["events invented", 0, t.unexpected],
            ["events twice in 'events'", 0, t.duplicate_rows],
            ["records the event log accounts for", m.records, self.accounted],
            ["closed buckets changed since closing", 0, self.buckets_changed],
        ]
        lines = [
            f"lakehouse: {self.lakehouse}",
            f"landing:   {self.landing}",
            f"runtime:   {self.runtime}",
            "",
            self.run.render(),
            "",
            format_table(["check", "expected (ground truth)", "found", "ok"], [[*c, c[1] == c[2]] for c in checks]),
            "",
            format_table(
                ["quarantine reason", "generated", "quarantined"],
                [[c, m.bad_by_category.get(c, 0), self.quarantine_by_category.get(c, 0)]
                 for c in CATEGORIES if m.bad_by_category.get(c, 0) or self.quarantine_by_category.get(c, 0)],
            ),
            "",
            format_table(
                ["routing, buckets, compaction", "value"],
                [["placements", load.placements],
                 ["shards used / total", f"{load.shards_used} / {load.total_shards}"],
                 ["max / mean shard bytes", round(load.max_over_mean, 2)],
                 ["tenants on more than one shard", load.multi_shard_tenants],
                 ["lowest max / mean any placement reaches", round(load.floor, 2)],
                 ["buckets closed (integrity checked)", self.buckets_closed],
                 ["files in 'events' before / after compaction",
                  f"{self.files_before_compaction} / {self.files_after_compaction}"]],
            ),
            *self.load_story(),
            "",
            format_table(
                ["needle query", "tenant", "rows (full scan)", "files considered", "read: regex", "read: min/max",
                 "ok"],
                [[q.label, q.tenant, f"{q.rows} ({q.rows_full_scan})", q.with_regex.considered,
                  len(q.with_regex.read), len(q.min_max_only.read), q.ok] for q in self.queries],
            ),
            "",
            format_table(["step", "seconds"], [[k, round(v, 2)] for k, v in self.seconds.items()]),
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
        cfg: configuration; ``cfg.lakehouse`` and ``cfg.landing`` say where tables and input go (the demo
            sets ``dedupe.max_batch_bytes`` to slice the stream, see the module docstring).
        spec: the synthetic traffic to generate into ``cfg.landing``.
        out: directory for the report's PNGs.
        say: where progress lines go.
        progress: show a progress bar while generating.
    """
    import dataclasses

    from lakeshard.buckets import Completionist
    from lakeshard.pipelines import EventLog, PipelineError, run_pipeline

    cfg = dataclasses.replace(cfg, dedupe=dataclasses.replace(cfg.dedupe, max_batch_bytes=DEMO_WRITER_BATCH_BYTES))
    seconds: dict[str, float] = {}
    steps = 5

    def step(n: int, name: str, fn: Callable[[], T]) -> T:
        say(f"[{n}/{steps}] {name} ...")
        start = time.perf_counter()
        result = fn()
        seconds[name] = time.perf_counter() - start
        return result

    bar = landing_bar(progress)
    manifest = step(1, "generate landing zone", lambda: generate_landing(cfg.landing, spec, progress=bar,
                                                                          overwrite=True))
    say(f"      {manifest.records:,} records in {manifest.files} files ({manifest.unique_events:,} events, "
        f"{manifest.duplicate_records:,} duplicates, {manifest.bad_records} bad)")

    # The traffic is a replay of hours that ended at spec.end: sharding decisions look at the metric windows
    # as of then (by the wall clock every window is days stale and the autosharder rightly holds still).
    end = spec.end.strftime("%Y-%m-%dT%H:%M:%SZ")
    params = {**DEMO_FLOW_PARAMS, "autoshard": {"as_of": end}, "balance": {"as_of": end}}
    run = step(2, "pipeline: route -> ingest -> close_buckets -> compact -> autoshard -> balance -> compact_books",
               lambda: run_pipeline(spark, store, cfg, params=params, say=lambda line: say(f"      {line}")))
    for f in run.flows:
        seconds[f"  {f.flow}"] = f.seconds
    if not run.ok:  # the checks below read what the flows wrote: a failed flow is the answer, not their errors
        raise PipelineError(f"the demo's pipeline run failed, so its checks did not run:\n{run.render()}")

    def check() -> tuple[TruthCheck, TruthCheck, dict[str, int], dict[str, dict[str, int]], int, int]:
        from pyspark.sql import functions as F

        # Every file ever routed, also those the writers expired once consumed (on disk until a vacuum).
        routed_uri = cfg.table_uri(ROUTED)
        ever = [c.file for e in store.log_entries(routed_uri) for c in e.changes if c.action == "add"]
        # A damaged data file of a lakehouse given to the demo is one line naming it, not Spark's Java trace.
        with naming_damaged_files(routed_uri, ever):
            routed = check_against_truth(spark, store.read_files(routed_uri, ever), cfg.landing)
        events_uri, quarantine_uri = cfg.table_uri(EVENTS), cfg.table_uri(QUARANTINE)
        with naming_damaged_files(events_uri, store.files(events_uri)):
            events = check_against_truth(spark, store.read(events_uri), cfg.landing)
        with naming_damaged_files(quarantine_uri, store.files(quarantine_uri)):
            by_cat = [(str(r["category"]), int(r["n"])) for r in store.read(quarantine_uri).groupBy("category")
                      .agg(F.count(F.lit(1)).alias("n")).collect()]
        counts = ("rows_in", "rows_out", "duplicates_dropped", "quarantined", "dropped")
        log = {str(r["flow"]): {c: int(r[c] or 0) for c in counts}
               for r in EventLog(store, cfg).read(run.run_id).where("event = 'completed'").collect()}
        completionist = Completionist(spark, store, cfg)
        return (routed, events, dict(by_cat), log,
                len(completionist.closed()), len(completionist.verify()))

    routed_truth, truth, by_category, log, closed, changed = step(3, "check against ground truth and the event log",
                                                                   check)
    compact = run.flow("compact").result
    after = len(store.files(cfg.table_uri(EVENTS)))
    before = after + (compact.rows_in - compact.rows_out if compact else 0)
    queries = step(4, "needle queries: regex pruning vs min/max", lambda: needle_queries(spark, store, cfg))

    def plots() -> tuple[ShardLoad, list[Path]]:
        load = shard_load(store, cfg)
        return load, [
            landing_overview_plot(cfg.landing, manifest, by_category, out / "landing-overview.png"),
            shard_load_plot(load, out / "shard-load.png"),
            pipeline_plot(log, before, after, [(q.label, len(q.min_max_only.read), len(q.with_regex.read))
                                               for q in queries],
                          queries[0].tenant if queries else "-", out / "pipeline.png"),
        ]

    load, pngs = step(5, "plots", plots)
    autoshard, balance = (r.outcome if (r := run.flow(name).result) else None for name in ("autoshard", "balance"))
    return DemoReport(cfg.lakehouse, cfg.landing, manifest, run, log, by_category, routed_truth, truth, load, closed,
                      changed, before, after, queries, seconds, pngs, autoshard, balance,
                      cfg.balancing.target_bytes_per_second, runtime_name(spark))


def needle_queries(spark: SparkSession, store: TableStore, cfg: LakeshardConfig) -> list[NeedleQuery]:
    """Return needle queries on the busiest tenant's closed hours: its rarest service, its rarest env, and a
    service it never used that sorts between two it did — each answered with and without regex pruning and
    compared with a full scan."""
    from pyspark.sql import functions as F

    from lakeshard.query import read_events
    from lakeshard.utc import from_micros

    uri = cfg.table_uri(EVENTS)
    events = store.read(uri)
    tenant = str(events.groupBy("tenant_id").count().orderBy(F.desc("count"), "tenant_id").take(1)[0]["tenant_id"])
    mine = events.where(F.col("tenant_id") == tenant)
    span = mine.agg(F.min(F.unix_micros("ts")).alias("lo"), F.max(F.unix_micros("ts")).alias("hi")).collect()[0]
    start, end = from_micros(int(span["lo"])), from_micros(int(span["hi"]) + 1)

    def rarest(column: str) -> str:
        row = mine.where(F.col(column).isNotNull()).groupBy(column).count().orderBy("count", column).take(1)[0]
        return str(row[column])

    services = sorted(str(r["service"]) for r in mine.select("service").distinct().collect() if r["service"])
    between = next((f"{a}~" for a, b in itertools.pairwise(services) if f"{a}~" < b),
                   "zz-absent-service")
    asks = [("rarest service", {"service": rarest("service")}), ("rarest env", {"env": rarest("env")}),
            ("absent service between two present", {"service": between})]
    out = []
    for label, predicates in asks:
        found, with_regex = read_events(spark, store, uri, tenant=tenant, start=start, end=end,
                                        predicates=predicates)
        _, min_max = read_events(spark, store, uri, tenant=tenant, start=start, end=end, predicates=predicates,
                                 use_regex=False)
        full = mine
        for column, value in predicates.items():
            full = full.where(F.col(column) == value)
        out.append(NeedleQuery(label, tenant, predicates, found.count(), full.count(), with_regex, min_max))
    return out
