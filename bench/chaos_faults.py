"""The racing processes and the faults of a fault campaign (bench/chaos.py).

A process is a ``lakeshard`` command started in a session of its own, so a SIGKILL of its process group takes its
Spark JVM and Python workers with it. A fault is drawn by seed and applied to one round:

* ``sigkill``: one racing process is SIGKILLed at a random point of its run;
* ``disk_full``: the lakehouse (a small tmpfs) is filled with a ballast file for a while, then the ballast goes;
* ``clock_jump``: the wall clock of one racing process (and of its JVM) steps hours or a day ahead or behind at a
  random point of its run, and back again a few seconds later (``bench/clockshift.c``, preloaded; its monotonic
  clock and timers untouched, as with a real clock step);
* ``write_fail``: from a random point of one racing process's run, for a while (or to its end), every write of it (and
  of its JVM) to a file of the lakehouse fails with EIO, the first one torn: half its bytes reach the file
  (``bench/failwrites.c``, preloaded: a file system failing on command); it counts only where a write was failed;
* ``landing_rewrite`` / ``landing_truncate`` / ``landing_remove``: an ingest is killed right after it planned a
  batch (its ``landing_batches`` commit), then a landing file of the round is rewritten (the same records,
  serialized again), cut at a random byte or removed before the next run replays the plan;
* ``server_kill`` (the ``connect`` engine): the Spark Connect server every process of the round talks to is
  SIGKILLed, JVM and all, at a random point of the round; every client must end on its own (a clear error, no hang)
  and the server is started again, on the same port, before the round settles;
* ``damaged_file``: a live data file of ``events`` (an open bucket), ``routed`` or ``event_ids`` is cut in half after
  the round settled; ``lakeshard fsck`` must name it, ``fsck --repair`` and ``refill`` restore it.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CLOCKSHIFT_SOURCE",
    "FAILWRITES_SOURCE",
    "FAULT_KINDS",
    "KILL_SCALE",
    "PROCESS_KINDS",
    "RUNAWAY",
    "STALL_S",
    "ConnectServer",
    "Engine",
    "GroupProgress",
    "Racer",
    "Zone",
    "build_preload",
    "damage_file",
    "fill_disk",
    "lakeshard",
    "mount_tmpfs",
    "mutate_landing",
    "plan_then_kill",
    "run_racers",
    "unmount",
    "wait_bounded",
]

PROCESS_KINDS = ("ingest", "routed", "close", "compact", "maintenance")
FAULT_KINDS = ("sigkill", "disk_full", "clock_jump", "landing_rewrite", "landing_truncate", "landing_remove",
               "damaged_file", "server_kill", "write_fail")
CLOCKSHIFT_SOURCE = Path(__file__).with_name("clockshift.c")
FAILWRITES_SOURCE = Path(__file__).with_name("failwrites.c")
LIB = Path(__file__).resolve().parents[1] / "lib"
# How long each kind of process runs, relative to a fused ingest: a kill lands anywhere in its run.
# A process past its engine's deadline is a hang once its process group has used no CPU for STALL_S seconds (it
# waits on something that will not come: a dead server, a lock nobody frees), or, however busy, past RUNAWAY times
# the deadline. A loaded machine makes processes slow, not idle: slowness alone is not a hang.
STALL_S = 30.0
# How long a landing file must be unchanged before the router takes its unfinished tail (a cut gzip stream, a last
# line without its newline) as final (``landing_format.settle_seconds``): short, so that the settling run after a
# truncation can wait it out and the checker sees what a later run would deliver.
SETTLE_S = 3
RUNAWAY = 5
KILL_SCALE = {"ingest": 1.0, "routed": 2.0, "close": 4.0, "compact": 4.0, "maintenance": 8.0}
MAINTENANCE_FLOWS = ("close_buckets", "compact", "autoshard", "balance", "compact_books")


@dataclass(frozen=True)
class Engine:
    """One engine the campaign runs on: its environment and how long its processes may take."""

    name: str  # "embedded", "native" (a classic session) or "connect" (Delta's engine under Spark Connect)
    env: dict[str, str]
    deadline: float  # seconds a racing or settling process may run before it counts as a hang
    kill_window: float  # SIGKILLs land uniformly in [0.2, kill_window * KILL_SCALE[kind]] s after a start
    events: int  # unique events the generator adds per round


@dataclass
class Zone:
    """A campaign's lakehouse, landing zone and configuration on one engine."""

    root: Path
    engine: Engine
    lakehouse: Path = field(init=False)
    landing: Path = field(init=False)
    config: Path = field(init=False)
    server: ConnectServer | None = None  # the Connect server of the ``connect`` engine
    clock_lib: Path | None = None  # bench/clockshift.c built (build_preload): what clock jumps preload
    write_lib: Path | None = None  # bench/failwrites.c built: what failing writes preload

    def __post_init__(self) -> None:
        self.lakehouse, self.landing, self.config = (self.root / "lakehouse", self.root / "landing",
                                                     self.root / "lakeshard.toml")
        self.landing.mkdir(parents=True, exist_ok=True)
        self.lakehouse.mkdir(parents=True, exist_ok=True)
        if not self.config.exists():
            self.config.write_text(f"[routing]\ntotal_shards = 4\n\n[landing_format]\nsettle_seconds = {SETTLE_S}\n")

    def wait_settled(self) -> None:
        """Return once every landing file has been unchanged for :data:`SETTLE_S` (a file the round cut short is then
        final to the router, not held back as still being written)."""
        newest = max((p.stat().st_mtime for p in self.landing.rglob("*") if p.is_file()), default=0.0)
        time.sleep(max(0.0, min(newest + SETTLE_S + 0.5 - time.time(), SETTLE_S + 0.5)))

    def env(self, *, classic: bool = False, **extra: str) -> dict[str, str]:
        """Return the environment of a ``lakeshard`` process on this zone (``classic``: a classic session even on the
        ``connect`` engine, for what only a classic session does: ``fsck --repair``)."""
        path = os.pathsep.join([str(LIB), os.environ.get("PYTHONPATH", "")])
        remote = {"LAKESHARD_SPARK_REMOTE": self.server.url} if self.server is not None and not classic else {}
        return {**os.environ, **self.engine.env, **remote, "PYTHONPATH": path, "LAKESHARD_CONFIG": str(self.config),
                **extra}


class ConnectServer:
    """The Spark Connect server (Delta's engine, Spark's default 1 GiB driver heap) of a campaign's ``connect``
    engine, on one port for the whole campaign: ``server_kill`` SIGKILLs its process group mid-round, and
    :meth:`ensure_up` starts it again before the round settles."""

    def __init__(self) -> None:
        from bench.connect import free_port

        self.port = free_port()
        self.proc: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def ensure_up(self) -> bool:
        """Return whether the server had to be started (it was not running); retried while the port is still held
        by the killed one."""
        from bench.connect import start_server

        if self.proc is not None and self.proc.poll() is None:
            return False
        for attempt in range(4):
            try:
                self.proc = start_server(self.port, own_session=True)
                return True
            except RuntimeError:
                if attempt == 3:
                    raise
                time.sleep(5.0)
        return True

    def kill_after(self, seconds: float) -> threading.Thread:
        """Return the started thread that SIGKILLs the server's process group ``seconds`` from now."""
        def run() -> None:
            time.sleep(seconds)
            if self.proc is not None:
                _kill_group(self.proc)
                self.proc.wait()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        """Stop the server (its standard input closed; killed when it does not end within a minute)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            _kill_group(self.proc)
            self.proc.wait()


def lakeshard(zone: Zone, *args: str) -> list[str]:
    """Return the command line of ``lakeshard <args>`` on ``zone`` (lakehouse and, where taken, landing)."""
    return [sys.executable, "-m", "lakeshard.app.cli", *args]


def _commands(zone: Zone, kind: str) -> list[list[str]]:
    """Return the commands one racing process of ``kind`` runs one after the other."""
    lh, land = ["--lakehouse", str(zone.lakehouse)], ["--landing", str(zone.landing)]
    if kind == "ingest":
        return [lakeshard(zone, "ingest", *lh, *land)]
    if kind == "routed":  # the two-job flow: route into routed, then the writers of the shards
        return [lakeshard(zone, "route", *lh, *land), lakeshard(zone, "ingest", *lh, *land, "--shards", "0", "1"),
                lakeshard(zone, "ingest", *lh, *land, "--shards", "2", "3")]
    if kind == "close":
        return [lakeshard(zone, "buckets", "close", *lh, *land, "--quiet-minutes", "0", "--grace-minutes", "0")]
    if kind == "compact":
        return [lakeshard(zone, "compact", *lh, "--apply", "--include-open", "--min-files", "2")]
    if kind == "maintenance":
        return [lakeshard(zone, "pipeline", "run", *lh, *land, "--flows", *MAINTENANCE_FLOWS,
                          "--param", "close_buckets.quiet_minutes=0", "--param", "close_buckets.grace_minutes=0")]
    raise ValueError(f"unknown process kind {kind!r}")


@dataclass
class Racer:
    """One racing process of a round, with the faults aimed at it and how it ended."""

    kind: str
    kill_after: float | None = None  # SIGKILL this many seconds after the start
    clock: str = ""  # how far the wall clock steps, e.g. "+3h", "-45m"
    clock_after: float = 0.0  # seconds into the run the clock steps
    clock_back: float = 0.0  # seconds after that it steps back
    writes_fail_after: float | None = None  # seconds into the run its writes to the lakehouse start failing
    writes_fail_for: float = 0.0  # for how long
    writes_failed: bool = False  # a write of it was failed (not only a window that found it idle or ended)
    returncode: int | None = None
    killed: bool = False  # the SIGKILL landed while the process ran
    hung: bool = False
    seconds: float = 0.0
    stderr_tail: str = ""

    def describe(self) -> str:
        extra = f" kill@{self.kill_after:.1f}s" if self.kill_after is not None else ""
        extra += f" clock{self.clock}@{self.clock_after:.1f}s" if self.clock else ""
        extra += f" writes-fail@{self.writes_fail_after:.1f}s" if self.writes_fail_after is not None else ""
        return f"{self.kind}{extra} ({self.seconds:.1f}s, exit {self.returncode})"


class GroupProgress:
    """The CPU seconds a process group has used, sampled about once a second, and since when they last grew."""

    def __init__(self, pgid: int, stall_s: float = STALL_S, runaway: float = RUNAWAY) -> None:
        self.pgid, self.stall_s, self.runaway = pgid, stall_s, runaway
        self.seen: dict[int, float] = {}  # per process of the group (a finished one keeps its last figure)
        self.grew_at = time.monotonic()
        self._next = 0.0

    def _sample(self) -> float:
        import psutil

        for proc in psutil.process_iter():
            try:
                if os.getpgid(proc.pid) == self.pgid:
                    times = proc.cpu_times()
                    self.seen[proc.pid] = times.user + times.system
            except (ProcessLookupError, psutil.Error):
                continue
        return sum(self.seen.values())

    def overdue(self, started: float, now: float, deadline: float) -> bool:
        """Return whether the group, started at ``started``, is hung at ``now`` (see :data:`STALL_S`)."""
        if now >= self._next:
            self._next = now + 1.0
            before = sum(self.seen.values())
            if self._sample() > before + 0.05:
                self.grew_at = now
        ran = now - started
        return ran > deadline and (now - self.grew_at >= self.stall_s or ran > self.runaway * deadline)


def wait_bounded(proc: subprocess.Popen[bytes], deadline: float, *, stall_s: float = STALL_S,
                 runaway: float = RUNAWAY) -> bool:
    """Wait for ``proc`` (the leader of its own process group); return True when it hung (then its group is
    killed), by the rule of :data:`STALL_S`."""
    started, progress = time.monotonic(), GroupProgress(proc.pid, stall_s, runaway)
    while proc.poll() is None:
        if progress.overdue(started, time.monotonic(), deadline):
            _kill_group(proc)
            proc.wait()
            return True
        time.sleep(0.05)
    return False


def _kill_group(proc: subprocess.Popen[Any]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _chain(zone: Zone, racer: Racer, log: Path) -> list[str]:
    """Return one shell line running the racer's commands in order (the shard writers of ``routed`` at once)."""
    cmds = [" ".join(f"'{a}'" for a in c) for c in _commands(zone, racer.kind)]
    if racer.kind == "routed":
        return ["sh", "-c", f"{cmds[0]}; {cmds[1]} & {cmds[2]} & wait"]
    return ["sh", "-c", cmds[0]]


def run_racers(zone: Zone, racers: Sequence[Racer], logs: Path) -> None:
    """Start the racers at once, SIGKILL each at its time, and wait for all; one that hangs (past the engine's
    deadline and idle, :data:`STALL_S`) is killed and marked."""
    procs: list[tuple[Racer, subprocess.Popen[bytes], float, Path]] = []
    for i, racer in enumerate(racers):
        # The wall clock of the racer and its children steps by racer.clock, racer.clock_after seconds into the
        # run, and back racer.clock_back seconds later (bench/clockshift.c: steps on the machine's monotonic clock);
        # its writes to the lakehouse fail in their window (bench/failwrites.c, on the same clock).
        extra, preload = {}, []
        if racer.clock and zone.clock_lib is not None:
            at = time.monotonic() + racer.clock_after
            preload.append(str(zone.clock_lib))
            extra["CLOCKSHIFT"] = f"{at:.3f}:{offset_seconds(racer.clock)},{at + racer.clock_back:.3f}:0"
        log = logs / f"racer-{i}-{racer.kind}.log"
        if racer.writes_fail_after is not None and zone.write_lib is not None:
            at = time.monotonic() + racer.writes_fail_after
            preload.append(str(zone.write_lib))
            extra["FAILWRITES"] = f"{at:.3f}:{at + racer.writes_fail_for:.3f}:{zone.lakehouse.resolve()}"
            extra["FAILWRITES_MARK"] = str(log.with_suffix(".writes-failed"))
        if preload:
            extra["LD_PRELOAD"] = " ".join(preload)
        with log.open("wb") as out:
            proc = subprocess.Popen(_chain(zone, racer, log), env=zone.env(**extra), stdout=out, stderr=out,
                                    start_new_session=True)
        procs.append((racer, proc, time.monotonic(), log))
    try:
        _wait_racers(zone, procs)
    finally:  # also when the campaign itself is interrupted: no racer outlives it
        for _, proc, _, _ in procs:
            _kill_group(proc)
    for racer, proc, started, log in procs:
        proc.wait()
        racer.returncode = proc.returncode
        racer.seconds = racer.seconds or round(time.monotonic() - started, 2)
        racer.stderr_tail = log.read_text(errors="replace")[-600:]
        racer.writes_failed = log.with_suffix(".writes-failed").exists()


def _wait_racers(zone: Zone, procs: list[tuple[Racer, subprocess.Popen[bytes], float, Path]]) -> None:
    progress = {proc.pid: GroupProgress(proc.pid) for _, proc, _, _ in procs}
    while any(p.poll() is None for _, p, _, _ in procs):
        now = time.monotonic()
        for racer, proc, started, _ in procs:
            if proc.poll() is not None:
                racer.seconds = racer.seconds or round(now - started, 2)
                continue
            if racer.kill_after is not None and not racer.killed and now - started >= racer.kill_after:
                _kill_group(proc)
                racer.killed = True
            elif progress[proc.pid].overdue(started, now, zone.engine.deadline):
                _kill_group(proc)
                racer.hung = True
        time.sleep(0.02)


def _log_entries(table: Path) -> int:
    log = table / "_delta_log"
    return sum(1 for p in log.glob("*.json")) if log.is_dir() else 0


def plan_then_kill(zone: Zone, logs: Path) -> bool:
    """Return whether an ingest was SIGKILLed right after it committed a planned batch to ``landing_batches``
    (False: it ended before planning anything new). The commit is seen in the embedded store's phase trace, or,
    on Delta's engine (which traces nothing), as a new entry of the table's log."""
    trace = logs / "plan-trace.txt"
    trace.unlink(missing_ok=True)
    batches = zone.lakehouse / "landing_batches"
    before = _log_entries(batches)
    cmd = lakeshard(zone, "ingest", "--lakehouse", str(zone.lakehouse), "--landing", str(zone.landing))
    with (logs / "plan.log").open("wb") as out:
        proc = subprocess.Popen(cmd, env=zone.env(LAKESHARD_TRACE_PHASES=str(trace)), stdout=out, stderr=out,
                                start_new_session=True)
    started = time.monotonic()
    try:
        while proc.poll() is None and time.monotonic() - started < zone.engine.deadline:
            traced = trace.exists() and any(line.startswith(f"{proc.pid} exit commit") and "landing_batches" in line
                                            for line in trace.read_text().splitlines())
            if traced or _log_entries(batches) > max(before, 1):  # a new table: its creation, then the plan
                _kill_group(proc)
                proc.wait()
                return True
            time.sleep(0.005)
        return False
    finally:
        _kill_group(proc)
        proc.wait()


def _records(path: Path) -> bytes:
    raw = path.read_bytes()
    return gzip.decompress(raw) if path.name.endswith(".gz") else raw


def mutate_landing(folder: Path, how: str, rng: random.Random) -> str:
    """Return the name of the landing file of ``folder`` that was rewritten, truncated or removed (``how``)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and "_truth" not in p.parts)
    path = rng.choice(files)
    if how == "remove":
        path.unlink()
    elif how == "truncate":
        size = path.stat().st_size
        with path.open("r+b") as f:
            f.truncate(rng.randrange(0, max(size, 1)))
    else:  # the same records serialized again: other bytes, same events
        out = []
        for line in _records(path).split(b"\n"):
            try:
                out.append(json.dumps(json.loads(line), separators=(", ", ": ")).encode())
            except ValueError:
                out.append(line)
        data = b"\n".join(out)
        path.write_bytes(gzip.compress(data, compresslevel=1) if path.name.endswith(".gz") else data)
    return path.name


def damage_file(store: object, cfg: object, table: str, closed: set[tuple[str, str]],
                rng: random.Random) -> tuple[str, str] | None:
    """Return (file path, refill argument) of a live data file of ``table`` cut in half, or None when it has no
    file that may be damaged (an events file of a closed bucket cannot be refilled: refill refuses closed
    buckets)."""
    uri = cfg.table_uri(table)  # type: ignore[attr-defined]
    if not store.exists(uri):  # type: ignore[attr-defined]
        return None
    files = store.files(uri)  # type: ignore[attr-defined]
    if table == "events":
        files = [f for f in files if (f.partition_values.get("tenant_id"), f.partition_values.get("hour"))
                 not in closed]
    if not files:
        return None
    info = rng.choice(files)
    path = Path(str(cfg.lakehouse)) / table / info.path  # type: ignore[attr-defined]
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size // 2)
    if table == "events":
        return str(path), f"--bucket={info.partition_values['tenant_id']}/{info.partition_values['hour']}"
    return str(path), {"routed": "--routed", "event_ids": "--ids"}[table]


def offset_seconds(offset: str) -> int:
    """Return the seconds of an offset such as ``+2h``, ``-45m``, ``+1d`` or ``-30s``."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return int(offset[:-1]) * units[offset[-1]]


def build_preload(work: Path, source: Path) -> tuple[Path | None, str]:
    """Return (the shared library of ``source``, ``bench/clockshift.c`` or ``bench/failwrites.c``, built into
    ``work``, "") or (None, why it could not be built): the machine's C compiler builds it."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None, f"no C compiler (cc) to build bench/{source.name}"
    lib = work / source.with_suffix(".so").name
    done = subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(lib), str(source), "-ldl"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        return None, f"bench/{source.name} did not build: {done.stderr.strip()[-300:]}"
    return lib, ""


def mount_tmpfs(where: Path, mib: int) -> bool:
    """Return whether a tmpfs of ``mib`` MiB is mounted at ``where`` (False when this process may not mount)."""
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m", "tmpfs", str(where)], capture_output=True)
    return done.returncode == 0


def unmount(where: Path) -> None:
    """Unmount the tmpfs at ``where`` (lazily: a killed process may still hold a file open)."""
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill_disk(where: Path, after: float, hold: float) -> threading.Thread:
    """Return the started thread that, ``after`` seconds from now, fills the file system of ``where`` with a
    ballast file until it is full, keeps it full ``hold`` seconds, then removes the ballast."""
    def run() -> None:
        time.sleep(after)
        ballast = where / ".ballast"
        fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            size = 1 << 20
            while size:  # halve the block at each ENOSPC, down to one byte: the file system ends full
                try:
                    os.write(fd, b"\0" * size)
                except OSError:
                    size //= 2
        finally:
            os.close(fd)
        time.sleep(hold)
        ballast.unlink(missing_ok=True)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread
