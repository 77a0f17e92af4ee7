"""The load-management commands as a user runs them: plans print without committing, --apply and
exclude commit, bad input is one clear line."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from lakeshard.app.commands.balancing import add_commands
from lakeshard.config import load_config
from lakeshard.lake import TableStore
from lakeshard.pipelines.commands import run_flow
from lakeshard.routing.tables import RoutingTables


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakeshard")
    parser.add_argument("--config")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser, landing: bool) -> None:
        p.add_argument("--lakehouse")
        if landing:
            p.add_argument("--landing")

    add_commands(sub, common, run_flow=run_flow)
    return parser


def _run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    return int(args.func(args))


@pytest.mark.parametrize("command", ["autoshard", "balance", "exclude"])
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _parser().parse_args([command, "--help"])
    assert exit_info.value.code == 0
    assert "--lakehouse" in capsys.readouterr().out


def test_a_bad_timestamp_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _parser().parse_args(["autoshard", "--as-of", "yesterday"])
    assert exit_info.value.code == 2
    assert "expected an ISO timestamp like 2026-01-01T10:00:00Z, found 'yesterday'" in capsys.readouterr().err


def test_plan_apply_and_exclude(store: TableStore, routed: Path, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    lh = tmp_path / "lh"
    shutil.copytree(routed, lh)
    toml = tmp_path / "lakeshard.toml"
    toml.write_text('[spark]\nmaster = "local[2]"\nshuffle_partitions = 2\nadapter = "embedded"\n'
                    '[routing]\ntotal_shards = 8\n[balancing]\ntarget_bytes_per_second = 20.0\n'
                    'variance_threshold = 0.0\n')
    common = ["--config", str(toml)]
    as_of = ["--as-of", "2026-01-01T00:15:05Z"]
    tables = RoutingTables(store, load_config(toml, overrides={"lakehouse": str(lh)}, env={}))

    assert _run([*common, "autoshard", "--lakehouse", str(lh), *as_of]) == 0
    out = capsys.readouterr().out
    assert "scale up" in out and "plan only: pass --apply to commit it" in out
    assert tables.tenant_settings() == {}  # a plan commits nothing

    assert _run([*common, "balance", "--lakehouse", str(lh), "--max-moves", "2", "--apply", *as_of]) == 0
    out = capsys.readouterr().out
    assert "committed as tenant_settings version" in out
    assert 1 <= len(tables.tenant_settings()) <= 2

    assert _run([*common, "exclude", "3", "5", "--lakehouse", str(lh), "--reason", "lagging"]) == 0
    assert "excluded shards [] -> [3, 5] of 8" in capsys.readouterr().out
    assert _run([*common, "exclude", "--include", "3", "--lakehouse", str(lh)]) == 0
    assert "[3, 5] -> [5]" in capsys.readouterr().out
    assert tables.topology().excluded == (5,)
