"""``lakeshard pipeline run|events|graph`` as a user runs them: help, the graph, clean one-line errors, the log."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lakeshard.app.cli import main
from lakeshard.pipelines import RunReport
from lakeshard.synth import Manifest


@pytest.mark.parametrize("command", [["run"], ["events"], ["graph"]])
def test_every_pipeline_command_has_help(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["pipeline", *command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: lakeshard pipeline {command[0]}")
    assert ("--lakehouse" in out) == (command[0] != "graph")
    assert ("--landing" in out) == (command[0] == "run")


def test_graph_prints_the_flows_in_dag_order(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pipeline", "graph"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[3:]] == ["route", "ingest", "close_buckets", "compact", "autoshard",
                                                       "balance", "compact_books"]
    assert "routed -> events, event_ids" in lines[4] and "expect_or_fail:identified" in lines[4]


@pytest.mark.parametrize(("argv", "message"), [
    (["pipeline", "run", "--flows", "vacuum"],
     "error: pipeline 'lakeshard' has no flow 'vacuum'; flows: ['route', 'ingest', 'close_buckets', 'compact', "
     "'autoshard', 'balance', 'compact_books']"),
    (["pipeline", "run", "--param", "apply=false"],
     "error: --param expects FLOW.NAME=VALUE (e.g. autoshard.apply=false), found 'apply=false'"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [message]


def test_events_without_a_log_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pipeline", "events", "--lakehouse", str(tmp_path / "empty")]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: no pipeline has run in {tmp_path / 'empty'} yet")


def test_run_then_events_show_the_latest_run(
    landing: tuple[Path, Manifest], first_run: tuple[Path, RunReport], copy_lakehouse: Callable[[Path], Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    lh = str(copy_lakehouse(first_run[0]))
    assert main(["pipeline", "events", "--lakehouse", lh, "--run", first_run[1].run_id]) == 0
    out = capsys.readouterr().out
    assert sum(" completed " in line for line in out.splitlines()) == 7  # every flow of the pipeline
    assert main(["pipeline", "run", "--flows", "ingest", "--lakehouse", lh, "--landing", str(landing[0])]) == 0
    out = capsys.readouterr().out
    assert "ingest: up to date" in out and ": ok" in out
    assert main(["pipeline", "events", "--lakehouse", lh]) == 0
    out = capsys.readouterr().out.splitlines()
    assert first_run[1].run_id not in out[0] and [line.split()[:2] for line in out[3:]] == [["ingest", "up_to_date"]]
    assert main(["pipeline", "events", "--lakehouse", lh, "--run", "nope"]) == 2
    assert capsys.readouterr().err.startswith("error: run 'nope' is not in the event log")


def test_a_failed_flow_is_an_error_line_on_stderr_and_exit_1(
    spark: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["pipeline", "run", "--flows", "autoshard", "--param", "autoshard.as_of=yesterday", "--lakehouse",
                 str(tmp_path / "lh")]) == 1
    out, err = capsys.readouterr()
    assert err.startswith("autoshard: FAILED: ") and "found 'yesterday'" in err, err
    assert "autoshard: running ..." in out and "autoshard: FAILED" not in out, out
