"""Declaring a pipeline (Delta Live Tables style): flows with their tables, parameters and expectations.

A :class:`Flow` names the tables it reads (``inputs``) and writes (``outputs``); a :class:`Pipeline`
joins flows into a DAG in which a flow runs after every other flow that produces one of its inputs (and
after the flows named in ``after``, for an order that is not carried by a table). Everything is checked
when the pipeline is built: an input nobody produces, a cycle, a name used twice, or an expectation a
flow cannot honour raises :class:`PipelineError` naming the flow and the table.

Example::

    route = Flow("route", run_route, inputs=("landing",), outputs=("routed", "quarantine"),
                 expectations=(expect("message_present", "message IS NOT NULL"),))
    ingest = Flow("ingest", run_ingest, inputs=("routed",), outputs=("events",), gated=True)
    pipeline = Pipeline("lakeshard", (route, ingest), sources=("landing",))
    pipeline.order()        # ["route", "ingest"]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lakeshard.pipelines.context import FlowContext, FlowResult
from lakeshard.pipelines.errors import PipelineError
from lakeshard.pipelines.expectations import Expectation, ExpectationKind

__all__ = ["Flow", "FlowFunction", "Joint", "Pipeline", "describe"]


FlowFunction = Callable[[FlowContext], FlowResult]


@dataclass(frozen=True)
class Flow:
    """One step of a pipeline, declared once: what it runs, what it reads and writes, how it is checked.

    Attributes:
        name: the flow's name (also the job task key in the bundle).
        run: the function that does the work; a thin call into the library (see ``lakeshard.pipelines.flows``).
        inputs: tables (or pipeline sources) whose data the flow consumes.
        outputs: tables the flow commits to; a full refresh empties them (see :attr:`refresh`).
        params: the flow's parameters and their defaults; a run may override them by name.
        expectations: rules checked on the rows the flow produces.
        gated: whether ``run`` passes its rows through the expectation gate *before* committing; only a
            gated flow can drop, quarantine or fail on rows. Others may only ``expect`` (record), which
            is checked on the rows they committed.
        after: flows that must run first although no table links them.
        refresh: the outputs a full refresh empties (default: all outputs). Read-modify-write state that
            must survive a refresh (shard settings) is left out.
        timed: the flow's decisions depend on the clock too (quiet periods, grace, settling files), so it
            runs even when none of its inputs changed since its last run.
        refresh_with: inputs this flow's outputs describe (bucket states describe ``events``): a full
            refresh that empties one of them refreshes this flow too, or its outputs would describe rows
            that are gone.
        job: the bundle job that runs this flow as a task (``bundles/<job>.job.yml``).
        notebook: the notebook that job task runs, relative to the repository root.
        description: one line for ``lakeshard pipeline graph``.
    """

    name: str
    run: FlowFunction
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)
    expectations: tuple[Expectation, ...] = ()
    gated: bool = False
    after: tuple[str, ...] = ()
    refresh: tuple[str, ...] | None = None
    refresh_with: tuple[str, ...] = ()
    timed: bool = False
    job: str = ""
    notebook: str = ""
    description: str = ""

    @property
    def produced(self) -> tuple[str, ...]:
        """Return the outputs this flow produces for others: those it does not also read.

        A flow that reads and rewrites a table (compaction of ``events``, the balancer's read-modify-write of
        ``tenant_settings``) is not what feeds that table to other flows, so it adds no DAG edge for it.
        """
        return tuple(t for t in self.outputs if t not in self.inputs)

    @property
    def refreshed_tables(self) -> tuple[str, ...]:
        """Return the tables a full refresh of this flow empties."""
        return self.outputs if self.refresh is None else self.refresh

    def with_expectations(self, *expectations: Expectation) -> Flow:
        """Return this flow with ``expectations`` instead of its declared ones."""
        return dataclasses.replace(self, expectations=tuple(expectations))


JointFunction = Callable[["FlowContext", "FlowContext"], "tuple[FlowResult, FlowResult]"]


@dataclass(frozen=True)
class Joint:
    """Two flows one function runs together when a run selects both and asks for ``handoff`` (see
    :func:`~lakeshard.pipelines.runner.run_pipeline`): the route and ingest flows with the fused hand-off
    (docs/decisions.md, record 19). Each flow keeps its own context, gate, result and event-log entries.
    """

    first: str
    second: str
    run: JointFunction
    handoff: str


@dataclass(frozen=True)
class Pipeline:
    """Flows joined into a DAG by the tables they share; checked when built.

    Raises:
        PipelineError: a flow name repeats, an input is neither a source nor any flow's output, a flow
            names an unknown flow in ``after``, a ``refresh`` table is not an output, an ungated flow
            declares an expectation other than ``expect``, two expectations of a flow share a name, or
            the flows form a cycle (the message lists it).
    """

    name: str
    flows: tuple[Flow, ...]
    sources: tuple[str, ...] = ()
    joints: tuple[Joint, ...] = ()

    def __post_init__(self) -> None:
        names = [f.name for f in self.flows]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise PipelineError(f"pipeline {self.name!r}: flow name(s) {repeated} declared more than once")
        for flow in self.flows:
            self._check_flow(flow)
        self.order()  # raises on a cycle

    def _check_flow(self, flow: Flow) -> None:
        produced = {t for f in self.flows for t in f.outputs}  # rewriters count: the table exists
        for table in flow.inputs:
            if table not in produced and table not in self.sources:
                raise PipelineError(
                    f"flow {flow.name!r} reads {table!r}, which no flow of pipeline {self.name!r} writes and "
                    f"which is not a source; known tables: {sorted(produced)}, sources: {list(self.sources)}")
        unknown_after = [a for a in flow.after if a not in self.names]
        if unknown_after:
            raise PipelineError(f"flow {flow.name!r} runs after unknown flow(s) {unknown_after}; "
                                f"flows: {self.names}")
        stray = [t for t in flow.refreshed_tables if t not in flow.outputs]
        if stray:
            raise PipelineError(f"flow {flow.name!r} would refresh {stray}, which are not among its outputs "
                                f"{list(flow.outputs)}")
        loose = [t for t in flow.refresh_with if t not in flow.inputs]
        if loose or (flow.refresh_with and not flow.refreshed_tables):
            raise PipelineError(f"flow {flow.name!r}: refresh_with {list(flow.refresh_with)} must name its own "
                                f"inputs {list(flow.inputs)} and the flow must have tables to refresh")
        rules = [e.name for e in flow.expectations]
        if len(set(rules)) != len(rules):
            raise PipelineError(f"flow {flow.name!r}: expectation names repeat: {rules}")
        if not flow.gated:
            acting = [f"{e.kind.value}({e.name!r})" for e in flow.expectations if e.kind is not ExpectationKind.RECORD]
            if acting:
                raise PipelineError(
                    f"flow {flow.name!r} commits inside the library without an expectation gate, so it can only "
                    f"record expectations (expect); found {acting}")

    @property
    def names(self) -> list[str]:
        """Return the flow names in declaration order."""
        return [f.name for f in self.flows]

    def flow(self, name: str) -> Flow:
        """Return the flow called ``name``.

        Raises:
            PipelineError: there is none (the message lists the flows).
        """
        for f in self.flows:
            if f.name == name:
                return f
        raise PipelineError(f"pipeline {self.name!r} has no flow {name!r}; flows: {self.names}")

    def upstream(self, name: str) -> list[str]:
        """Return the flows ``name`` runs directly after (producers of its inputs, and ``after``), sorted."""
        flow = self.flow(name)
        producers = {f.name for f in self.flows if f.name != name and set(f.produced) & set(flow.inputs)}
        return sorted(producers | set(flow.after))

    def edges(self) -> list[tuple[str, str]]:
        """Return the DAG's edges ``(upstream, downstream)`` in declaration order of the downstream flow."""
        return [(u, f.name) for f in self.flows for u in self.upstream(f.name)]

    def order(self, only: Iterable[str] | None = None) -> list[str]:
        """Return the flows in a topological order (declaration order among independent flows).

        Args:
            only: run just these flows (still in DAG order); None means all.

        Raises:
            PipelineError: a cycle (named), or an unknown flow in ``only``.
        """
        pending = {f.name: set(self.upstream(f.name)) for f in self.flows}
        done: list[str] = []
        while pending:
            ready = [n for n in self.names if n in pending and not pending[n] - set(done)]
            if not ready:
                raise PipelineError(f"pipeline {self.name!r} has a cycle: {' -> '.join(self._cycle(pending))}")
            done.append(ready[0])
            del pending[ready[0]]
        if only is None:
            return done
        wanted = set(only)
        for name in wanted:
            self.flow(name)
        return [n for n in done if n in wanted]

    def _cycle(self, pending: Mapping[str, set[str]]) -> list[str]:
        """Return one cycle among ``pending`` flows, first flow repeated at the end."""
        path = [min(pending)]
        while True:
            nxt = sorted(u for u in pending[path[-1]] if u in pending)[0]
            if nxt in path:
                loop = [*path[path.index(nxt):], nxt]
                return list(reversed(loop))
            path.append(nxt)

    def with_upstream(self, names: Iterable[str]) -> list[str]:
        """Return ``names`` and every flow they depend on, directly or through others, in DAG order.

        A notebook run by hand locally uses it to build its inputs first; a job task runs its flow alone.
        """
        out: set[str] = set()
        frontier = list(names)
        while frontier:
            current = frontier.pop()
            if current not in out:
                out.add(current)
                frontier += self.upstream(current)
        return self.order(out)

    def downstream(self, name: str) -> set[str]:
        """Return every flow that depends on ``name``, directly or through others."""
        out: set[str] = set()
        frontier = [name]
        while frontier:
            current = frontier.pop()
            for u, d in self.edges():
                if u == current and d not in out:
                    out.add(d)
                    frontier.append(d)
        return out

    def jobs(self) -> dict[str, list[str]]:
        """Return each bundle job's flows in DAG order."""
        out: dict[str, list[str]] = {}
        for name in self.order():
            out.setdefault(self.flow(name).job, []).append(name)
        return out

    def replace(self, *flows: Flow) -> Pipeline:
        """Return this pipeline with the flows of the same names replaced by ``flows`` (checked again)."""
        by_name = {f.name: f for f in flows}
        for name in by_name:
            self.flow(name)
        return Pipeline(self.name, tuple(by_name.get(f.name, f) for f in self.flows), self.sources)

    def extend(self, *flows: Flow) -> Pipeline:
        """Return this pipeline with ``flows`` added (checked again): how later modules plug their flows in."""
        return Pipeline(self.name, (*self.flows, *flows), self.sources)


def describe(pipeline: Pipeline) -> Sequence[tuple[str, str, str, str]]:
    """Return one row per flow in DAG order: name, after, inputs → outputs, expectations."""
    rows = []
    for name in pipeline.order():
        f = pipeline.flow(name)
        rules = ", ".join(f"{e.kind.value}:{e.name}" for e in f.expectations) or "-"
        rows.append((name, ", ".join(pipeline.upstream(name)) or "-",
                     f"{', '.join(f.inputs) or '-'} -> {', '.join(f.outputs) or '-'}", rules))
    return rows
