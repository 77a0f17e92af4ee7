"""The compaction commands of ``lakeshard``: ``compact`` (plan; ``--apply`` commits) and ``query``.

``compact`` prints what the size-tiered and locality planners would merge in the ``events`` table (closed
buckets' small files at once), or why nothing would; ``--apply`` runs the pipeline's ``compact`` flow with the
command's options (each round one atomic swap under the chunks' replace locks, logged in ``pipeline_events``). ``query``
reads one tenant's events for a time range with equality / IN predicates and prints how many files each
pruning stage skipped. Ids starting with ``-`` are passed as ``--tenant=-x`` / ``--bucket=-x/HOUR``.

The top-level parser wires them in with :func:`add_commands`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from lakeshard.app.cli_args import bucket, config_from_args, count, iso_timestamp
from lakeshard.config import LakeshardConfig
from lakeshard.tables import EVENTS

if TYPE_CHECKING:
    from lakeshard.compaction import CompactionReport

# The same --lakehouse/--config handling and ISO timestamp parsing as the load-management commands.

__all__ = ["add_commands", "cmd_compact", "cmd_query"]

_SHOWN = 20  # rows of a plan printed before "... and N more"


def _predicate(text: str) -> tuple[str, str]:
    column, sep, value = text.partition("=")
    if not sep or not column:
        raise argparse.ArgumentTypeError(f"expected COLUMN=VALUE like service=billing, found {text!r}")
    return column, value


def cmd_compact(args: argparse.Namespace) -> int:
    """Plan size-tiered and locality merges of the events table's buckets (closed buckets' small files at once);
    --apply runs the pipeline's compact flow with these options."""
    import json

    from lakeshard.buckets import Completionist
    from lakeshard.compaction import LocalityPlanner, SizeTieredPlanner, compact_events
    from lakeshard.lake import open_store
    from lakeshard.report import format_table
    from lakeshard.runtime import get_spark

    cfg = config_from_args(args)
    min_files = SizeTieredPlanner().min_files if args.min_files is None else args.min_files
    target_rows = LocalityPlanner().target_rows if args.target_rows is None else args.target_rows
    if args.apply:
        report: CompactionReport = args.run_flow(cfg, "compact", {
            "min_files": min_files, "target_rows": target_rows, "include_open": args.include_open,
            "buckets": json.dumps(args.bucket) if args.bucket else ""})
    else:  # the flow's own call (closed buckets merge at once), committing nothing
        spark = get_spark(cfg)
        store = open_store(spark, cfg)
        report = compact_events(store, cfg, sealed=Completionist(spark, store, cfg).closed(),
                                buckets=args.bucket or None, min_files=min_files, target_rows=target_rows,
                                include_open=args.include_open, apply=False)
    if report is None:  # the flow found no events table
        print("nothing to compact: no events table yet")
        return 0
    tasks = report.plan.tasks
    print(f"{len(tasks)} merge tasks in {len(report.plan.buckets)} buckets; "
          f"{len(report.plan.untouched)} files stay as they are")
    if tasks:
        rows = [[f"{t.bucket[0]}/{t.bucket[1]}", t.kind, len(t.inputs), t.rows, t.outputs, f"L{t.output_level}",
                 t.reason] for t in tasks[:_SHOWN]]
        print(format_table(["bucket", "kind", "files", "rows", "outputs", "level", "why"], rows))
        if len(tasks) > _SHOWN:
            print(f"... and {len(tasks) - _SHOWN} more")
    else:
        print(f"nothing to compact: {report.plan.skipped}")
    if not args.apply:
        if tasks:
            print("plan only: pass --apply to run it")
        return 0
    for r in report.rounds:
        if r.version is not None:
            print(f"round: {len(r.tasks)} buckets, {r.files_removed} files -> {r.files_added} ({r.rows:,} rows), "
                  f"version {r.version}")
    for r in report.rounds:
        if r.gave_up and not r.failed:  # failed buckets are listed below, one line each
            what = "locked" if r.locked else f"gave up after {r.attempts} attempts"
            for tenant, hour in sorted(t.bucket for t in r.tasks):
                print(f"{what}: bucket {tenant!r}/{hour} is left as it is: {r.reason}", file=sys.stderr)
    for (tenant, hour), why in report.failed:
        print(f"failed: bucket {tenant!r}/{hour} is left as it is: {why}", file=sys.stderr)
    return 1 if report.gave_up else 0


def cmd_query(args: argparse.Namespace) -> int:
    """Read one tenant's events in [--start, --end) matching --where/--null, and print the pruning report."""
    from lakeshard.lake import naming_damaged_files, open_store
    from lakeshard.query import read_events
    from lakeshard.runtime import get_spark

    cfg = config_from_args(args)
    spark = get_spark(cfg)
    predicates: dict[str, list[str | None]] = {}
    for column, value in args.where or []:
        predicates.setdefault(column, []).append(value)
    for column in args.null or []:
        predicates.setdefault(column, []).append(None)
    store, uri = open_store(spark, cfg), cfg.table_uri(EVENTS)
    # Spark meets a missing file while planning the read, an unreadable one while counting.
    with naming_damaged_files(uri, [f for f in store.files(uri) if f.partition_values.get("tenant_id") == args.tenant]):
        df, report = read_events(spark, store, uri, tenant=args.tenant, start=args.start, end=args.end,
                                 predicates=predicates)
        print(report.render())
        print(f"{df.count():,} matching events")
        if args.show:
            df.select("ts", "service", "status", "env", "event_id").orderBy("ts").show(args.show, truncate=False)
    return 0


def add_commands(
    subparsers: Any,
    common: Callable[[argparse.ArgumentParser, bool], None],
    *,
    run_flow: Callable[[LakeshardConfig, str, Mapping[str, Any]], Any],
) -> None:
    """Add ``compact`` and ``query`` to the top-level parser's ``subparsers``.

    Args:
        subparsers: what ``ArgumentParser.add_subparsers()`` returned.
        common: adds ``--lakehouse`` (and ``--landing`` when its second argument is true) to a parser.
        run_flow: runs a pipeline flow and returns its outcome (:func:`lakeshard.pipelines.commands.run_flow`);
            ``compact --apply`` runs ``compact`` through it.
    """
    p = subparsers.add_parser("compact", help="merge small files per (tenant, hour) bucket (plan; --apply)",
                              description=cmd_compact.__doc__)
    common(p, False)
    p.add_argument("--apply", action="store_true", help="run the merges (each round one atomic swap)")
    p.add_argument("--bucket", type=bucket, action="append", metavar="TENANT/HOUR",
                   help="only this bucket (repeatable), e.g. acme/2026-01-01T10")
    p.add_argument("--include-open", action="store_true",
                   help="also merge the newest files of buckets still receiving data")
    p.add_argument("--min-files", type=count(2), default=None, help="files a size tier needs before it merges")
    p.add_argument("--target-rows", type=count(1), default=None, help="rows per output file")
    p.set_defaults(func=cmd_compact, run_flow=run_flow)

    p = subparsers.add_parser("query", help="read a tenant's events with file pruning and report it",
                              description=cmd_query.__doc__)
    common(p, False)
    p.add_argument("--tenant", required=True, help="the tenant")
    p.add_argument("--start", type=iso_timestamp, required=True, help="inclusive start (ISO)")
    p.add_argument("--end", type=iso_timestamp, required=True, help="exclusive end (ISO)")
    p.add_argument("--where", type=_predicate, action="append", metavar="COLUMN=VALUE",
                   help="equality; repeat a column for IN, e.g. --where service=auth --where service=web")
    p.add_argument("--null", action="append", metavar="COLUMN", help="also match rows where COLUMN is null")
    p.add_argument("--show", type=count(0), default=0, help="print this many matching events")
    p.set_defaults(func=cmd_query)
