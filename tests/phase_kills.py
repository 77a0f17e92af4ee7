"""Crash-test helper: run a process writing through the embedded store, SIGKILL it, and say where it died.

The child runs with ``LAKESHARD_TRACE_PHASES`` (:mod:`lakeshard.lake.trace`) pointing at a FIFO that the parent
reads while the child runs, so a kill "right after the child entered its n-th commit" follows the child's own
line within the scheduler's wake-up time (a delta-rs commit here takes 1-10 ms; polling a plain file would
miss most of them). Where the kill landed is read from the last line the child wrote:

* ``enter write``  → :data:`PARQUET_WRITE` (its Parquet files were being written),
* ``enter commit`` → :data:`DELTA_COMMIT` (delta-rs was writing the next log entry),
* ``exit ...``     → :data:`BETWEEN_COMMITS` (planning, reading, deduplicating, hooks),
* no line at all   → :data:`IDLE` (starting up, reading, nothing written yet).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lakeshard.lake.trace import COMMIT, TRACE_ENV, WRITE

__all__ = ["BETWEEN_COMMITS", "DELTA_COMMIT", "IDLE", "PARQUET_WRITE", "SEED_ENV", "KillAt", "Run", "child_env",
           "die", "kill_process_group", "kill_seed", "run_traced"]

PARQUET_WRITE = "parquet write"
DELTA_COMMIT = "delta commit"
BETWEEN_COMMITS = "between commits"
IDLE = "idle"
SEED_ENV = "LAKESHARD_KILL_SEED"
LIB = Path(__file__).parents[1] / "lib"


def kill_process_group(pid: int) -> None:
    """SIGKILL the process ``pid``, started in a session of its own, with every process it started (a Spark JVM):
    killing the Python process alone lets its JVM, which exits only once its parent's pipe closes, finish what it
    was doing (a Delta commit, a table's creation) first."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def die() -> None:
    """SIGKILL this process, and the processes it started when it leads its own process group (as the children
    :func:`run_traced` and the kill tests start do): a crash of the whole driver, JVM included."""
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def kill_seed() -> int:
    """Return the seed of this run's kill timings: ``LAKESHARD_KILL_SEED`` if set (to reproduce), else fresh."""
    given = os.environ.get(SEED_ENV)
    return int(given) if given else secrets.randbelow(2**31)


def child_env(**extra: str) -> dict[str, str]:
    """Return the environment of a child process: this worktree's library first on the path, then the tests' folder
    (a child script may import :func:`die` from here)."""
    path = [str(LIB), str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), **extra}


@dataclass(frozen=True)
class KillAt:
    """Kill the child ``delay`` seconds after it entered phase ``phase`` (write or commit) the ``nth`` time; with
    ``table``, the ``nth`` time it entered that phase of that table."""

    phase: str
    nth: int
    delay: float
    table: str = ""

    def __str__(self) -> str:
        return f"{self.phase}{f' {self.table}' if self.table else ''}#{self.nth}+{self.delay * 1000:.1f}ms"

    def aims_at(self, line: str) -> bool:
        """Return whether the trace line ``line`` enters the phase (and table) this kill counts."""
        _, event, phase, *rest = line.split(" ", 3)
        return (event, phase) == ("enter", self.phase) and (not self.table or Path(rest[0]).name == self.table)


@dataclass(frozen=True)
class Run:
    """One child process: how it ended, what it printed and the phase lines it traced."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float
    lines: list[str] = field(default_factory=list)
    seen: list[float] = field(default_factory=list)  # when the parent read each line (monotonic seconds)

    @property
    def killed(self) -> bool:
        """Return whether the process died of SIGKILL."""
        return self.returncode == -signal.SIGKILL

    @property
    def landed(self) -> str:
        """Return where the process was when it ended, from its last trace line."""
        if not self.lines:
            return IDLE
        _, event, phase, *_ = self.lines[-1].split(" ")
        if event == "enter":
            return {WRITE: PARQUET_WRITE, COMMIT: DELTA_COMMIT}[phase]
        return BETWEEN_COMMITS

    @property
    def table(self) -> str:
        """Return the table of the last phase the process traced ('' if none)."""
        return Path(self.lines[-1].split(" ", 3)[3]).name if self.lines else ""

    def entered(self, phase: str) -> int:
        """Return how often the process entered ``phase``."""
        return sum(1 for line in self.lines if line.split(" ")[1:3] == ["enter", phase])

    def spans(self, phase: str) -> list[float]:
        """Return, per entry into ``phase``, the seconds between the parent reading its enter and exit lines.

        A kill aimed inside the n-th entry waits a share of its span: an absolute delay that suits a loaded
        machine lands past the end of the phase on an idle one.
        """
        spans, opened = [], None
        for line, seen in zip(self.lines, self.seen, strict=True):
            event, name = line.split(" ")[1:3]
            if name == phase:
                if event == "enter":
                    opened = seen
                elif opened is not None:
                    spans.append(seen - opened)
                    opened = None
        return spans


def run_traced(argv: Sequence[str], *, kill_at: KillAt | None = None, env: Mapping[str, str] | None = None,
               timeout: float = 600.0) -> Run:
    """Return the run of ``argv`` traced through a FIFO, SIGKILLed as ``kill_at`` says (None: not by us)."""
    workdir = Path(tempfile.mkdtemp(prefix="lakeshard-trace-"))
    fifo = workdir / f"{uuid.uuid4().hex}.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # before the child: its open for writing then succeeds
    out, err = workdir / "stdout", workdir / "stderr"
    started = time.monotonic()
    with out.open("w") as stdout, err.open("w") as stderr:
        # In a process group of its own, so a kill takes the child's JVM (Delta's engine) with it, as a crash would.
        proc = subprocess.Popen(list(argv), stdout=stdout, stderr=stderr, start_new_session=True,
                                env={**(env or child_env()), TRACE_ENV: str(fifo)})
    lines: list[str] = []
    seen: list[float] = []
    pending, entered, fired = b"", 0, kill_at is None
    try:
        while True:
            exited = proc.poll() is not None
            readable, _, _ = select.select([reader], [], [], 0.05)
            chunk = os.read(reader, 1 << 16) if readable else b""
            if not chunk:
                if exited:
                    break
                if readable:
                    time.sleep(0.005)  # end of file while the child lives: it has not opened the FIFO yet
                if time.monotonic() - started > timeout:
                    kill_process_group(proc.pid)
                    raise TimeoutError(f"{argv} ran longer than {timeout}s")
                continue
            *complete, pending = (pending + chunk).split(b"\n")
            for raw in complete:
                line = raw.decode("utf-8")
                lines.append(line)
                seen.append(time.monotonic())
                if not fired and kill_at is not None and kill_at.aims_at(line):
                    entered += 1
                    if entered == kill_at.nth:
                        if kill_at.delay > 0:
                            time.sleep(kill_at.delay)
                        kill_process_group(proc.pid)
                        fired = True
        proc.wait(timeout=60)
    finally:
        os.close(reader)
    own = [i for i, line in enumerate(lines) if line.startswith(f"{proc.pid} ")]
    run = Run(proc.returncode, out.read_text(), err.read_text(), time.monotonic() - started,
              [lines[i] for i in own], [seen[i] for i in own])
    for path in (fifo, out, err):
        path.unlink()
    workdir.rmdir()
    return run
