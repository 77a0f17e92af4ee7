"""``lakeshard versions log|diff|show``: a chunk's history printed the way git prints a file's.

* ``log``  — like ``git log``: newest version first, with its operation, time, metadata and ADD/DROP counts;
* ``diff`` — like ``git diff --stat``: the files that differ between two versions, with rows ``+``/``-``;
* ``show`` — like ``git show --stat``: one version's header and the files it added and dropped.

The top-level parser wires them in with :func:`add_commands`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from lakeshard.app.cli_args import config_from_args, count
from lakeshard.config import LakeshardConfig
from lakeshard.lake import FileInfo
from lakeshard.versions import ChunkVersion, rows_in

__all__ = ["add_commands", "cmd_versions", "format_log", "format_show", "format_stat"]

_BAR = 40  # widest +/- bar of a --stat line


def table_location(cfg: LakeshardConfig, table: str) -> str:
    """Return the URI of ``table``: a lakehouse table name (``events``) or a path / URI as given."""
    return table if ("/" in table or "://" in table) else cfg.table_uri(table)


def _chunk(text: str) -> Any:
    from lakeshard.versions import Chunk, VersionsError

    try:
        return Chunk.parse(text)
    except VersionsError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def format_stat(added: Sequence[FileInfo], dropped: Sequence[FileInfo]) -> list[str]:
    """Return ``git diff --stat`` lines: one per file with its rows as a +/- bar, then a summary line."""
    entries = [(f, "+") for f in added] + [(f, "-") for f in dropped]
    if not entries:
        return [" 0 files changed"]
    width = max(len(f.path) for f, _ in entries)
    most = max((f.num_records or 0) for f, _ in entries) or 1
    lines = []
    for f, sign in sorted(entries, key=lambda e: e[0].path):
        rows = f.num_records or 0
        bar = sign * max(1 if rows else 0, round(_BAR * rows / most))
        lines.append(f" {f.path.ljust(width)} | {rows:>7,} {bar}")
    lines.append(f" {len(entries)} files changed, {len(added)} added ({rows_in(added):,} rows +), "
                 f"{len(dropped)} dropped ({rows_in(dropped):,} rows -)")
    return lines


def _header(v: ChunkVersion) -> list[str]:
    kind = "data change" if v.data_change else "rearrangement (dataChange=false)"
    meta = "  ".join(f"{k}={v.metadata[k]}" for k in sorted(v.metadata)) or "-"
    return [f"version {v.version}", f"Operation: {v.operation or '?'} ({kind})",
            f"Date:      {v.timestamp:%Y-%m-%d %H:%M:%S} UTC", f"Metadata:  {meta}"]


def format_log(versions: Sequence[ChunkVersion]) -> list[str]:
    """Return ``git log`` style lines for chunk versions (newest first, as given)."""
    lines: list[str] = []
    for v in versions:
        lines += _header(v)
        lines += ["", f"    ADD {len(v.added)} files (+{v.rows_added:,} rows)   "
                      f"DROP {len(v.dropped)} files (-{v.rows_dropped:,} rows)", ""]
    return lines


def format_show(version: ChunkVersion) -> list[str]:
    """Return ``git show --stat`` style lines for one chunk version."""
    return [*_header(version), "", *format_stat(version.added, version.dropped)]


def cmd_versions(args: argparse.Namespace) -> int:
    """Print a chunk's history (log), the files between two versions (diff) or one version (show)."""
    from lakeshard.lake import open_store
    from lakeshard.runtime import get_spark
    from lakeshard.versions import ChunkVersions, VersionsError

    cfg = config_from_args(args)
    store = open_store(get_spark(cfg), cfg)
    versions = ChunkVersions(store, table_location(cfg, args.table), args.chunk)
    if args.action == "log":
        history = versions.log(since=args.since)
        lines = format_log(history[: args.limit] if args.limit else history)
        print("\n".join(lines) if lines else f"chunk {args.chunk} has no files in any version")
    elif args.action == "show":
        print("\n".join(format_show(versions.show(args.version))))
    else:
        to = versions.latest() if args.to is None else args.to
        start = args.from_version
        if start is None:
            history = versions.log(until=to)
            if not history:
                raise VersionsError(f"chunk {args.chunk} has no changes up to version {to}")
            start = history[0].version - 1
        d = versions.diff(start, to)
        print(f"chunk {d.chunk}: version {d.from_version}..{d.to_version}")
        print("\n".join(format_stat(d.added, d.dropped)))
    return 0


def add_commands(subparsers: Any, common: Callable[[argparse.ArgumentParser, bool], None]) -> None:
    """Add ``versions log|diff|show`` to the top-level parser's ``subparsers``.

    Args:
        subparsers: what ``ArgumentParser.add_subparsers()`` returned.
        common: adds ``--lakehouse`` (and ``--landing`` when its second argument is true) to a parser.
    """
    p = subparsers.add_parser("versions", help="a chunk's version history: log, diff, show (like git)",
                              description=cmd_versions.__doc__)
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    def chunk_args(q: argparse.ArgumentParser) -> None:
        common(q, False)
        q.add_argument("--table", default="events", help="lakehouse table name or path/URI (default events)")
        q.add_argument("--chunk", type=_chunk, required=True, metavar="TENANT/HOUR",
                       help="the chunk, e.g. acme/2026-01-01T10")
        q.set_defaults(func=cmd_versions)

    q = actions.add_parser("log", help="versions that added or dropped the chunk's files, newest first")
    chunk_args(q)
    q.add_argument("--since", type=count(0), help="oldest version to show")
    q.add_argument("--limit", type=count(1), help="show at most this many versions")
    q = actions.add_parser("diff", help="files added and dropped between two versions (--stat)")
    chunk_args(q)
    q.add_argument("--from", dest="from_version", type=count(0),
                   help="base version (default: just before the chunk's newest change)")
    q.add_argument("--to", type=count(0), help="target version (default latest)")
    q = actions.add_parser("show", help="one version's header and the files it added and dropped")
    chunk_args(q)
    q.add_argument("--version", type=count(0), help="table version (default: the chunk's newest change)")
