"""The local runner: a thin topological executor over a :class:`~lakeshard.pipelines.declaration.Pipeline`.

It is not an engine: each flow's function calls the library (which is already incremental and exactly
once), and the runner only orders the calls, passes parameters and the expectation gate, skips what
cannot or need not run, and writes the event log.

* **Incremental** (the default): a flow whose inputs are all tables, none of which changed since its last
  completed run, is recorded ``up_to_date`` and not called. Flows reading a source (the landing zone)
  always run, the library finds what is new; so do ``timed`` flows, whose decisions change with the clock
  alone (a bucket's quiet period ends, a tier's files settle), and so does a flow given a parameter away from
  its default (``autoshard --as-of T`` asks a new question of the same inputs).
* **Full refresh**: before running, every selected flow's refreshable outputs are emptied with one Delta
  commit each (all live files removed; history, time travel and app-transaction progress stay), then the
  flows rebuild them from their inputs. A flow's progress over its input lives in Delta app transactions
  that only move forward (the writers' ``writer/<shard>`` → routed version), so an emptied flow could not
  re-read an unchanged input: a full refresh therefore also refreshes every flow upstream of a selected
  one that has tables to refresh, back to the sources (``--flows ingest --full-refresh`` re-routes the
  landing zone too), and the rebuilt input is new to the flow again. A flow whose outputs describe a
  refreshed table (``refresh_with``: bucket states describe ``events``) is refreshed with it.
* **Failure**: a flow that raises is recorded ``failed`` with the message; flows downstream of it are
  recorded ``skipped`` and not called; independent flows still run.

Example::

    report = run_pipeline(spark, store, cfg)                              # the whole lakeshard pipeline
    report = run_pipeline(spark, store, cfg, flows=["ingest"], full_refresh=True)
    print(report.render())
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lakeshard.config import LakeshardConfig
from lakeshard.errors import ServerUnresponsive
from lakeshard.lake import TableStore
from lakeshard.pipelines.context import ExpectationGate, FlowContext, FlowResult, RuleCount
from lakeshard.pipelines.declaration import Flow, Joint, Pipeline
from lakeshard.pipelines.errors import PipelineError
from lakeshard.pipelines.eventlog import EventLog, FlowEvent
from lakeshard.report import format_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["FlowRun", "RunReport", "refresh_closure", "resolve_params", "run_pipeline", "truncate"]


@dataclass(frozen=True)
class FlowRun:
    """How one flow ended in a run: ``completed``, ``failed``, ``skipped`` or ``up_to_date``."""

    flow: str
    status: str
    result: FlowResult | None = None
    expectations: tuple[RuleCount, ...] = ()
    seconds: float = 0.0
    error: str | None = None
    # The exception a failed flow raised, for a caller that reports it as its own (the ``lakeshard`` commands).
    exception: BaseException | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class RunReport:
    """One pipeline run: its id and how each flow ended, in DAG order."""

    run_id: str
    pipeline: str
    full_refresh: bool
    flows: list[FlowRun] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Return whether no flow failed or was skipped because of a failure."""
        return all(f.status in ("completed", "up_to_date") for f in self.flows)

    def flow(self, name: str) -> FlowRun:
        """Return the run of flow ``name``.

        Raises:
            PipelineError: the flow was not part of this run.
        """
        for f in self.flows:
            if f.flow == name:
                return f
        raise PipelineError(f"run {self.run_id} did not include flow {name!r}; it ran {[f.flow for f in self.flows]}")

    def raise_failure(self) -> None:
        """Raise the exception of the first flow that failed in this run; return when none failed."""
        for f in self.flows:
            if f.exception is not None:
                raise f.exception

    def render(self) -> str:
        """Return the run as a table for the terminal."""
        rows = []
        for f in self.flows:
            r = f.result
            counts = [r.rows_in, r.rows_out, r.duplicates_dropped, r.quarantined, r.dropped] if r else ["-"] * 5
            rules = ", ".join(f"{c.rule.name} {c.passed}/{c.passed + c.failed}" for c in f.expectations) or "-"
            rows.append([f.flow, f.status, *counts, rules, round(f.seconds, 1), (f.error or "")[:80]])
        table = format_table(["flow", "status", "rows in", "rows out", "duplicates", "quarantined", "dropped",
                              "expectations passed", "seconds", "error"], rows)
        verdict = "ok" if self.ok else "FAILED"
        return f"run {self.run_id} of pipeline {self.pipeline!r}{' (full refresh)' if self.full_refresh else ''}: " \
               f"{verdict}\n{table}"


def resolve_params(pipeline: Pipeline, overrides: Mapping[str, Mapping[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """Return every flow's parameters: its declared defaults, overridden by ``overrides[flow][name]``.

    Values given as strings (CLI, widgets) are converted to the type of the default.

    Raises:
        PipelineError: an override names an unknown flow or parameter, or cannot be converted.
    """
    out = {f.name: dict(f.params) for f in pipeline.flows}
    for flow_name, values in (overrides or {}).items():
        flow = pipeline.flow(flow_name)
        for key, value in values.items():
            if key not in flow.params:
                raise PipelineError(f"flow {flow_name!r} has no parameter {key!r}; parameters: {sorted(flow.params)}")
            out[flow_name][key] = _convert(flow_name, key, value, flow.params[key])
    return out


def _convert(flow: str, key: str, value: Any, default: Any) -> Any:
    if not isinstance(value, str) or isinstance(default, str) or default is None:
        return value
    if isinstance(default, bool):
        if value.strip().lower() in {"1", "true", "yes"}:
            return True
        if value.strip().lower() in {"0", "false", "no"}:
            return False
        raise PipelineError(f"parameter {flow}.{key}: expected true or false, found {value!r}")
    try:
        return type(default)(value)
    except (TypeError, ValueError):
        raise PipelineError(f"parameter {flow}.{key}: expected {type(default).__name__}, found {value!r}") from None


def refresh_closure(pipeline: Pipeline, names: Sequence[str]) -> list[str]:
    """Return ``names`` plus every flow upstream of one that a full refresh empties, and every flow whose
    outputs describe an emptied table (``refresh_with``); see the module docstring."""
    out: set[str] = set(names)
    stack = [n for n in names if pipeline.flow(n).refreshed_tables]
    while stack:
        flow = pipeline.flow(stack.pop())
        describing = [f.name for f in pipeline.flows if set(f.refresh_with) & set(flow.refreshed_tables)]
        for other in [*pipeline.upstream(flow.name), *describing]:
            if other not in out and pipeline.flow(other).refreshed_tables:
                out.add(other)
                stack.append(other)
    return sorted(out)


def truncate(store: TableStore, table: str, run_id: str) -> int | None:
    """Return the version of the commit that removed every live file of ``table`` (None: nothing to remove)."""
    if not store.exists(table):
        return None
    files = [f.path for f in store.files(table)]
    if not files:
        return None
    result = store.replace_files(table, files, None, data_change=True,
                                 metadata={"full_refresh": run_id})
    return result.version


class _Run:
    """The state of one run: what has ended how, and the log it writes to."""

    def __init__(self, spark: SparkSession | None, store: TableStore, cfg: LakeshardConfig, pipeline: Pipeline,
                 full_refresh: bool, say: Callable[[str], None], clock: Callable[[], datetime]) -> None:
        self.spark, self.store, self.cfg, self.pipeline = spark, store, cfg, pipeline
        self.full_refresh = full_refresh
        self.say = say
        self.clock = clock
        self.run_id = f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"
        self.log = EventLog(store, cfg)
        self.report = RunReport(self.run_id, pipeline.name, full_refresh)
        self.blocked: set[str] = set()  # flows downstream of a failure
        self.gates: dict[str, ExpectationGate] = {}

    def gate(self, flow: str) -> ExpectationGate:
        """Return the run's expectation gate of ``flow``: one per flow, whichever call commits its rows."""
        if flow not in self.gates:
            self.gates[flow] = ExpectationGate(self.pipeline.flow(flow), self.store, self.cfg, self.run_id)
        return self.gates[flow]

    def context(self, flow: Flow, params: Mapping[str, Any]) -> FlowContext:
        return FlowContext(self.spark, self.store, self.cfg, flow, self.run_id, params, self.gate(flow.name),
                           self.clock, gates=self.gate)

    def event(self, flow: str, kind: str, **extra: Any) -> None:
        self.log.append(self.flow_event(flow, kind, **extra))

    def flow_event(self, flow: str, kind: str, **extra: Any) -> FlowEvent:
        return FlowEvent(self.run_id, self.pipeline.name, flow, kind, self.full_refresh, **extra)

    def input_versions(self, flow: Flow) -> dict[str, int] | None:
        """Return the versions of ``flow``'s input tables, or None when it always runs (it reads a source, or its
        decisions depend on the clock)."""
        if any(t in self.pipeline.sources for t in flow.inputs) or not flow.inputs or flow.timed:
            return None
        return {t: self.store.version(self.cfg.table_uri(t)) if self.store.exists(self.cfg.table_uri(t)) else -1
                for t in flow.inputs}

    def execute_joint(self, joint: Joint, params: Mapping[str, Mapping[str, Any]]) -> list[FlowRun]:
        """Run ``joint``'s two flows with one call, each with its own context and gate; return both runs."""
        flows = [self.pipeline.flow(joint.first), self.pipeline.flow(joint.second)]
        if any(f.name in self.blocked for f in flows):
            return [self.execute(f, params[f.name]) for f in flows]
        # The two flows' events go to the log together: one commit where each flow would make its own.
        for flow in flows:
            self.say(f"{flow.name}: running ...")
        self.log.append(*(self.flow_event(flow.name, "started") for flow in flows))
        contexts = [self.context(flow, params[flow.name]) for flow in flows]
        start = time.perf_counter()
        try:
            results = joint.run(contexts[0], contexts[1])
        except ServerUnresponsive:  # the session is gone: no flow (nor the log) can go on, the run stops here
            raise
        except Exception as exc:  # both flows failed: recorded in the log, then independent flows go on
            seconds = time.perf_counter() - start
            message = f"{type(exc).__name__}: {exc}"
            runs, events = [], []
            for flow, ctx in zip(flows, contexts, strict=True):
                counts = tuple(ctx.gate.counts.values())
                events.append(self.flow_event(flow.name, "failed", expectations=counts, duration_seconds=seconds,
                                              error=message))
                self.blocked |= self.pipeline.downstream(flow.name)
                self.say(f"{flow.name}: FAILED: {message}")
                runs.append(FlowRun(flow.name, "failed", None, counts, seconds, message, exc))
            self.log.append(*events)
            return runs
        seconds = time.perf_counter() - start
        runs, events = [], []
        for flow, ctx, result in zip(flows, contexts, results, strict=True):
            counts = tuple(ctx.gate.counts.values())
            events.append(self.flow_event(flow.name, "completed", result=result, expectations=counts,
                                          duration_seconds=seconds, input_versions=self.input_versions(flow)))
            runs.append(FlowRun(flow.name, "completed", result, counts, seconds))
        self.log.append(*events)
        return runs

    def execute(self, flow: Flow, params: Mapping[str, Any]) -> FlowRun:
        if flow.name in self.blocked:
            self.event(flow.name, "skipped", error="an upstream flow failed in this run")
            return FlowRun(flow.name, "skipped", error="an upstream flow failed in this run")
        seen = self.input_versions(flow)
        # A parameter away from its default asks a new question of the same inputs (e.g. as_of): always answer it.
        asked = any(flow.params.get(name) != value for name, value in params.items())
        if not (self.full_refresh or asked) and seen is not None and seen == self.log.last_completed_inputs(flow.name):
            self.event(flow.name, "up_to_date", input_versions=seen)
            self.say(f"{flow.name}: up to date (inputs unchanged: {seen})")
            return FlowRun(flow.name, "up_to_date")
        self.say(f"{flow.name}: running ...")
        self.event(flow.name, "started")
        ctx = self.context(flow, params)
        gate = ctx.gate
        start = time.perf_counter()
        try:
            result = flow.run(ctx)
        except ServerUnresponsive:  # the session is gone: no flow (nor the log) can go on, the run stops here
            raise
        except Exception as exc:  # recorded in the log, then the run goes on with independent flows
            seconds = time.perf_counter() - start
            message = f"{type(exc).__name__}: {exc}"
            counts = tuple(gate.counts.values())
            self.event(flow.name, "failed", expectations=counts, duration_seconds=seconds, error=message)
            self.blocked |= self.pipeline.downstream(flow.name)
            self.say(f"{flow.name}: FAILED: {message}")
            return FlowRun(flow.name, "failed", None, counts, seconds, message, exc)
        seconds = time.perf_counter() - start
        counts = tuple(gate.counts.values())
        self.event(flow.name, "completed", result=result, expectations=counts, duration_seconds=seconds,
                   input_versions=self.input_versions(flow))
        return FlowRun(flow.name, "completed", result, counts, seconds)


def run_pipeline(
    spark: SparkSession | None,
    store: TableStore,
    cfg: LakeshardConfig,
    pipeline: Pipeline | None = None,
    *,
    flows: Sequence[str] | None = None,
    full_refresh: bool = False,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    say: Callable[[str], None] = lambda line: None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    handoff: str = "",
) -> RunReport:
    """Return the report of running ``pipeline``'s flows (all, or ``flows``) in DAG order on ``cfg.lakehouse``.

    Args:
        spark: the session; None when ``store`` starts one on first use (:func:`lakeshard.lake.open_lazy_store`),
            so flows with nothing new to do need no JVM.
        pipeline: the declaration (default: :func:`lakeshard.pipelines.flows.lakeshard_pipeline`).
        flows: run only these flows (their order still follows the DAG).
        full_refresh: empty the selected flows' outputs first and rebuild them from their inputs (and the
            flows upstream of them, see the module docstring).
        params: parameter overrides by flow, e.g. ``{"autoshard": {"apply": False}}``.
        say: where progress lines go.
        clock: the time the flows decide by (placement windows, the parse's absurd-timestamp bound, settling
            landing files, quiet periods and grace, late buckets, metric windows); a simulation passes its own.
            Data files keep their real modification times.
        handoff: run each of the pipeline's joints with this hand-off whose two flows this run selects as one
            call (``"fused"``: route and ingest in one process, ``routed`` left out, docs/decisions.md record 19);
            empty: every flow on its own.

    Raises:
        PipelineError: an unknown flow or parameter (before anything runs).
    """
    if pipeline is None:
        from lakeshard.pipelines.flows import lakeshard_pipeline

        pipeline = lakeshard_pipeline()
    order = pipeline.order(refresh_closure(pipeline, flows or pipeline.names) if full_refresh else flows)
    resolved = resolve_params(pipeline, params)
    run = _Run(spark, store, cfg, pipeline, full_refresh, say, clock)
    if full_refresh:
        for name in order:
            for table in pipeline.flow(name).refreshed_tables:
                if truncate(store, cfg.table_uri(table), run.run_id) is not None:
                    say(f"{name}: emptied {table} for a full refresh")
    joints = {j.first: j for j in pipeline.joints if handoff and j.handoff == handoff
              and j.first in order and j.second in order}
    done: set[str] = set()
    for name in order:
        if name in done:
            continue
        if name in joints:
            runs = run.execute_joint(joints[name], resolved)
            done.update(r.flow for r in runs)
            run.report.flows.extend(runs)
            continue
        run.report.flows.append(run.execute(pipeline.flow(name), resolved[name]))
    return run.report
