"""The ``lakeshard`` command line: ``doctor``, ``generate``, ``route``, ``ingest``, ``fsck``, ``demo``, ``autoshard``,
``balance``, ``exclude``, ``register-tables``, ``pipeline run|events|graph``, ``bundle-plan``.

Every command takes ``--lakehouse PATH`` (default ``./lakehouse`` or ``$LAKESHARD_LAKEHOUSE``) and,
where it reads input, ``--landing PATH`` (default ``./landing`` or ``$LAKESHARD_LANDING``).
Errors lakeshard expects (bad input, missing Java, a conflicting commit) print one clear line and exit 2;
anything else prints one line naming the file its traceback was saved to and exits 1 (``LAKESHARD_DEBUG=1``
prints the traceback instead).
"""

from __future__ import annotations

import argparse
import atexit
import os
import platform
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from lakeshard.app.cli_args import LakeshardParser, config_from_args, count, number
from lakeshard.app.failures import plain_message, storage_failure
from lakeshard.config import LakeshardConfig, load_config
from lakeshard.errors import LakeshardError
from lakeshard.process import prepare_process_memory
from lakeshard.runtime import connect_server_gone, on_databricks_cluster

if TYPE_CHECKING:
    from lakeshard.pipelines import RuleCount
    from lakeshard.routing import Intake

__all__ = ["main"]


# The extra that installs each module a command may import beyond the base dependencies (pyproject.toml).
_EXTRA_OF_MODULE = {
    "tqdm": "app", "matplotlib": "app", "yaml": "app",
    "pyspark": "local", "py4j": "local", "delta": "local", "grpc": "local", "google": "local",
    "zstandard": "local",
}
_EXTRA_HINTS = {
    "app": "progress bars and the demo's figures",
    "local": "local Spark and Delta's engine; with databricks-connect, a Python 3.12 environment with the "
             "'databricks' extra instead",
}


def _missing_extra(exc: ModuleNotFoundError) -> str | None:
    """Return the one-line message naming the extra that installs the module ``exc`` misses, or None when no
    extra of lakeshard's installs it."""
    module = (exc.name or "").split(".")[0]
    extra = _EXTRA_OF_MODULE.get(module)
    if extra is None:
        return None
    return (f"{module} is not installed: this command needs lakeshard's '{extra}' extra ({_EXTRA_HINTS[extra]}): "
            f"pip install 'lakeshard[{extra}]'")


def _require_app_extra() -> None:
    """Import the app extra's modules now, so a command that needs them stops before its work, not in the middle."""
    from lakeshard.app.plots import require_matplotlib

    require_matplotlib()
    import tqdm  # noqa: F401


def _version(dist: str) -> str:
    import importlib.metadata  # here: it scans sys.path, and only doctor asks

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def cmd_doctor(args: argparse.Namespace) -> int:
    """Say which mode lakeshard runs in; check Java (locally), Spark start, the adapter, a Delta round trip."""
    from lakeshard.runtime import RuntimeKind, databricks_connect_scope, describe_mode, detect_runtime, find_java

    cfg = config_from_args(args)
    rows: list[tuple[str, str]] = [("python", platform.python_version())]
    for dist in ("lakeshard", "pyspark", "delta-spark", "deltalake", "pyarrow", "pandas", "mmh3", "databricks-connect"):
        rows.append((dist, _version(dist)))
    kind = detect_runtime(cfg)
    rows.append(("mode", describe_mode(cfg)))
    ok = True
    if kind is RuntimeKind.DATABRICKS_CONNECT:
        scope = databricks_connect_scope()
        rows += scope
        ok = not any(answer.startswith("PROBLEM") for _, answer in scope)
    # Only a local session (classic, or the local Spark Connect server) needs a local JVM.
    if kind is RuntimeKind.LOCAL or (kind is RuntimeKind.SPARK_CONNECT and cfg.spark.remote.startswith("local")):
        try:
            java, major = find_java()
            rows.append(("java", f"{major} ({java})"))
        except LakeshardError as exc:
            rows.append(("java", f"PROBLEM: {exc}"))
            ok = False
    # With databricks-connect the session is still tried, so a missing package shows beside a wrong Python.
    if ok or kind is RuntimeKind.DATABRICKS_CONNECT:
        ok = _doctor_session(cfg, kind, rows) and ok
    rows.append(("lakehouse", cfg.lakehouse))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key.ljust(width)}  {value}")
    print("all good" if ok else "problems found (see above)")
    return 0 if ok else 1


def _doctor_session(cfg: LakeshardConfig, kind: Any, rows: list[tuple[str, str]]) -> bool:
    """Start the session, name the adapter and prove a Delta round trip; append what was found to ``rows``."""
    from lakeshard.lake import adapter_choice, open_store
    from lakeshard.runtime import RuntimeKind, get_spark, runtime_name

    start = time.perf_counter()
    try:
        spark = get_spark(cfg)
    except LakeshardError as exc:
        rows.append(("spark", f"PROBLEM: {exc}"))
        return False
    where = {RuntimeKind.LOCAL: cfg.spark.master, RuntimeKind.SPARK_CONNECT: cfg.spark.remote}.get(kind, kind.value)
    rows.append(("spark", f"{spark.version} started in {time.perf_counter() - start:.1f}s ({where})"))
    rows.append(("runtime", runtime_name(spark)))
    rows.append(("environment", _environment_verdict(spark)))
    try:
        choice = adapter_choice(spark, cfg)
    except LakeshardError as exc:
        rows.append(("adapter", f"PROBLEM: {exc}"))
        return False
    rows.append(("adapter", f"{choice.name} - {choice.reason}"))
    if choice.name == "native":
        from lakeshard.lake import NATIVE_UNVERIFIED, native_commit_path

        rows.append(("native adapter", NATIVE_UNVERIFIED))
        path = native_commit_path(spark)
        rows.append(("commit path", f"{path.name} - {path.reason}"))
    if kind is RuntimeKind.DATABRICKS_CONNECT:
        # The embedded adapter commits from this process, which cannot see files the remote cluster writes;
        # the native adapter needs a py4j session, i.e. code running on the cluster (docs/databricks.md).
        rows.append(("delta round trip", "skipped: databricks-connect commits from this laptop need direct access "
                                         "to the lakehouse storage; on the cluster the native adapter commits"))
        return True
    with tempfile.TemporaryDirectory(prefix="lakeshard-doctor-") as tmp:
        store = open_store(spark, cfg)
        uri = f"{tmp}/roundtrip"
        store.create(uri, spark.range(1).schema)
        store.append(uri, spark.range(5))
        n = store.read(uri).count()
        engine = _delta_engine(spark, uri) if choice.name == "native" else "delta-rs (deltalake) commits"
    rows.append(("delta round trip", "ok" if n == 5 else f"PROBLEM: wrote 5 rows, read {n}"))
    rows.append(("delta engine", f"{engine}, {runtime_name(spark)} session"))
    return n == 5


def _environment_verdict(spark: Any) -> str:
    """Return the Spark client and server versions and whether the matrix tests this environment."""
    import pyarrow
    import pyspark

    from lakeshard.runtime import tested_environment

    verdict = tested_environment(python=platform.python_version(), client_spark=pyspark.__version__,
                                 server_spark=spark.version, pyarrow=pyarrow.__version__)
    return f"Spark client {pyspark.__version__}, server {spark.version}, pyarrow {pyarrow.__version__}: " \
           f"{verdict.describe()}"


def _delta_engine(spark: Any, uri: str) -> str:
    """Return the engine that made the table's latest commit as Delta records it (``engineInfo``, e.g.
    ``Apache-Spark/4.2.0 Delta-Lake/4.4.0``), read with ``DESCRIBE HISTORY`` (classic and Spark Connect)."""
    try:
        row = spark.sql(f"DESCRIBE HISTORY delta.`{uri}` LIMIT 1").select("engineInfo").first()
    except Exception as exc:
        return f"unknown (DESCRIBE HISTORY failed: {str(exc).splitlines()[0][:120]})"
    return str(row[0]) if row is not None and row[0] else "unknown (no engineInfo in the commit)"


def cmd_route(args: argparse.Namespace) -> int:
    """Run the pipeline's route flow: route new landing files (validate, quarantine bad records, place and shard
    events, commit exactly once into routed), with the flow's expectations and the pipeline event log.

    A batch a stopped ``lakeshard ingest`` planned for the in-memory hand-off is finished first, as the flow
    finishes it: writers of every shard commit it to events through the ingest flow's expectations.
    """
    from lakeshard.pipelines import FlowResult, run_flows

    cfg = config_from_args(args)
    # Spark starts only when the flow needs it: a batch too big for the driver (routing.arrow_max_bytes), or rows
    # its expectations check with Spark.
    report = run_flows(cfg, ["route"], {"route": {"batch_files": args.batch_files}}, lazy=True)
    route = report.flow("route")
    routed = route.result or FlowResult()
    details = routed.details
    if not details.get("batches"):
        print(f"nothing new to route in {cfg.landing}")
    else:
        batches = int(details["batches"])
        notes = f"{batches} {'batch' if batches == 1 else 'batches'} of {details.get('files', 0)} files"
        if replayed := details.get("replayed"):
            notes += f"; finished {replayed} an earlier run had planned"
        if already := details.get("already_committed"):
            notes += f"; {already:,} records another run had already committed"
        print(f"routed {routed.rows_out:,} events, quarantined {routed.quarantined:,} records, into {cfg.lakehouse} "
              f"({notes})", flush=True)
        if route.expectations:
            print(f"expectations: {_rule_counts(route.expectations)}")
    print(f"event log: lakeshard pipeline events --run {report.run_id}", flush=True)
    _show_left(routed.outcome, cfg)
    return 0


def _rule_counts(counts: Sequence[RuleCount]) -> str:
    """Return how many rows passed each expectation, as a command prints it."""
    return ", ".join(f"{c.rule.name} {c.passed}/{c.passed + c.failed} passed" for c in counts)


def _show_left(left: Intake | None, cfg: LakeshardConfig) -> None:
    """Print what the router's last look at the landing zone left for later: held-back tails, dangling links."""
    if left is not None and left.held_back:
        print(f"held back {len(left.held_back)} files ({left.held_back_bytes:,} bytes) still being written: routed "
              f"once their last record is complete or the file is quiet for {cfg.landing_format.settle_seconds} s")
    for link in left.dangling if left is not None else []:
        print(f"warning: {link} is a symbolic link to a file that does not exist; it is routed once it does",
              file=sys.stderr)


def cmd_ingest(args: argparse.Namespace) -> int:
    """Run the pipeline's route and ingest flows: route new landing files, then write every shard's new routed
    events to ``events`` exactly once, with the flows' expectations and the pipeline event log.

    Without --follow it runs once; with --follow it runs again every --poll-seconds until interrupted (Ctrl-C
    ends it after the current run, exit 0). A shard whose routed or event_ids file is damaged stops (named on
    stderr) while the other shards are written; exit 1 then.
    """
    from lakeshard.lake import open_lazy_store
    from lakeshard.pipelines import FlowResult, ingest_shards, run_flows
    from lakeshard.routing import RoutingTables

    cfg = config_from_args(args)
    params = {"ingest": {"shards": ",".join(map(str, args.shards or []))}}
    if args.shards:  # refused before anything is routed that this writer would never write
        ingest_shards(RoutingTables(open_lazy_store(cfg), cfg), params["ingest"]["shards"])
    totals = {"runs": 0, "routed": 0, "written": 0, "stopped": 0}

    def once() -> None:
        # Spark starts only when a flow needs it: a big route batch or writer step, or rows to check.
        # One process routes and writes: batches the driver takes go to the writers in memory, not through routed.
        report = run_flows(cfg, ["route", "ingest"], params, lazy=True, handoff="" if args.shards else "fused")
        route, ingest = report.flow("route"), report.flow("ingest")
        routed, written = route.result or FlowResult(), ingest.result or FlowResult()
        totals["runs"] += 1
        totals["routed"] += routed.rows_out
        totals["written"] += written.rows_out
        if routed.rows_in or written.rows_in or not args.follow:
            print(f"routed {routed.rows_out:,} events ({routed.quarantined:,} quarantined); wrote "
                  f"{written.rows_out:,} events, dropped {written.duplicates_dropped:,} duplicates, "
                  f"{written.details.get('conflicts', 0)} commit conflicts"
                  + (" (nothing new routed since the last ingest)" if ingest.status == "up_to_date" else ""),
                  flush=True)
            rules = [c for f in (route, ingest) for c in f.expectations]
            if rules:
                print("expectations: " + _rule_counts(rules)
                      + (f", {written.dropped:,} rows dropped" if written.dropped else ""))
            print(f"event log: lakeshard pipeline events --run {report.run_id}", flush=True)
            _show_left(routed.outcome, cfg)
        if stopped := written.details.get("stopped_shards"):
            totals["stopped"] += 1
            for damage in str(written.details.get("damage", "")).splitlines():
                print(f"error: {damage}", file=sys.stderr)
            print(f"shards {stopped} stopped on a damaged file and were not written; the other shards were. "
                  "lakeshard fsck names every damaged file, --repair removes it from its table's log",
                  file=sys.stderr, flush=True)

    if not args.follow:
        once()
        return 1 if totals["stopped"] else 0
    with _stop_on_interrupt() as stop:
        while not stop.is_set():
            once()
            stop.wait(args.poll_seconds)
    print(f"stopped after {totals['runs']} runs: routed {totals['routed']:,} events, wrote {totals['written']:,}")
    return 1 if totals["stopped"] else 0


@contextmanager
def _stop_on_interrupt() -> Iterator[threading.Event]:
    """Yield an event Ctrl-C sets instead of interrupting, so a run in progress finishes before the loop ends."""
    stop = threading.Event()

    def interrupted(signum: int, frame: object) -> None:
        print("interrupted: stopping after the current run", file=sys.stderr, flush=True)
        stop.set()

    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def _spec(args: argparse.Namespace) -> Any:
    from lakeshard.synth import SynthSpec

    # Fewer tenants than the default bursting ones: every tenant may burst.
    return SynthSpec(events=args.events, tenants=args.tenants, seed=args.seed, hours=args.hours,
                     burst_tenants=min(SynthSpec.burst_tenants, args.tenants))


def cmd_generate(args: argparse.Namespace) -> int:
    """Write a synthetic landing zone with its ground truth."""
    from lakeshard.app.progress import landing_bar
    from lakeshard.synth import generate_landing, new_run_folder

    cfg = config_from_args(args)
    target = str(new_run_folder(cfg.landing)) if args.new_folder else cfg.landing
    manifest = generate_landing(target, _spec(args), progress=landing_bar(not args.quiet), overwrite=args.overwrite)
    print(f"wrote {manifest.records:,} records in {manifest.files} files to {target}: "
          f"{manifest.unique_events:,} unique events, {manifest.duplicate_records:,} duplicates, "
          f"{manifest.bad_records:,} bad records; ground truth in {target}/_truth/")
    return 0


def cmd_register_tables(args: argparse.Namespace) -> int:
    """Register the user-facing tables (events, quarantine, buckets, pipeline_events) in a catalog by location."""
    from lakeshard.catalog import register_tables
    from lakeshard.lake import open_store
    from lakeshard.runtime import RuntimeKind, delta_jars, detect_runtime, get_spark

    cfg = config_from_args(args)
    if not cfg.spark.jars and detect_runtime(cfg) is RuntimeKind.LOCAL and (jars := delta_jars()):
        # A local session defines Delta tables only with Delta's catalog: start it with the installed jars.
        cfg = config_from_args(args, spark={"jars": jars})
    spark = get_spark(cfg)
    done = register_tables(spark, args.catalog, args.schema, cfg.lakehouse, store=open_store(spark, cfg),
                           create_schema=args.create_schema, create_missing=args.create_missing)
    for table in done:
        print(f"{table.status:<8} {table.name} <- {table.location}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the longest end-to-end path on a fresh (or given) lakehouse and print the report."""
    _require_app_extra()
    from lakeshard.app.demo import run_demo
    from lakeshard.lake import open_store
    from lakeshard.runtime import get_spark

    base = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="lakeshard-demo-"))
    base.mkdir(parents=True, exist_ok=True)
    lakehouse = args.lakehouse or str(base / "lakehouse")
    landing = args.landing or str(base / "landing")
    cfg = load_config(args.config, overrides={"lakehouse": os.path.abspath(lakehouse),
                                              "landing": os.path.abspath(landing)})
    print(f"lakeshard demo: {args.events:,} events from {args.tenants} tenants into {cfg.lakehouse}")
    print("[0/5] starting Spark ...")
    spark = get_spark(cfg)
    report = run_demo(spark, open_store(spark, cfg), cfg, _spec(args), out=base / "report", progress=not args.quiet)
    print()
    print(report.render())
    return 0 if report.ok else 1


def _parser() -> argparse.ArgumentParser:
    parser = LakeshardParser(
        prog="lakeshard", description="Exactly-once multi-tenant event ingestion into a Delta lakehouse.")
    parser.add_argument("--config", help="TOML configuration file (default $LAKESHARD_CONFIG or ./lakeshard.toml)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(p: argparse.ArgumentParser, landing: bool) -> None:
        p.add_argument("--lakehouse", help="lakehouse directory or URI (default ./lakehouse or $LAKESHARD_LAKEHOUSE)")
        if landing:
            p.add_argument("--landing", help="landing zone directory (default ./landing or $LAKESHARD_LANDING)")

    def traffic(p: argparse.ArgumentParser, events: int) -> None:
        p.add_argument("--events", type=count(1), default=events,
                       help=f"unique events to generate (default {events:,})")
        p.add_argument("--tenants", type=count(1), default=200, help="tenants (default 200)")
        p.add_argument("--hours", type=number(0, low_open=True), default=2.0, help="hours of arrival time (default 2)")
        p.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
        p.add_argument("--quiet", action="store_true", help="no progress bars")

    p = sub.add_parser("doctor", help="check Java, Spark, the Delta adapter and versions",
                       description=cmd_doctor.__doc__)
    common(p, landing=False)
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("generate", help="write a synthetic landing zone with ground truth",
                       description=cmd_generate.__doc__)
    common(p, landing=True)
    traffic(p, 100_000)
    p.add_argument("--overwrite", action="store_true",
                   help="replace a landing zone this command wrote before (never one it did not write)")
    p.add_argument("--new-folder", action="store_true",
                   help="write into a new sub-folder synthetic/<UTC time> of --landing, leaving the rest untouched")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("register-tables", help="register events, quarantine, buckets, pipeline_events in a catalog",
                       description=cmd_register_tables.__doc__)
    common(p, landing=False)
    p.add_argument("--catalog", default="spark_catalog",
                   help="catalog (default spark_catalog, the local session's; on Databricks a Unity Catalog catalog)")
    p.add_argument("--schema", required=True, help="schema the tables are registered in")
    p.add_argument("--create-schema", action="store_true", help="create the schema first if it is missing")
    p.add_argument("--create-missing", action="store_true",
                   help="create a table the pipeline has not written yet empty at its location, then register it "
                        "(so a reader by name finds it before the first ingest)")
    p.set_defaults(func=cmd_register_tables)

    p = sub.add_parser("route", help="route new landing files into the lakehouse (exactly once)",
                       description=cmd_route.__doc__)
    common(p, landing=True)
    p.add_argument("--batch-files", type=count(1), default=200, help="landing files per batch (default 200)")
    p.set_defaults(func=cmd_route)

    p = sub.add_parser("ingest", help="route and write new landing data exactly once (batch or --follow)",
                       description=cmd_ingest.__doc__)
    common(p, landing=True)
    p.add_argument("--shards", type=count(0), nargs="*", help="shards this writer owns (default: all)")
    p.add_argument("--follow", action="store_true", help="keep polling for new landing files")
    p.add_argument("--poll-seconds", type=number(0), default=10.0, help="pause between polls with --follow")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("demo", help="run the pipeline end to end on a fresh lakehouse and report",
                       description=cmd_demo.__doc__)
    common(p, landing=True)
    traffic(p, 100_000)
    p.add_argument("--out", help="directory for landing, lakehouse and report (default: a new temporary one)")
    p.set_defaults(func=cmd_demo)

    from lakeshard.app.commands.balancing import add_commands as add_balancing_commands
    from lakeshard.app.commands.buckets import add_commands as add_buckets_commands
    from lakeshard.app.commands.bundle import add_commands as add_bundle_commands
    from lakeshard.app.commands.compaction import add_commands as add_compaction_commands
    from lakeshard.app.commands.pipelines import add_commands as add_pipeline_commands
    from lakeshard.app.commands.repair import add_commands as add_repair_commands
    from lakeshard.app.commands.versions import add_commands as add_versions_commands
    from lakeshard.pipelines import run_flow

    add_balancing_commands(sub, common, run_flow=run_flow)
    add_compaction_commands(sub, common, run_flow=run_flow)
    add_versions_commands(sub, common)
    add_buckets_commands(sub, common, run_flow=run_flow)
    add_pipeline_commands(sub, common)
    add_repair_commands(sub, common)
    add_bundle_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``lakeshard`` command line and return its exit code."""
    if not on_databricks_cluster():  # a Databricks driver's process is not the command's to tune
        prepare_process_memory()  # before pyarrow loads: Arrow's allocator reads its options then
    try:
        args = _parser().parse_args(argv)  # the commands' modules import Spark: a missing extra shows here
        return int(args.func(args))
    except LakeshardError as exc:
        print(f"error: {plain_message(str(exc))}{_retry_hint(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug or an unforeseen fault: one line for the user, the traceback in a file
        if isinstance(exc, BrokenPipeError) and _stdout_gone():
            # The output's reader went away (``lakeshard ingest | head -1``): stop quietly, as Unix tools do. What
            # ran is committed or not, never half: every flow is exactly once across a stop at any point.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the interpreter's last flush passes
            return 141  # 128 + SIGPIPE: what a shell reports for a command its pipe stopped
        if os.environ.get("LAKESHARD_DEBUG"):
            raise
        if isinstance(exc, ModuleNotFoundError) and (message := _missing_extra(exc)):
            print(f"error: {message}", file=sys.stderr)
            return 2
        if message := connect_server_gone(exc):
            print(f"error: {message}", file=sys.stderr)
            return 2
        if storage_failure(exc):  # the machine's fault, not lakeshard's: no traceback to send anyone
            print(f"error: the lakehouse's storage failed: {plain_message(str(exc))}{_retry_hint(exc)}",
                  file=sys.stderr)
            return 1
        trace = _save_traceback(exc)
        print(f"error: unexpected {type(exc).__name__}: {plain_message(str(exc))}\n(the full traceback is in {trace}; "
              "set LAKESHARD_DEBUG=1 to print it)", file=sys.stderr)
        return 1


def _retry_hint(exc: BaseException) -> str:
    """Return the line that follows an error caused by the storage failing a write (nothing otherwise)."""
    failed = storage_failure(exc)
    if failed is None:
        return ""
    return (f"\n(the storage failed a write: {failed}. Every commit is whole or absent: run the command again once "
            "the storage works; a file a failed write left is never committed and vacuum removes it)")


def run() -> int:
    """Run the ``lakeshard`` command (its console script and ``python -m lakeshard.app.cli``): :func:`main`, then
    end the process at once. On a Databricks cluster, whose wheel tasks call this entry point inside the driver's
    Python process, that process is not the command's to end: a success returns 0, a failure raises
    :class:`SystemExit` with its code, so that the task fails rather than a returned code going unread."""
    code = main()
    if on_databricks_cluster():
        if code:
            raise SystemExit(code)
        return 0
    _exit_at_once(code)


def _exit_at_once(code: int) -> NoReturn:
    """End the process with ``code`` without the interpreter's teardown, once everything the command owes is done.

    Every commit is made and every file closed before :func:`main` returns; what is left at exit is the
    interpreter freeing each object and module one by one: about 0.2 s after an ingest of 1M events, 2-3 % of
    it (bench/results/ingest-profile.md). The exit handlers (``atexit``) still run and what was printed is flushed.
    A thread other than the worker pool's still running (none after a command) is waited for by a regular exit.
    """
    from lakeshard.process import close_worker_pool

    close_worker_pool()
    main_thread = threading.main_thread()
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not main_thread):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:  # the reader went away after the command: as main says of a pipe gone
            code = code or 141
        except (OSError, ValueError):  # closed, or nowhere left to write: nothing more can reach it
            pass
    os._exit(code)


def _stdout_gone() -> bool:
    """Return whether standard output is a pipe whose reader has closed it (a broken pipe elsewhere, a socket to
    Spark say, is a fault to report)."""
    import select

    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (OSError, ValueError, AttributeError):  # no file descriptor, or no poll on this platform
        return False


def _save_traceback(exc: BaseException) -> str:
    """Return the path of a new file holding ``exc``'s traceback."""
    import traceback

    fd, path = tempfile.mkstemp(prefix="lakeshard-error-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write("".join(traceback.format_exception(exc)))
    return path


if __name__ == "__main__":
    sys.exit(run())
