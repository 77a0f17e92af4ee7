"""Declarative pipelines (Delta Live Tables style): flows declared once with their tables, parameters and
expectations, run in DAG order by a thin local runner that writes an event log (``pipeline_events``).

Example::

    from lakeshard.pipelines import lakeshard_pipeline, run_pipeline

    report = run_pipeline(spark, store, cfg)  # every flow, in DAG order
    print(report.render())
    EventLog(store, cfg).read(report.run_id).show()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakeshard._lazy import lazy_exports

if TYPE_CHECKING:
    from lakeshard.pipelines.commands import run_flow, run_flows
    from lakeshard.pipelines.context import (
        ExpectationFailed,
        ExpectationGate,
        FlowContext,
        FlowResult,
        RuleCount,
    )
    from lakeshard.pipelines.declaration import (
        Flow,
        Pipeline,
        describe,
    )
    from lakeshard.pipelines.errors import (
        PipelineError,
    )
    from lakeshard.pipelines.eventlog import (
        EventLog,
    )
    from lakeshard.pipelines.expectations import (
        Expectation,
        ExpectationKind,
        expect,
        expect_or_drop,
        expect_or_fail,
        expect_or_quarantine,
    )
    from lakeshard.pipelines.flows import (
        ingest_shards,
        lakeshard_pipeline,
    )
    from lakeshard.pipelines.runner import (
        RunReport,
        run_pipeline,
    )

# Spark and Arrow load on first use of a name, not on `import lakeshard.pipelines`.
__all__ = [
    "EventLog",
    "Expectation",
    "ExpectationFailed",
    "ExpectationGate",
    "ExpectationKind",
    "Flow",
    "FlowContext",
    "FlowResult",
    "Pipeline",
    "PipelineError",
    "RuleCount",
    "RunReport",
    "describe",
    "expect",
    "expect_or_drop",
    "expect_or_fail",
    "expect_or_quarantine",
    "ingest_shards",
    "lakeshard_pipeline",
    "run_flow",
    "run_flows",
    "run_pipeline",
]

__getattr__, __dir__ = lazy_exports(globals())
