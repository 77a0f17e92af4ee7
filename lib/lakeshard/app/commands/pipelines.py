"""The ``lakeshard pipeline`` commands: ``run`` the declared flows, print the ``events`` log, show the ``graph``.

The top-level parser wires them in with :func:`add_commands`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lakeshard.app.cli_args import config_from_args
from lakeshard.pipelines import Pipeline, PipelineError, describe

__all__ = ["add_commands", "cmd_pipeline_events", "cmd_pipeline_graph", "cmd_pipeline_run", "parse_params"]


def _pipeline() -> Pipeline:
    # Imported on use: the flows load pyspark, and `lakeshard --help` should not pay for it.
    from lakeshard.pipelines import lakeshard_pipeline

    return lakeshard_pipeline()


def parse_params(items: Sequence[str]) -> dict[str, dict[str, str]]:
    """Return ``FLOW.NAME=VALUE`` items as ``{flow: {name: value}}``.

    Raises:
        PipelineError: an item is not of that form.
    """
    out: dict[str, dict[str, str]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        flow, dot, name = key.partition(".")
        if not sep or not dot or not flow or not name:
            raise PipelineError(f"--param expects FLOW.NAME=VALUE (e.g. autoshard.apply=false), found {item!r}")
        out.setdefault(flow.strip(), {})[name.strip()] = value
    return out


def _progress(line: str) -> None:
    """Print one of the runner's progress lines: a flow's failure (``<flow>: FAILED: <error>``) on stderr, every
    other line on stdout."""
    failed = line.split(": ", 2)[1:2] == ["FAILED"]
    print(line, file=sys.stderr if failed else sys.stdout, flush=True)


def cmd_pipeline_run(args: argparse.Namespace) -> int:
    """Run the declared flows in DAG order (all, or --flows), incrementally or with --full-refresh; log every event."""
    from lakeshard.lake import open_store
    from lakeshard.pipelines import run_pipeline
    from lakeshard.runtime import get_spark

    pipeline = _pipeline()
    params = parse_params(args.param or [])
    pipeline.order(args.flows)  # unknown flows fail here, before Spark starts
    cfg = config_from_args(args)
    spark = get_spark(cfg)
    report = run_pipeline(spark, open_store(spark, cfg), cfg, pipeline, flows=args.flows,
                          full_refresh=args.full_refresh, params=params, say=_progress)
    print(report.render())
    print(f"event log: lakeshard pipeline events --run {report.run_id} --lakehouse {cfg.lakehouse}")
    return 0 if report.ok else 1


def _expectations(rules: Sequence[Mapping[str, Any]] | None) -> str:
    return ", ".join(f"{r['name']} {r['passed']}/{r['passed'] + r['failed']}" for r in rules or []) or "-"


def cmd_pipeline_events(args: argparse.Namespace) -> int:
    """Print the pipeline event log of one run (default: the latest) from the lakehouse's ``pipeline_events``."""
    from lakeshard.lake import open_store
    from lakeshard.pipelines import EventLog
    from lakeshard.report import format_table
    from lakeshard.runtime import get_spark

    cfg = config_from_args(args)
    spark = get_spark(cfg)
    log = EventLog(open_store(spark, cfg), cfg)
    run_id = args.run or log.latest_run()
    if run_id is None:
        raise PipelineError(f"no pipeline has run in {cfg.lakehouse} yet (no {log.uri} table); "
                            "run 'lakeshard pipeline run' first")
    rows = log.read(run_id).collect()
    if not rows:
        raise PipelineError(f"run {run_id!r} is not in the event log {log.uri}")
    table = [[r["flow"], r["event"], r["timestamp"].strftime("%H:%M:%S"), *[
        "-" if r[k] is None else f"{r[k]:,}" for k in ("rows_in", "rows_out", "duplicates_dropped", "quarantined",
                                                        "dropped")],
        _expectations(r["expectations"]), "-" if r["duration_seconds"] is None else round(r["duration_seconds"], 1),
        (r["error"] or "")[:100]] for r in rows]
    print(f"run {run_id} ({'full refresh' if rows[0]['full_refresh'] else 'incremental'}) in {cfg.lakehouse}")
    print(format_table(["flow", "event", "time", "rows in", "rows out", "duplicates", "quarantined", "dropped",
                        "expectations passed", "seconds", "error"], table))
    return 0


def cmd_pipeline_graph(args: argparse.Namespace) -> int:
    """Print the declared flows in DAG order: what each runs after, reads and writes, its expectations and job."""
    from lakeshard.report import format_table

    pipeline = _pipeline()
    rows = [[*row, pipeline.flow(row[0]).job] for row in describe(pipeline)]
    print(f"pipeline {pipeline.name!r} (sources: {', '.join(pipeline.sources)})")
    print(format_table(["flow", "after", "reads -> writes", "expectations", "job"], rows))
    return 0


def add_commands(
    subparsers: Any,
    common: Callable[[argparse.ArgumentParser, bool], None],
) -> None:
    """Add ``pipeline`` and its subcommands ``run``, ``events``, ``graph`` to the top-level ``subparsers``
    (arguments as in :func:`lakeshard.app.commands.balancing.add_commands`)."""
    top = subparsers.add_parser("pipeline", help="run the declared pipeline, print its event log or its graph",
                                description="Declarative pipeline: run the flows, read the event log, show the DAG.")
    sub = top.add_subparsers(dest="pipeline_command", required=True, metavar="SUBCOMMAND")

    p = sub.add_parser("run", help="run the flows in DAG order (incremental; --full-refresh)",
                       description=cmd_pipeline_run.__doc__)
    common(p, True)
    p.add_argument("--flows", nargs="+", metavar="FLOW", help="run only these flows (default: all)")
    p.add_argument("--full-refresh", action="store_true",
                   help="empty the flows' tables and rebuild them from their inputs (upstream flows included)")
    p.add_argument("--param", action="append", metavar="FLOW.NAME=VALUE",
                   help="override a flow parameter, e.g. autoshard.apply=false (repeatable)")
    p.set_defaults(func=cmd_pipeline_run)

    p = sub.add_parser("events", help="print the event log of a run (default: the latest)",
                       description=cmd_pipeline_events.__doc__)
    common(p, False)
    p.add_argument("--run", metavar="ID", help="the run id (default: the latest run)")
    p.set_defaults(func=cmd_pipeline_events)

    p = sub.add_parser("graph", help="print the flows in DAG order with their tables and expectations",
                       description=cmd_pipeline_graph.__doc__)
    p.set_defaults(func=cmd_pipeline_graph)
