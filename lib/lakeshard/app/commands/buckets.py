"""``lakeshard buckets status|close|closed``: the completionist from the command line.

* ``status`` — every open bucket and why it is still open (nothing is committed);
* ``close``  — the pipeline's ``close_buckets`` flow: close what is complete, after its integrity check, and
  say why the rest is still open;
* ``closed --since TIME`` — the buckets closed since then: the complete hours downstream jobs may read.

The top-level parser wires them in with :func:`add_commands`.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from lakeshard.app.cli_args import config_from_args, iso_timestamp
from lakeshard.config import MAX_SECONDS, LakeshardConfig

if TYPE_CHECKING:
    from lakeshard.buckets import CompletionReport

__all__ = ["add_commands", "cmd_buckets"]

_SHOWN = 50  # rows printed before "... and N more"
_WHY = 3  # open buckets whose reason the summary line names


def _minutes(text: str) -> timedelta:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= MAX_SECONDS // 60:  # NaN and inf too: a timedelta cannot hold them
        raise argparse.ArgumentTypeError(f"expected a number of minutes in [0, {MAX_SECONDS // 60}], found {text!r}")
    return timedelta(minutes=value)


def _shown(rows: list[list[object]]) -> tuple[list[list[object]], str]:
    more = f"... and {len(rows) - _SHOWN} more" if len(rows) > _SHOWN else ""
    return rows[:_SHOWN], more


def cmd_buckets(args: argparse.Namespace) -> int:
    """Show why buckets are open (status), close the complete ones (close), or list closed ones (closed)."""
    from lakeshard.buckets import Completionist
    from lakeshard.lake import open_store
    from lakeshard.report import format_table
    from lakeshard.runtime import get_spark

    cfg = config_from_args(args)
    if args.action == "close":
        return _close(args, cfg)
    spark = get_spark(cfg)
    c = Completionist(spark, open_store(spark, cfg), cfg, quiet=args.quiet_minutes, grace=args.grace_minutes)
    if args.action == "closed":
        states = c.closed_buckets(args.since)
        rows, more = _shown([[s.tenant_id, s.hour, f"{s.decided_at:%Y-%m-%dT%H:%M:%SZ}", s.rows or 0, s.checksum or ""]
                             for s in states])
        print(format_table(["tenant", "hour", "closed at", "rows", "checksum"], rows) if rows
              else "no bucket closed" + (f" since {args.since:%Y-%m-%dT%H:%M:%SZ}" if args.since else ""))
        if more:
            print(more)
        return 0
    return _show(c.run(apply=False))


def _close(args: argparse.Namespace, cfg: LakeshardConfig) -> int:
    """Run the pipeline's close_buckets flow with the command's quiet and grace periods; print what it did."""
    params = {"quiet_minutes": args.quiet_minutes.total_seconds() / 60,
              "grace_minutes": args.grace_minutes.total_seconds() / 60}
    report: CompletionReport = args.run_flow(cfg, "close_buckets", params)
    code = _show(report)
    closed = {(s.tenant_id, s.hour) for s in report.closed}
    failed = {(c.tenant_id, c.hour): "integrity check failed" for c in report.failed_checks}  # the file: stderr
    still_open = [d for d in report.decisions if (d.tenant_id, d.hour) not in closed]
    why = "; ".join(f"{d.tenant_id}/{d.hour}: {failed.get((d.tenant_id, d.hour), d.reason)}" for d in still_open[:_WHY])
    more = f"; ... and {len(still_open) - _WHY} more" if len(still_open) > _WHY else ""
    print(f"closed {len(report.closed)} buckets" + (f" (buckets version {report.committed_version})"
                                                    if report.committed_version is not None else "")
          + (f"; still open: {len(still_open)} ({why}{more})" if still_open else "; none still open"))
    return code


def _show(report: CompletionReport) -> int:
    """Print every open bucket's decision, and each failed integrity check as an error line on stderr; return 1
    when a check failed."""
    from lakeshard.report import format_table

    closed_now = {(s.tenant_id, s.hour) for s in report.closed}
    rows, more = _shown([[d.tenant_id, d.hour, "closed" if (d.tenant_id, d.hour) in closed_now else "open", d.reason]
                         for d in report.decisions])
    print(format_table(["tenant", "hour", "state", "why"], rows) if rows else "no open buckets")
    if more:
        print(more)
    for check in report.failed_checks:
        print(f"integrity check failed for {check.tenant_id}/{check.hour}: {check.problem}", file=sys.stderr)
    return 1 if report.failed_checks else 0


def add_commands(subparsers: Any, common: Callable[[argparse.ArgumentParser, bool], None], *,
                 run_flow: Callable[[LakeshardConfig, str, Mapping[str, Any]], Any]) -> None:
    """Add ``buckets status|close|closed`` to the top-level parser's ``subparsers``.

    Args:
        subparsers: what ``ArgumentParser.add_subparsers()`` returned.
        common: adds ``--lakehouse`` (and ``--landing`` when its second argument is true) to a parser.
        run_flow: runs a pipeline flow and returns its outcome (:func:`lakeshard.pipelines.commands.run_flow`);
            ``close`` runs ``close_buckets`` through it.
    """
    p = subparsers.add_parser("buckets", help="hourly bucket completeness: status, close, closed --since",
                              description=cmd_buckets.__doc__)
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, text in (("status", "open buckets and why they are still open (commits nothing)"),
                       ("close", "close every complete bucket (integrity-checked)"),
                       ("closed", "buckets closed since a time: complete hours to read")):
        q = actions.add_parser(name, help=text)
        common(q, True)
        q.add_argument("--quiet-minutes", type=_minutes, default=timedelta(minutes=10),
                       help="minutes without a new file before a bucket may close (default 10)")
        q.add_argument("--grace-minutes", type=_minutes, default=timedelta(minutes=15),
                       help="minutes the backlog watermark must be past the hour's end (default 15)")
        if name == "closed":
            q.add_argument("--since", type=iso_timestamp, help="ISO time, e.g. 2026-01-01T00:00:00Z (default: all)")
        q.set_defaults(func=cmd_buckets, run_flow=run_flow)
