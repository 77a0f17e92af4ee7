"""A lakeshard command's process turns transparent huge pages off for itself and keeps Arrow's freed pages; the
environment can keep either as it was. Each case runs in a process of its own: the settings are the process's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lakeshard.process import HUGE_PAGES_ENV

_REPORT = ("import json, os, sys; from lakeshard.process.memory import huge_pages_disabled; {run}; "
           "status = [l.split()[1] for l in open('/proc/self/status') if l.startswith('THP_enabled')] "
           "if sys.platform.startswith('linux') else []; "
           "print(json.dumps([huge_pages_disabled(), os.environ.get('MIMALLOC_PURGE_DELAY'), status, "
           "'pyarrow' in sys.modules]))")
LINUX = sys.platform.startswith("linux")


def _report(run: str, env: dict[str, str]) -> list:
    environ = {k: v for k, v in os.environ.items() if k not in (HUGE_PAGES_ENV, "MIMALLOC_PURGE_DELAY")}
    out = subprocess.run([sys.executable, "-c", _REPORT.format(run=run)], env={**environ, **env},
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("env", "disabled"), [({}, LINUX), ({HUGE_PAGES_ENV: "1"}, False)])
def test_a_lakeshard_command_runs_without_huge_pages_and_keeps_arrows_pages(
        tmp_path: Path, env: dict[str, str], disabled: bool) -> None:
    landing = tmp_path / "landing"
    got_disabled, purge, status, arrow_loaded = _report(
        f"from lakeshard.app.cli import main; assert main(['generate', '--events', '50', '--landing', "
        f"{str(landing)!r}, '--quiet']) == 0", env)
    assert any(landing.rglob("*.jsonl*"))  # the command ran (the variable is not refused as a misspelt setting)
    assert arrow_loaded  # and loaded Arrow, whose allocator read the setting below when it started
    assert purge == "-1"
    assert got_disabled is disabled
    if LINUX and status:  # the kernel's own account of the process, where it gives one
        assert status == ["0" if disabled else "1"]


@pytest.mark.parametrize(("env", "disabled", "purge"), [
    ({HUGE_PAGES_ENV: "1"}, False, "-1"),
    ({"MIMALLOC_PURGE_DELAY": "250"}, LINUX, "250"),
    ({HUGE_PAGES_ENV: "0"}, LINUX, "-1"),
])
def test_what_the_environment_sets_wins(env: dict[str, str], disabled: bool, purge: str) -> None:
    got_disabled, got_purge, status, _ = _report(
        "from lakeshard.process.memory import prepare_process_memory; prepare_process_memory()", env)
    assert (got_disabled, got_purge) == (disabled, purge)
    if LINUX and status:
        assert status == ["0" if disabled else "1"]


def test_huge_pages_asked_for_are_given_back_where_the_parent_had_turned_them_off() -> None:
    got_disabled, _, status, _ = _report(
        "import ctypes; sys.platform.startswith('linux') and ctypes.CDLL(None).prctl(41, 1, 0, 0, 0); "
        "from lakeshard.process.memory import prepare_process_memory; prepare_process_memory()", {HUGE_PAGES_ENV: "1"})
    assert got_disabled is False
    if LINUX and status:
        assert status == ["1"]


def test_once_arrow_is_loaded_only_the_huge_pages_change() -> None:
    got_disabled, got_purge, _, _ = _report(
        "import pyarrow; from lakeshard.process.memory import prepare_process_memory; prepare_process_memory()", {})
    assert (got_disabled, got_purge) == (LINUX, None)  # too late for the allocator's options: not pretended
