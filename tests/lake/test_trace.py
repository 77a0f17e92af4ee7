"""The phase trace: lines around each phase when LAKESHARD_TRACE_PHASES is set, nothing when it is not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lakeshard.lake.trace import COMMIT, TRACE_ENV, WRITE, phase


def test_phases_are_traced_in_order_with_the_pid_and_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    trace = tmp_path / "trace"
    monkeypatch.setenv(TRACE_ENV, str(trace))
    with phase(WRITE, "/lh/events"):
        assert trace.read_text().splitlines() == [f"{os.getpid()} enter write /lh/events"]
    with pytest.raises(RuntimeError), phase(COMMIT, "/lh/events"):
        raise RuntimeError("a lost race")
    pid = os.getpid()
    assert trace.read_text().splitlines() == [
        f"{pid} enter write /lh/events", f"{pid} exit write /lh/events",
        f"{pid} enter commit /lh/events", f"{pid} exit commit /lh/events",  # left by an exception: exit too
    ]


def test_nothing_is_written_when_tracing_is_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TRACE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    with phase(COMMIT, "/lh/events"):
        pass
    assert list(tmp_path.iterdir()) == []
