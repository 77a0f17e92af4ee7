"""lakeshard's own pipeline, declared once: route → ingest (the ingest job) and close_buckets → compact →
autoshard → balance → compact_books (the hourly maintenance job). Each flow function is a thin call into the library.

Adding a flow takes a function and one :class:`Flow` entry (see ``run_compact`` below), then a task for it
in the job's ``bundles/<job>.job.yml`` (``tests/bundles`` fails until the job matches). A flow that both
reads and rewrites a table (compaction of ``events``) lists it in ``inputs`` and ``outputs``; the DAG
ignores a flow's own outputs among its inputs, and ``refresh=()`` keeps a full refresh from emptying a
table the flow does not rebuild from scratch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from lakeshard.dedupe import ShardWriter, WriteReport, WritersOnDemand
from lakeshard.errors import ConfigError, DamagedDataFile
from lakeshard.pipelines.context import ExpectationGate, FlowContext, FlowResult
from lakeshard.pipelines.declaration import Flow, Joint, Pipeline
from lakeshard.pipelines.errors import PipelineError
from lakeshard.pipelines.expectations import expect, expect_or_fail
from lakeshard.routing import FusedHandoff, Router, RouteReport, RoutingTables, ShardAllocator
from lakeshard.runtime import arrow_dataframe
from lakeshard.tables import (
    BUCKETS,
    CHUNK_LOCKS,
    EVENTS,
    ID_INDEX,
    LANDING_BATCHES,
    QUARANTINE,
    ROUTED,
    ROUTING_METRICS,
    TENANT_SETTINGS,
)
from lakeshard.utc import aware

if TYPE_CHECKING:
    import pyarrow as pa

    from lakeshard.compaction import Bucket

# The flows of the maintenance job (close, compact, autoshard, balance, compact_books)
# import their library where they run: `lakeshard ingest` loads only what routing and the shard writers need.

__all__ = ["INGEST_FLOW", "LANDING", "compact_buckets", "ingest_fused", "ingest_shards",
           "lakeshard_pipeline", "run_autoshard", "run_balance", "run_close_buckets", "run_compact",
           "run_compact_books", "run_ingest", "run_route"]

LANDING = "landing"  # the pipeline's source: the landing zone of JSON files (cfg.landing)
INGEST_FLOW = "ingest"  # the flow whose gate every commit to events passes (the route flow finishing a fused batch)


def _observe(ctx: FlowContext, table: str, before: int | None) -> None:
    """Count the flow's ``expect`` rules on the rows it committed to ``table`` since version ``before``."""
    # A flow that committed nothing has no rows to count (and needs no Spark session to say so); the gate reads
    # what was committed with pyarrow when its rules run in Arrow.
    if ctx.flow.expectations and _version(ctx, table) != before:
        ctx.gate.observe_added(ctx.cfg.table_uri(table), before)


def _version(ctx: FlowContext, table: str) -> int | None:
    uri = ctx.cfg.table_uri(table)
    return ctx.store.version(uri) if ctx.store.exists(uri) else None


def run_route(ctx: FlowContext) -> FlowResult:
    """Return what routing every new landing file did (:class:`~lakeshard.routing.router.Router`).

    New batches go through ``routed``; a batch a crashed process planned for the fused hand-off is finished that
    way, by writers built here (docs/decisions.md, record 19).
    """
    ctx.store.create_all([*RoutingTables(ctx.store, ctx.cfg).table_specs(), *Router.table_specs(ctx.cfg)])
    router = _router(ctx, WritersOnDemand(partial(_finishing_writers, ctx)), fused=False)
    router.ensure_tables()
    before = _version(ctx, ROUTED)
    reports = router.run()
    _observe(ctx, ROUTED, before)
    return _route_result(router, reports)


def _router(ctx: FlowContext, handoff: FusedHandoff, *, fused: bool) -> Router:
    return Router(ctx.session, ctx.store, ctx.cfg, max_batch_files=int(ctx.params["batch_files"]),
                  allocator=ShardAllocator(ctx.store, ctx.cfg, clock=ctx.clock), clock=ctx.clock,
                  handoff=handoff, fused=fused)


def _finishing_writers(ctx: FlowContext) -> ShardWriter:
    """Return writers for every shard that finish a fused batch in a route-only run: they commit through the ingest
    flow's expectation gate as a fused run's writers do, and the route flow's expectations count the batch's routed
    rows, as in a fused run."""
    gate = ctx.gate_of(INGEST_FLOW)
    if gate is None:  # a context outside a pipeline run: the declared ingest flow's rules
        gate = ExpectationGate(lakeshard_pipeline().flow(INGEST_FLOW), ctx.store, ctx.cfg, ctx.run_id)
    return ShardWriter(ctx.session, ctx.store, ctx.cfg, ingest_shards(RoutingTables(ctx.store, ctx.cfg), ""),
                       gate=gate, clock=ctx.clock, on_delivered=partial(_count_routed, ctx))


def _count_routed(ctx: FlowContext, routed: pa.Table) -> None:
    """Count the route flow's expectations on a fused batch's routed rows its writers committed (the rows ``routed``
    would have received; a batch handed back goes to routed, whose added rows the route flow counts after the run)."""
    if ctx.flow.expectations:
        gate = ctx.gate
        if gate.runs_in_arrow(routed.schema):
            gate.observe_arrow(routed)
        else:
            gate.observe(arrow_dataframe(ctx.spark, routed))


def ingest_fused(route_ctx: FlowContext, ingest_ctx: FlowContext) -> tuple[FlowResult, FlowResult]:
    """Return what the route and ingest flows did, run as one pass with the fused hand-off: each batch the driver
    takes is parsed once, routed in memory and handed by the router to the writers of every shard
    (:meth:`ShardWriter.deliver <lakeshard.dedupe.writer.ShardWriter.deliver>`), which commit it to ``events`` and
    ``event_ids`` without ``routed`` (docs/decisions.md, record 19); bigger batches go through ``routed`` and are
    then written by the same writers. With ingest shards named, the two flows run one after the other as usual."""
    if str(ingest_ctx.params["shards"]).strip():
        return run_route(route_ctx), run_ingest(ingest_ctx)
    tables = RoutingTables(ingest_ctx.store, ingest_ctx.cfg)
    # Every table of the run made ready in one call: created side by side where each create waits on Delta's engine.
    ingest_ctx.store.create_all([*tables.table_specs(), *Router.table_specs(ingest_ctx.cfg),
                                 *ShardWriter.table_specs(ingest_ctx.store, ingest_ctx.cfg)])
    shards = ingest_shards(tables, "")
    writer = ShardWriter(ingest_ctx.session, ingest_ctx.store, ingest_ctx.cfg, shards, gate=ingest_ctx.gate,
                         clock=ingest_ctx.clock, on_delivered=partial(_count_routed, route_ctx))
    router = _router(route_ctx, writer, fused=True)
    router.ensure_tables()
    before = _version(route_ctx, ROUTED)
    reports = router.run()
    _observe(route_ctx, ROUTED, before)
    writer.run()  # batches too big for the driver, or met by a shard's damaged file, went through routed
    writer.compact_ids()
    return _route_result(router, reports), _ingest_result(ingest_ctx, writer.reports, writer.conflicts,
                                                      writer.stopped)


def _route_result(router: Router, reports: Sequence[RouteReport]) -> FlowResult:
    details: dict[str, int] = {"batches": len(reports), "files": sum(r.files for r in reports)}
    if already := sum(r.already_committed for r in reports):  # another router committed part of these batches
        details["already_committed"] = already
    if replayed := sum(1 for r in reports if r.replayed):  # batches a stopped run had planned, finished here
        details["replayed"] = replayed
    left = router.last_intake
    if left is not None and left.held_back:  # left for a later run: records still being written
        details["held_back_bytes"] = left.held_back_bytes
    if left is not None and left.dangling:  # links without a target (routed once it appears)
        details["dangling_links"] = len(left.dangling)
    return FlowResult(rows_in=sum(r.records for r in reports), rows_out=sum(r.routed for r in reports),
                      quarantined=sum(r.quarantined for r in reports), details=details, outcome=left)


def ingest_shards(tables: RoutingTables, text: str) -> list[int]:
    """Return the shards an ingest run writes: those ``text`` lists (comma-separated), or every shard of the ring.

    Raises:
        ConfigError: ``text`` names something that is not a shard of the lakehouse's ring (such a writer would
            route events it never writes).
    """
    total = tables.topology().total_shards
    if not text.strip():
        return list(range(total))
    try:
        shards = [int(s) for s in text.split(",")]
    except ValueError:
        raise ConfigError(f"ingest shards: expected comma-separated shard numbers, found {text!r}") from None
    outside = sorted({s for s in shards if not 0 <= s < total})
    if outside:
        raise ConfigError(f"ingest shards: expected shards of the ring 0-{total - 1} of {tables.cfg.lakehouse}, "
                          f"found {', '.join(map(str, outside))}")
    return shards


def run_ingest(ctx: FlowContext) -> FlowResult:
    """Return what the shard writers did (:class:`~lakeshard.dedupe.writer.ShardWriter`), expectations gated."""
    tables = RoutingTables(ctx.store, ctx.cfg)
    ctx.store.create_all([*tables.table_specs(), *ShardWriter.table_specs(ctx.store, ctx.cfg)])
    shards = ingest_shards(tables, str(ctx.params["shards"]))
    writer = ShardWriter(ctx.session, ctx.store, ctx.cfg, shards, gate=ctx.gate, clock=ctx.clock)
    return _ingest_result(ctx, writer.run(), writer.conflicts, writer.stopped)


def _ingest_result(ctx: FlowContext, reports: Sequence[WriteReport], conflicts: int,
                   stopped: Mapping[int, DamagedDataFile]) -> FlowResult:
    # A fused step (routed_version < 0) is reported with the engine "fused".
    engines = {"fused" if r.routed_version < 0 else r.engine for r in reports}
    details: dict[str, Any] = {"steps": len(reports), "conflicts": conflicts, "engines": ",".join(sorted(engines))}
    if stopped:  # shards left behind a damaged file; the others were written
        details["stopped_shards"] = ",".join(map(str, sorted(stopped)))
        details["damage"] = "\n".join(str(stopped[s]) for s in sorted(stopped))
    return FlowResult(rows_in=sum(r.rows_in for r in reports), rows_out=sum(r.written for r in reports),
                      duplicates_dropped=sum(r.duplicates_in_batch + r.duplicates_in_index for r in reports),
                      quarantined=ctx.gate.quarantined, dropped=ctx.gate.dropped, details=details, outcome=reports)


def run_close_buckets(ctx: FlowContext) -> FlowResult:
    """Return the completionist's run (:class:`~lakeshard.buckets.Completionist`): open buckets in, closed out."""
    from lakeshard.buckets import Completionist

    completionist = Completionist(ctx.spark, ctx.store, ctx.cfg,
                                  quiet=timedelta(minutes=float(ctx.params["quiet_minutes"])),
                                  grace=timedelta(minutes=float(ctx.params["grace_minutes"])), clock=ctx.clock)
    before = _version(ctx, BUCKETS)
    run = completionist.run()
    _observe(ctx, BUCKETS, before)
    return FlowResult(rows_in=len(run.decisions), rows_out=len(run.closed),
                      details={"closed": len(run.closed), "still_open": sum(1 for d in run.decisions if not d.close),
                               "failed_checks": len(run.failed_checks), "in_flight": len(run.backlog.in_flight),
                               "version": run.committed_version}, outcome=run)


def run_compact(ctx: FlowContext) -> FlowResult:
    """Return what compacting ``events`` did (files in, files out): closed buckets merge at once, open ones
    lazily by tier, every round under the replace locks of its buckets (:mod:`lakeshard.versions`)."""
    from lakeshard.buckets import Completionist
    from lakeshard.compaction import compact_events

    events = ctx.cfg.table_uri(EVENTS)
    if not ctx.store.exists(events):
        return FlowResult(details={"rounds": 0, "skipped": f"no {EVENTS} table yet"})
    closed = Completionist(ctx.spark, ctx.store, ctx.cfg).closed()
    report = compact_events(ctx.store, ctx.cfg, sealed=closed, buckets=compact_buckets(str(ctx.params["buckets"])),
                            min_files=int(ctx.params["min_files"]), target_rows=int(ctx.params["target_rows"]),
                            include_open=bool(ctx.params["include_open"]), now=ctx.clock())
    done = [r for r in report.rounds if not r.gave_up]
    return FlowResult(rows_in=sum(r.files_removed for r in done), rows_out=sum(r.files_added for r in done),
                      details={"rounds": len(done), "buckets": len({t.bucket for r in done for t in r.tasks}),
                               "rows_rewritten": sum(r.rows for r in done), "conflicts": report.conflicts,
                               "gave_up": len(report.gave_up), "closed_buckets": len(closed),
                               "failed": [f"{tenant}/{hour}: {why}" for (tenant, hour), why in report.failed],
                               "skipped": report.plan.skipped}, outcome=report)


def run_autoshard(ctx: FlowContext) -> FlowResult:
    """Return the autosharder's run (:func:`~lakeshard.balancing.executor.autoshard`): tenants in, settings out."""
    from lakeshard.balancing import autoshard

    before = _version(ctx, TENANT_SETTINGS)
    run = autoshard(ctx.store, ctx.cfg, now=_as_of(ctx), apply=bool(ctx.params["apply"]))
    _observe(ctx, TENANT_SETTINGS, before)
    plan = run.plan
    return FlowResult(rows_in=plan.tenants_with_metrics, rows_out=len(plan.settings) if run.version is not None else 0,
                      details={"ups": plan.ups, "downs": plan.downs, "stale": plan.stale, "version": run.version,
                               "skipped": plan.skipped}, outcome=run)


def run_balance(ctx: FlowContext) -> FlowResult:
    """Return the balancer's run (:func:`~lakeshard.balancing.executor.balance`): tenants in, salt moves out."""
    from lakeshard.balancing import balance

    before = _version(ctx, TENANT_SETTINGS)
    cfg = ctx.cfg
    if int(ctx.params["max_moves"]) > 0:  # 0: the configured cap
        cfg = replace(cfg, balancing=replace(cfg.balancing, max_moves=int(ctx.params["max_moves"])))
    run = balance(ctx.store, cfg, now=_as_of(ctx), apply=bool(ctx.params["apply"]))
    _observe(ctx, TENANT_SETTINGS, before)
    plan = run.plan
    return FlowResult(rows_in=len(plan.shard_bytes_before), rows_out=len(plan.moves) if run.version is not None else 0,
                      details={"moves": len(plan.moves), "max_over_mean_before": round(plan.before.max_over_mean, 3),
                               "max_over_mean_after": round(plan.after.max_over_mean, 3), "stopped": plan.stopped,
                               "version": run.version}, outcome=run)


def run_compact_books(ctx: FlowContext) -> FlowResult:
    """Return what compacting the bookkeeping tables did (files in, files out)
    (:func:`~lakeshard.maintenance.compact_bookkeeping`); it also cleans every table's log past its
    retention (:func:`~lakeshard.maintenance.clean_logs`) and, in the run of the configured hour,
    vacuums every table (:func:`~lakeshard.maintenance.vacuum_tables`)."""
    from lakeshard.maintenance import clean_logs, compact_bookkeeping, vacuum_tables

    limit = int(ctx.params["max_files"])  # 0: the configured maintenance.bookkeeping_max_files
    report = compact_bookkeeping(ctx.store, ctx.cfg, max_files=limit or None)
    cleaned = clean_logs(ctx.store, ctx.cfg)
    vacuumed = vacuum_tables(ctx.store, ctx.cfg, now=ctx.clock())
    done = [t for t in report.tables if t.version is not None]
    return FlowResult(rows_in=sum(t.files_before for t in done), rows_out=sum(t.files_after for t in done),
                      details={"tables": ",".join(t.table for t in done),
                               "conflicts": sum(1 for t in report.tables if t.conflict),
                               "checkpoints": ",".join(t.table for t in report.tables if t.checkpoint is not None),
                               "intervals_restored": ",".join(t.table for t in report.tables if t.interval_restored),
                               "log_files_removed": sum(cleaned.values()),
                               "vacuumed": ",".join(vacuumed), "files_vacuumed": sum(vacuumed.values())},
                      outcome=report)


def compact_buckets(text: str) -> list[Bucket] | None:
    """Return the buckets a ``compact.buckets`` parameter names (a JSON list of ``[tenant, hour]`` pairs), or
    None for every bucket when it is empty.

    Raises:
        PipelineError: the text is not such a list.
    """
    if not text.strip():
        return None
    try:
        pairs = json.loads(text)
        return [(str(tenant), str(hour)) for tenant, hour in pairs]
    except (ValueError, TypeError) as exc:
        raise PipelineError(f"parameter compact.buckets: expected a JSON list of [tenant, hour] pairs, found "
                            f"{text[:200]!r} ({exc})") from None


def _as_of(ctx: FlowContext) -> datetime:
    """Return the ``as_of`` parameter as a UTC time (empty: the run's clock)."""
    text = str(ctx.params["as_of"]).strip()
    if not text:
        return ctx.clock()
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise PipelineError(f"parameter {ctx.flow.name}.as_of: expected an ISO time like 2026-01-01T10:00:00Z, "
                            f"found {text!r}") from None
    return aware(when)


def lakeshard_pipeline() -> Pipeline:
    """Return lakeshard's pipeline: the flows that exist today, with their tables, parameters and expectations."""
    return Pipeline("lakeshard", (
        Flow("route", run_route, inputs=(LANDING,), outputs=(ROUTED, QUARANTINE, ROUTING_METRICS, LANDING_BATCHES),
             params={"batch_files": 200},
             expectations=(expect("routed_to_a_shard", "shard >= 0"),),
             job="ingest", notebook="notebooks/jobs/route.ipynb",
             description="validate landing records, quarantine bad ones, give each event a placement and shard"),
        Flow(INGEST_FLOW, run_ingest, inputs=(ROUTED,), outputs=(EVENTS, ID_INDEX), gated=True,
             params={"shards": ""},
             expectations=(expect("has_service", "service IS NOT NULL"),
                           expect_or_fail("identified", "tenant_id <> '' AND event_id <> '' AND ts IS NOT NULL")),
             job="ingest", notebook="notebooks/jobs/ingest.ipynb",
             description="shard writers: drop duplicates against the ID index, commit each event exactly once"),
        Flow("close_buckets", run_close_buckets, inputs=(EVENTS,), outputs=(BUCKETS,), refresh_with=(EVENTS,),
             timed=True,
             params={"quiet_minutes": 10.0, "grace_minutes": 15.0},
             expectations=(expect("closed_with_checksum", "state <> 'closed' OR checksum IS NOT NULL"),),
             job="maintenance", notebook="notebooks/jobs/close_buckets.ipynb",
             description="close (tenant, hour) buckets that are quiet and have nothing in flight upstream, after "
                         "an integrity check"),
        Flow("compact", run_compact, inputs=(EVENTS, BUCKETS), outputs=(EVENTS, CHUNK_LOCKS), refresh=(), timed=True,
             params={"min_files": 32, "target_rows": 1_000_000, "include_open": False, "buckets": ""},
             job="maintenance", notebook="notebooks/jobs/compact.ipynb",
             description="merge closed buckets' small files now and open ones' lazily by tier, sorted, with "
                         "pruning regexes, under the chunks' replace locks"),
        Flow("autoshard", run_autoshard, inputs=(ROUTING_METRICS,), outputs=(TENANT_SETTINGS,), refresh=(),
             params={"apply": True, "as_of": ""}, after=("compact",),
             expectations=(expect("shard_count_positive", "shard_count >= 1"),),
             job="maintenance", notebook="notebooks/jobs/autoshard.ipynb",
             description="size each tenant's shard count from its bytes/s (up fast, down slowly)"),
        Flow("balance", run_balance, inputs=(ROUTING_METRICS, TENANT_SETTINGS), outputs=(TENANT_SETTINGS,),
             refresh=(), params={"apply": True, "max_moves": 0, "as_of": ""},
             job="maintenance", notebook="notebooks/jobs/balance.ipynb",
             description="move tenant salts off the hottest shards, capped per run"),
        # Rewrites its tables in place with the same rows (data_change=False): no table links it to the others.
        Flow("compact_books", run_compact_books, params={"max_files": 0}, after=("balance",),
             job="maintenance", notebook="notebooks/jobs/compact_books.ipynb",
             description="rewrite each bookkeeping table that has grown many small files into one file per "
                         "partition, checkpoint logs that lack one, clean old log entries and, once a day, vacuum"),
    ), sources=(LANDING,), joints=(Joint("route", "ingest", ingest_fused, handoff="fused"),))
