"""The ``lakeshard`` commands' one way into the pipeline: :func:`run_flows` runs named flows of
:func:`~lakeshard.pipelines.flows.lakeshard_pipeline` through :func:`~lakeshard.pipelines.runner.run_pipeline`,
so ``lakeshard ingest``, ``buckets close``, ``compact --apply``, ``autoshard --apply`` and ``balance --apply``
apply the same flow functions, parameters and expectations as the jobs, and write the same event log.

Example::

    report = run_flows(cfg, ["route", "ingest"], {"ingest": {"shards": "0,1"}}, lazy=True)
    routed = report.flow("route").result
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lakeshard.config import LakeshardConfig
from lakeshard.pipelines.runner import RunReport

__all__ = ["FlowRunner", "flow_outcome", "run_flow", "run_flows"]

FlowRunner = Callable[[LakeshardConfig, str, Mapping[str, Any]], Any]
"""How a command runs one flow: ``(cfg, flow, params) -> outcome`` (:func:`run_flow`)."""


def run_flows(cfg: LakeshardConfig, flows: Sequence[str], params: Mapping[str, Mapping[str, Any]] | None = None, *,
              lazy: bool = False, say: Callable[[str], None] = lambda line: None, handoff: str = "") -> RunReport:
    """Return the report of running ``flows`` of lakeshard's pipeline on ``cfg.lakehouse`` with ``params``.

    Args:
        cfg: the configuration (lakehouse, landing zone, settings).
        flows: the flows to run (in DAG order).
        params: parameter overrides by flow, as :func:`~lakeshard.pipelines.runner.run_pipeline` takes them.
        lazy: open a store that starts Spark only when a step needs it (:func:`lakeshard.lake.open_lazy_store`),
            so a run with nothing new to do needs no JVM.
        say: where the runner's progress lines go.
        handoff: ``"fused"`` runs route and ingest as one call when both are selected (see
            :func:`~lakeshard.pipelines.runner.run_pipeline`).

    Raises:
        Exception: the exception of the first flow that failed (the others' runs are in the event log).
    """
    from lakeshard import lake
    from lakeshard.pipelines.runner import run_pipeline

    if lazy:
        spark = None
        store = lake.open_lazy_store(cfg)
    else:
        from lakeshard.runtime import get_spark

        spark = get_spark(cfg)
        store = lake.open_store(spark, cfg)
    report = run_pipeline(spark, store, cfg, flows=flows, params=params, say=say, handoff=handoff)
    report.raise_failure()
    return report


def flow_outcome(report: RunReport, flow: str) -> Any:
    """Return what ``flow``'s library call returned in ``report`` (a plan, a report), or None when the flow did
    not run because its inputs were unchanged (``up_to_date``)."""
    result = report.flow(flow).result
    return None if result is None else result.outcome


def run_flow(cfg: LakeshardConfig, flow: str, params: Mapping[str, Any]) -> Any:
    """Return what ``flow``'s library call returned when run through the pipeline runner with ``params`` (None:
    its inputs were unchanged since its last run, which the event log says; a line says so too).

    The ``lakeshard`` commands that commit (``buckets close``, ``compact --apply``, ``autoshard --apply``,
    ``balance --apply``) are given this function by the top-level parser.

    Raises:
        Exception: the flow's own exception when it failed.
    """
    report = run_flows(cfg, [flow], {flow: params})
    outcome = flow_outcome(report, flow)
    if outcome is None and report.flow(flow).status == "up_to_date":
        print(f"{flow}: up to date: its input tables are unchanged since its last run (event log: lakeshard "
              f"pipeline events --run {report.run_id})")
    return outcome
