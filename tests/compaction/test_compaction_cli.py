"""``lakeshard compact`` and ``lakeshard query`` as a user runs them: plan, --apply, report, clean errors."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from lakeshard.app.cli import main

from .conftest import AppendEvents

if TYPE_CHECKING:
    from lakeshard.lake import TableStore


def test_compact_plans_applies_and_query_reports(store: TableStore, events_table: tuple[str, AppendEvents],
                                                 tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The plan commits nothing; --apply swaps files; query prints the pruning report and the match count."""
    uri, append = events_table
    append("t1", 4, 20)
    lakehouse = str(Path(uri).parent)
    toml = tmp_path / "lakeshard.toml"
    toml.write_text('[spark]\nmaster = "local[2]"\nshuffle_partitions = 2\nadapter = "embedded"\n')
    common = ["--config", str(toml)]
    version = store.version(uri)
    assert main([*common, "compact", "--lakehouse", lakehouse, "--min-files", "4", "--target-rows", "100"]) == 0
    out = capsys.readouterr().out
    assert "2 merge tasks in 2 buckets" in out and "plan only" in out
    assert store.version(uri) == version
    assert main([*common, "compact", "--lakehouse", lakehouse, "--min-files", "4", "--target-rows", "100",
                 "--apply", "--bucket", "t1/2026-01-01T10"]) == 0
    out = capsys.readouterr().out
    assert "1 merge tasks in 1 buckets" in out and "4 files -> 1" in out
    assert store.version(uri) == version + 1
    assert main([*common, "query", "--lakehouse", lakehouse, "--tenant", "t1", "--start", "2026-01-01T10:00:00Z",
                 "--end", "2026-01-01T11:00:00Z", "--where", "service=auth", "--where", "service=web"]) == 0
    out = capsys.readouterr().out
    expected = store.read(uri).where("tenant_id = 't1' AND hour = '2026-01-01T10' AND service IN ('auth', 'web')")
    assert "files considered 5, pruned by partition 4" in out
    assert f"{expected.count():,} matching events" in out


def test_errors_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No events table, and a malformed bucket, each give one clear line and exit code 2."""
    toml = tmp_path / "lakeshard.toml"
    toml.write_text('[spark]\nmaster = "local[2]"\nshuffle_partitions = 2\nadapter = "embedded"\n')
    assert main(["--config", str(toml), "compact", "--lakehouse", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no Delta table at") and "\n" not in err
    with pytest.raises(SystemExit) as exit_info:
        main(["compact", "--bucket", "no-hour"])
    assert exit_info.value.code == 2
    assert "expected TENANT/HOUR like acme/2026-01-01T10, found 'no-hour'" in capsys.readouterr().err


def test_apply_with_named_buckets_reports_a_locked_one_and_compacts_the_others(
        store: TableStore, events_table: tuple[str, AppendEvents], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from lakeshard.versions import Chunk, ChunkLocks

    uri, append = events_table
    append("blue", 3, 15)
    append("red", 3, 15)
    lakehouse = str(Path(uri).parent)
    held = ChunkLocks(store, f"{lakehouse}/chunk_locks", holder="backfill").acquire(Chunk("red", "2026-01-01T11"))
    toml = tmp_path / "lakeshard.toml"
    toml.write_text('[spark]\nmaster = "local[2]"\nshuffle_partitions = 2\nadapter = "embedded"\n')

    code = main(["--config", str(toml), "compact", "--lakehouse", lakehouse, "--min-files", "3", "--apply",
                 "--bucket", "red/2026-01-01T11", "--bucket", "blue/2026-01-01T11"])

    out, err = capsys.readouterr()
    assert code == 1
    assert ("locked: bucket 'red'/2026-01-01T11 is left as it is: chunk red/2026-01-01T11 is locked for "
            "replacement by backfill") in err and "is left as it is" not in out
    assert f"until its lease expires at {held.state.expires_at:%Y-%m-%dT%H:%M:%SZ}" in err
    per_bucket = [(f.partition_values["tenant_id"], f.partition_values["hour"]) for f in store.files(uri)]
    assert per_bucket.count(("blue", "2026-01-01T11")) == 1 and per_bucket.count(("red", "2026-01-01T11")) == 3


@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_query_over_a_damaged_file_is_one_line_naming_it_and_other_tenants_still_read(
        store: TableStore, events_table: tuple[str, AppendEvents], tmp_path: Path,
        capsys: pytest.CaptureFixture[str], damage: str) -> None:
    from urllib.parse import unquote

    uri, append = events_table
    append("pine", 2, 10)
    append("elm", 2, 10)
    victim = next(f for f in store.files(uri) if f.partition_values["tenant_id"] == "pine")
    on_disk = Path(uri) / unquote(victim.path)
    if damage == "missing":
        on_disk.unlink()
    else:
        on_disk.write_bytes(on_disk.read_bytes()[:50])
    toml = tmp_path / "lakeshard.toml"
    toml.write_text('[spark]\nmaster = "local[2]"\nshuffle_partitions = 2\nadapter = "embedded"\n')
    query = ["--config", str(toml), "query", "--lakehouse", str(Path(uri).parent), "--start", "2026-01-01T00:00:00Z",
             "--end", "2026-01-02T00:00:00Z", "--show", "3"]

    assert main([*query, "--tenant", "pine"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {uri}: data file {victim.path} (tenant_id=pine, hour=") and err.count("\n") == 1
    assert "Py4J" not in err and "\tat " not in err
    elm = sum(f.num_records or 0 for f in store.files(uri) if f.partition_values["tenant_id"] == "elm")
    assert main([*query, "--tenant", "elm"]) == 0
    assert f"{elm} matching events" in capsys.readouterr().out
