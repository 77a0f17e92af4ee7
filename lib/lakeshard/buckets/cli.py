"""``lakeshard buckets status|close|closed``: the completionist from the command line.

* ``status`` — every open bucket and why it is still open (nothing is committed);
* ``close``  — one completionist pass: close what is complete, after its integrity check;
* ``closed --since TIME`` — the buckets closed since then: the complete hours downstream jobs may read.

The top-level parser wires them in with :func:`add_commands`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from lakeshard.cli_args import config_from_args, iso_timestamp

__all__ = ["add_commands", "cmd_buckets"]

_SHOWN = 50  # rows printed before "... and N more"


def _minutes(text: str) -> timedelta:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative number of minutes, found {text!r}")
    return timedelta(minutes=value)


def _shown(rows: list[list[object]]) -> tuple[list[list[object]], str]:
    more = f"... and {len(rows) - _SHOWN} more" if len(rows) > _SHOWN else ""
    return rows[:_SHOWN], more


def cmd_buckets(args: argparse.Namespace) -> int:
    """Show why buckets are open (status), close the complete ones (close), or list closed ones (closed)."""
    from lakeshard.buckets.completionist import Completionist
    from lakeshard.lake import open_store
    from lakeshard.report import format_table
    from lakeshard.runtime import get_spark

    cfg = config_from_args(args)
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
    report = c.run(apply=args.action == "close")
    closed_now = {(s.tenant_id, s.hour) for s in report.closed}
    rows, more = _shown([[d.tenant_id, d.hour, "closed" if (d.tenant_id, d.hour) in closed_now else "open", d.reason]
                         for d in report.decisions])
    print(format_table(["tenant", "hour", "state", "why"], rows) if rows else "no open buckets")
    if more:
        print(more)
    for check in report.failed_checks:
        print(f"integrity check failed for {check.tenant_id}/{check.hour}: {check.problem}")
    if args.action == "close":
        print(f"closed {len(report.closed)} buckets" + (f" (buckets version {report.committed_version})"
                                                        if report.committed_version is not None else ""))
    return 1 if report.failed_checks else 0


def add_commands(subparsers: Any, common: Callable[[argparse.ArgumentParser, bool], None]) -> None:
    """Add ``buckets status|close|closed`` to the top-level parser's ``subparsers``.

    Args:
        subparsers: what ``ArgumentParser.add_subparsers()`` returned.
        common: adds ``--lakehouse`` (and ``--landing`` when its second argument is true) to a parser.
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
        q.set_defaults(func=cmd_buckets)
