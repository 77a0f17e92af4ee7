"""The command line as a user runs it: help everywhere, clean errors, generate + route."""

from __future__ import annotations

import errno
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lakeshard.app.cli import main
from lakeshard.lake import FileInfo

LAKESHARD = [sys.executable, "-m", "lakeshard.app.cli"]


@pytest.mark.parametrize("command", [[], ["doctor"], ["generate"], ["route"], ["ingest"], ["fsck"], ["refill"],
                                     ["demo"], ["autoshard"], ["balance"], ["exclude"]])
def test_every_command_has_help(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "usage: lakeshard" in out
    if command and command[0] != "doctor":
        assert "--lakehouse" in out
    if command and command[0] in {"generate", "route", "ingest", "demo"}:
        assert "--landing" in out


def test_a_bad_config_value_is_one_clear_line(tmp_path: Path) -> None:
    bad = tmp_path / "lakeshard.toml"
    bad.write_text("[spark]\nshuffle_partitions = 'many'\n")
    run = subprocess.run([*LAKESHARD, "--config", str(bad), "generate", "--landing", str(tmp_path / "l")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert run.stderr.strip() == "error: spark.shuffle_partitions: expected an integer, found 'many'"


def test_generate_refuses_a_non_empty_landing_without_overwrite(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "keep.jsonl").write_text("{}\n")
    run = subprocess.run([*LAKESHARD, "generate", "--landing", str(landing), "--events", "100", "--quiet"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stderr.startswith("error: ") and "Traceback" not in run.stderr
    assert (landing / "keep.jsonl").read_text() == "{}\n"


@pytest.mark.parametrize("tenants", ["1", "2"])
def test_generate_makes_a_zone_of_fewer_tenants_than_burst_by_default(tmp_path: Path, tenants: str) -> None:
    run = subprocess.run([*LAKESHARD, "generate", "--landing", str(tmp_path / "l"), "--events", "60", "--quiet",
                          "--tenants", tenants], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "l" / "_truth" / "manifest.json").is_file()


def test_generate_into_a_new_folder_keeps_the_landing_zones_files(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "keep.jsonl").write_text("{}\n")
    for _ in range(2):
        run = subprocess.run([*LAKESHARD, "generate", "--landing", str(landing), "--events", "100", "--quiet",
                              "--new-folder"], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
    assert (landing / "keep.jsonl").read_text() == "{}\n"
    runs = sorted((landing / "synthetic").iterdir())
    assert len(runs) == 2 and all((r / "_truth" / "manifest.json").is_file() for r in runs)


def test_ingest_routes_and_writes_a_small_landing_exactly_once_even_when_run_twice(tmp_path: Path) -> None:
    """``lakeshard ingest`` as a user runs it (a small landing zone: no JVM needed); a second run adds nothing."""
    from deltalake import DeltaTable  # an independent reader of what the command committed

    landing, lakehouse = tmp_path / "landing", tmp_path / "lh"
    common = ["--lakehouse", str(lakehouse), "--landing", str(landing)]
    gen = subprocess.run([*LAKESHARD, "generate", "--landing", str(landing), "--events", "400", "--tenants", "5",
                          "--quiet"], capture_output=True, text=True, timeout=120)
    assert gen.returncode == 0, gen.stderr
    counts = []
    for _ in range(2):
        run = subprocess.run([*LAKESHARD, "ingest", *common], capture_output=True, text=True, timeout=300)
        assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
        counts.append(DeltaTable(str(lakehouse / "events")).to_pyarrow_table(columns=["event_id"]).num_rows)
    assert "wrote" in run.stdout and counts[0] == counts[1] > 0
    ids = DeltaTable(str(lakehouse / "events")).to_pyarrow_table(columns=["tenant_id", "event_id"]).to_pylist()
    assert len({(r["tenant_id"], r["event_id"]) for r in ids}) == len(ids)  # no duplicate


def test_route_after_a_killed_ingest_finishes_its_batch_exactly_once_through_the_route_flow(tmp_path: Path) -> None:
    """``lakeshard ingest`` SIGKILLed as it starts writing the fused batch's rows to ``events``; ``lakeshard route``
    then finishes that batch as the pipeline's route flow does (the ingest flow's gate, the event log), and a later
    ``lakeshard ingest`` finds nothing left: every event of the zone once in ``events`` and its key in the index."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from deltalake import DeltaTable  # an independent reader of what the commands committed

    from lakeshard.config import load_config
    from lakeshard.lake import open_lazy_store
    from lakeshard.lake.trace import WRITE
    from lakeshard.synth.manifest import EVENTS_FILE, TRUTH_DIR
    from lakeshard.tables import EVENTS, FUSED_APP_ID, ID_INDEX, PIPELINE_EVENTS
    from phase_kills import KillAt, run_traced

    landing = tmp_path / "landing"
    gen = subprocess.run([*LAKESHARD, "generate", "--landing", str(landing), "--events", "400", "--tenants", "5",
                          "--quiet"], capture_output=True, text=True, timeout=120)
    assert gen.returncode == 0, gen.stderr
    for attempt in range(3):  # a kill that landed after the batch's IDs were committed is tried again
        lakehouse = tmp_path / f"lh{attempt}"
        common = ["--lakehouse", str(lakehouse), "--landing", str(landing)]
        killed = run_traced([*LAKESHARD, "ingest", *common], kill_at=KillAt(WRITE, 1, 0.0, table=EVENTS),
                            env=dict(os.environ), timeout=300)
        assert killed.killed, killed.stderr
        store = open_lazy_store(load_config(overrides={"lakehouse": str(lakehouse)}, env={}))
        ids = str(lakehouse / ID_INDEX)
        if not store.exists(ids) or store.transaction_version(ids, FUSED_APP_ID) is None:
            break
    else:
        pytest.fail("every kill landed after the fused batch was delivered")

    run = subprocess.run([*LAKESHARD, "route", *common], capture_output=True, text=True, timeout=300)

    assert run.returncode == 0 and run.stderr == "", run.stdout + run.stderr
    assert "finished 1 an earlier run had planned" in run.stdout, run.stdout
    log = DeltaTable(str(lakehouse / PIPELINE_EVENTS)).to_pyarrow_table().to_pylist()
    route_run = run.stdout.split("lakeshard pipeline events --run ")[1].split()[0]
    assert [r["flow"] for r in log if r["run_id"] == route_run and r["event"] == "completed"] == ["route"]
    again = subprocess.run([*LAKESHARD, "ingest", *common], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("routed 0 events (0 quarantined); wrote 0 events"), again.stdout
    events = DeltaTable(str(lakehouse / EVENTS)).to_pyarrow_table(columns=["tenant_id", "event_id", "ts"])
    ms = pc.divide(pc.cast(pc.cast(events.column("ts"), pa.timestamp("us", tz="UTC")), pa.int64()), 1000).to_pylist()
    keys = list(zip(events.column("tenant_id").to_pylist(), events.column("event_id").to_pylist(), ms, strict=True))
    truth = pq.read_table(landing / TRUTH_DIR / EVENTS_FILE, columns=["tenant_id", "event_id", "ts_ms"])
    assert sorted(keys) == sorted(zip(*(truth.column(c).to_pylist() for c in truth.column_names), strict=True))
    assert DeltaTable(str(lakehouse / ID_INDEX)).to_pyarrow_table(columns=["key_hi"]).num_rows == len(keys)


def test_an_unexpected_error_is_one_line_with_the_traceback_saved_to_a_file(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import lakeshard.app.cli as cli

    def broken(args: object) -> int:  # an OSError that is no storage failing a write (those say so, see below)
        raise OSError(9, "Bad file descriptor", "/lakehouse/events/_delta_log/00000000000000000042.json")

    monkeypatch.delenv("LAKESHARD_DEBUG", raising=False)
    monkeypatch.setattr(cli, "cmd_doctor", broken)
    assert cli.main(["doctor"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    first, second = err.strip().splitlines()
    assert first.startswith("error: unexpected OSError:") and "Bad file descriptor" in first
    saved = second.split("the full traceback is in ", 1)[1].split(";", 1)[0]
    with open(saved, encoding="utf-8") as f:
        assert "Traceback" in f.read()
    os.remove(saved)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["embedded", pytest.param("native", marks=pytest.mark.delta_jvm)])
@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC])
def test_a_run_whose_writes_the_storage_fails_says_so_in_plain_lines_and_the_next_run_commits_each_event_once(
    tmp_path: Path, engine: str, code: int, request: pytest.FixtureRequest
) -> None:
    """Every write to the lakehouse fails (an I/O error, a full disk) from a random point of ``lakeshard ingest``
    (the first one torn: half its bytes written): the command ends on its own with a few plain lines naming the
    failure (no traceback, no JVM stack frames, no terminal colours; it printed both before); the lakehouse holds no
    half commit, and a run once the storage works leaves every event of the landing zone in ``events`` once."""
    from bench import chaos_check
    from bench.chaos_faults import FAILWRITES_SOURCE, build_preload

    if engine == "native":
        request.getfixturevalue("delta_jars_installed")
    lib, why = build_preload(tmp_path, FAILWRITES_SOURCE)
    assert lib is not None, why
    landing, lakehouse = tmp_path / "landing", tmp_path / "lh"
    lakehouse.mkdir()
    common = ["--lakehouse", str(lakehouse), "--landing", str(landing)]
    gen = subprocess.run([*LAKESHARD, "generate", "--landing", str(landing), "--events", "300", "--tenants", "3",
                          "--quiet"], capture_output=True, text=True, timeout=120)
    assert gen.returncode == 0, gen.stderr
    env = {**os.environ, "LAKESHARD_SPARK_ADAPTER": engine}
    after = random.uniform(0.0, 2.0 if engine == "embedded" else 15.0)
    at = time.monotonic() + after
    failing = {**env, "LD_PRELOAD": str(lib), "FAILWRITES": f"{at:.3f}:{at + 3600:.3f}:{lakehouse.resolve()}",
               "FAILWRITES_ERRNO": str(code), "FAILWRITES_MARK": str(tmp_path / "struck")}
    run = subprocess.run([*LAKESHARD, "ingest", *common], env=failing, capture_output=True, text=True, timeout=600)
    if (tmp_path / "struck").exists():  # a write fell in the window (a run may end before it opens)
        assert run.returncode != 0, (after, run.stdout)
        said = [line for line in run.stderr.splitlines() if line.startswith(("error", "("))]
        assert said and said[0].startswith("error: ") and os.strerror(code) in run.stderr, (after, run.stderr)
        assert "storage failed a write" in run.stderr, (after, run.stderr)
        assert "Traceback" not in run.stderr and "\x1b[" not in run.stderr, (after, run.stderr)
        assert not [line for line in run.stderr.splitlines() if line.lstrip().startswith("at ")], run.stderr
    again = subprocess.run([*LAKESHARD, "ingest", *common], env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, (after, again.stderr)
    check = chaos_check.check_round(lakehouse, landing, chaos_check.Ledger())
    assert check.events == check.expected > 0 and not check.broken, (after, check.as_dict())


@pytest.mark.parametrize(("absent", "command", "extra"), [
    ("tqdm", ["demo", "--events", "100"], "app"),
    ("matplotlib", ["demo", "--events", "100"], "app"),
    ("pyspark", ["ingest"], "local"),
    ("pyspark", ["doctor"], "local"),
])
def test_a_command_whose_extra_is_not_installed_names_the_extra_in_one_line(
    tmp_path: Path, absent: str, command: list[str], extra: str
) -> None:
    """A fresh process where ``absent`` cannot be imported, as after ``pip install lakeshard`` without the extra."""
    code = (f"import sys; sys.modules[{absent!r}] = None\n"
            "from lakeshard.app.cli import main\n"
            f"sys.exit(main({[*command, '--lakehouse', str(tmp_path / 'lh'), '--landing', str(tmp_path / 'in')]!r}))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "LAKESHARD_DEBUG": ""})
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert f"{absent} is not installed" in run.stderr and f"pip install 'lakeshard[{extra}]'" in run.stderr
    assert "starting Spark" not in run.stdout  # stopped before its work, not in the middle of it


def _record(i: int) -> bytes:
    """A landing record without a ``service``: the ingest flow's ``has_service`` expectation fails on it."""
    import json
    import time

    return json.dumps({"tenant_id": f"t{i % 3}", "event_id": f"e{i}",
                       "ts": int(time.time() * 1000) - 3_600_000}).encode() + b"\n"


def test_ingest_runs_the_pipeline_flows_with_their_expectations_and_event_log(
    spark: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from deltalake import DeltaTable  # an independent reader of what the command committed

    landing, lakehouse = tmp_path / "landing", tmp_path / "lh"
    landing.mkdir()
    (landing / "part-0.jsonl").write_bytes(b"".join(_record(i) for i in range(30)))
    assert main(["ingest", "--lakehouse", str(lakehouse), "--landing", str(landing)]) == 0
    out = capsys.readouterr().out
    assert "wrote 30 events" in out and "has_service 0/30 passed" in out, out
    log = DeltaTable(str(lakehouse / "pipeline_events")).to_pyarrow_table().to_pylist()
    ends = {r["flow"]: r for r in log if r["event"] == "completed"}
    assert set(ends) == {"route", "ingest"}
    assert ends["ingest"]["rows_out"] == 30
    rules = {e["name"]: (e["passed"], e["failed"]) for e in ends["ingest"]["expectations"]}
    assert rules["has_service"] == (0, 30) and rules["identified"] == (30, 0)


def test_each_maintenance_command_says_why_it_changed_nothing(
    spark: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    landing, lakehouse = tmp_path / "landing", tmp_path / "lh"
    landing.mkdir()
    (landing / "part-0.jsonl").write_bytes(b"".join(_record(i) for i in range(12)))
    common = ["--lakehouse", str(lakehouse)]
    assert main(["ingest", *common, "--landing", str(landing)]) == 0
    capsys.readouterr()

    # Default periods: the buckets are an hour old but were written just now, so they stay open, and say why.
    assert main(["buckets", "close", *common, "--landing", str(landing)]) == 0
    out = capsys.readouterr().out
    assert "closed 0 buckets" in out and "still open: 3 (t0/" in out and "quiet period is 10m00s" in out, out

    assert main(["compact", *common, "--apply"]) == 0
    out = capsys.readouterr().out
    assert "nothing to compact: no closed bucket with 2 small files or more (0 of 3 buckets closed)" in out, out

    assert main(["autoshard", *common, "--apply"]) == 0
    out = capsys.readouterr().out
    assert "nothing to change: metrics are stale: the newest window ended" in out, out  # events an hour old

    assert main(["balance", *common, "--apply"]) == 0
    out = capsys.readouterr().out
    assert "nothing to change: " in out and "max/mean shard load" in out, out


def test_ingest_follow_stops_cleanly_on_ctrl_c_after_the_run_in_progress(tmp_path: Path) -> None:
    import signal
    import time

    landing, lakehouse = tmp_path / "landing", tmp_path / "lakehouse"
    landing.mkdir()
    proc = subprocess.Popen([*LAKESHARD, "ingest", "--follow", "--poll-seconds", "0.2", "--lakehouse", str(lakehouse),
                             "--landing", str(landing)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        # The first run has ended once the pipeline's event log holds a commit.
        while not list((lakehouse / "pipeline_events" / "_delta_log").glob("*.json")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no ingest run ended within 240 s"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=240)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "interrupted: stopping after the current run" in err
    assert "Traceback" not in err
    assert out.strip().splitlines()[-1].startswith("stopped after ")


@pytest.mark.parametrize(
    ("argv", "flag", "allowed", "found"),
    [
        (["ingest", "--follow", "--poll-seconds", "-0.5"], "--poll-seconds", "a number >= 0", "'-0.5'"),
        (["ingest", "--poll-seconds", "inf"], "--poll-seconds", "a number >= 0", "'inf'"),
        (["compact", "--target-rows", "0"], "--target-rows", "a whole number >= 1", "'0'"),
        (["compact", "--min-files", "1"], "--min-files", "a whole number >= 2", "'1'"),
        (["route", "--batch-files", "-4"], "--batch-files", "a whole number >= 1", "'-4'"),
        (["ingest", "--shards", "2", "-1"], "--shards", "a whole number >= 0", "'-1'"),
        # inf printed an OverflowError's Python traceback, nan argparse's "invalid _minutes value"
        (["buckets", "close", "--grace-minutes", "inf"], "--grace-minutes", "a number of minutes in [0, 5260320]",
         "'inf'"),
        (["buckets", "close", "--quiet-minutes", "nan"], "--quiet-minutes", "a number of minutes in [0, 5260320]",
         "'nan'"),
        # a clock before the epoch ran into an unexpected OverflowError looking back from it
        (["autoshard", "--as-of", "0001-01-01"], "--as-of", "an ISO timestamp from 1970 to 8999", "'0001-01-01'"),
        (["balance", "--as-of", "9999-12-31T23:59:59"], "--as-of", "an ISO timestamp from 1970 to 8999",
         "'9999-12-31T23:59:59'"),
    ],
)
def test_a_flag_out_of_range_is_one_line_naming_it_and_its_range(
        argv: list[str], flag: str, allowed: str, found: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: lakeshard ")
    assert f"argument {flag}" in err and f"expected {allowed}, found {found}" in err


def test_shards_outside_the_ring_are_refused_before_anything_is_routed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    landing, lakehouse = tmp_path / "landing", tmp_path / "lh"
    landing.mkdir()
    (landing / "a.jsonl").write_text('{"tenant_id": "t", "event_id": "e1", "ts": "2026-03-04T05:06:07Z"}\n')
    toml = tmp_path / "c.toml"
    toml.write_text("[routing]\ntotal_shards = 4\n")
    code = main(["--config", str(toml), "ingest", "--lakehouse", str(lakehouse), "--landing", str(landing),
                 "--shards", "1", "4", "7"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == f"error: ingest shards: expected shards of the ring 0-3 of {lakehouse}, found 4, 7\n"
    assert not (lakehouse / "landing_batches").exists()


def test_a_landing_zone_that_is_a_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    single = tmp_path / "one.jsonl"
    single.write_text("{}\n")
    assert main(["route", "--lakehouse", str(tmp_path / "lh"), "--landing", str(single)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"found the file {single}" in err


@pytest.mark.parametrize("argv", [["query", "--tenant", "a", "--start", "2026-01-01", "--end", "2026-01-02"],
                                  ["ingest"], ["fsck"]])
def test_a_lakehouse_that_is_a_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                argv: list[str]) -> None:
    """``query`` over it raised an unexpected NotADirectoryError, ``ingest`` printed delta-rs' two-line OS error,
    ``fsck`` said there was no table and exited 0."""
    single = tmp_path / "lakehouse.parquet"
    single.write_bytes(b"PAR1")
    landing = tmp_path / "landing"
    landing.mkdir()
    assert main([*argv, "--lakehouse", str(single), *(["--landing", str(landing)] if argv == ["ingest"] else [])]) == 2
    err = capsys.readouterr().err
    assert err == f"error: lakehouse: expected a directory (the lakehouse), found the file {single}\n", err


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("LAKESHARD_DEDUPE_ID_CACHE_BYTE", "5", "(did you mean LAKESHARD_DEDUPE_ID_CACHE_BYTES?)"),
        ("LAKESHARD_ROUTING_WINDOW_SECONDS", "0",
         "LAKESHARD_ROUTING_WINDOW_SECONDS: expected in (0, 315619200], found 0"),
    ],
)
def test_a_bad_environment_is_one_line_and_exit_2(tmp_path: Path, variable: str, value: str, expected: str) -> None:
    (tmp_path / "landing").mkdir()
    env = {**os.environ, variable: value}
    run = subprocess.run([*LAKESHARD, "route", "--lakehouse", str(tmp_path / "lh"), "--landing",
                          str(tmp_path / "landing")], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and expected in run.stderr


def test_a_demo_over_a_lakehouse_with_a_damaged_events_file_is_one_line_naming_it(
    spark: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's check against the ground truth read ``events`` with Spark: a damaged file of a lakehouse given with
    --lakehouse printed ~20 Java frames through the unexpected-error path."""


    lakehouse = tmp_path / "lh"
    victim = _ingested_with_one_file_cut(tmp_path, "events")
    capsys.readouterr()

    assert main(["demo", "--lakehouse", str(lakehouse), "--out", str(tmp_path / "demo"), "--events", "40",
                 "--tenants", "2", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Py4J" not in err and "unexpected" not in err, err
    assert f"events: data file {victim.path}" in err and "is damaged" in err, err


@pytest.mark.parametrize("command", ["autoshard", "balance"])
def test_load_management_over_a_damaged_metrics_file_is_one_line_naming_it(
    spark: object, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """The tenants' rates are read from ``routing_metrics`` with Spark: a damaged file of it printed the Java trace
    through the unexpected-error path (and the flow's event-log entry held it too)."""
    import time
    from datetime import UTC, datetime


    lakehouse = tmp_path / "lh"
    victim = _ingested_with_one_file_cut(tmp_path, "routing_metrics")
    capsys.readouterr()

    as_of = datetime.fromtimestamp(time.time() - 3_000, UTC).isoformat()  # the metrics of _record's hour are fresh
    assert main([command, "--lakehouse", str(lakehouse), "--as-of", as_of]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Py4J" not in err and "unexpected" not in err, err
    assert f"routing_metrics: data file {victim.path}" in err and "is damaged" in err, err


def _ingested_with_one_file_cut(tmp_path: Path, table: str) -> FileInfo:
    """Ingest a small zone into ``tmp_path/lh`` and cut one live file of ``table`` in half; return that file."""
    from urllib.parse import unquote

    from lakeshard.config import load_config
    from lakeshard.lake import open_lazy_store

    landing, lakehouse = tmp_path / "landing", tmp_path / "lh"
    landing.mkdir()
    (landing / "a.jsonl").write_bytes(b"".join(_record(i) for i in range(12)))
    assert main(["ingest", "--lakehouse", str(lakehouse), "--landing", str(landing)]) == 0
    store = open_lazy_store(load_config(overrides={"lakehouse": str(lakehouse)}, env={}))
    victim = store.files(str(lakehouse / table))[0]
    on_disk = lakehouse / table / unquote(victim.path)
    on_disk.write_bytes(on_disk.read_bytes()[: on_disk.stat().st_size // 2])
    return victim


def test_a_reader_closing_the_output_early_stops_the_command_quietly(tmp_path: Path) -> None:
    """``lakeshard ingest | head -1`` printed "error: unexpected BrokenPipeError" after its work was done. The
    work stays done: a second ingest finds nothing new."""
    landing, lakehouse = tmp_path / "landing", tmp_path / "lh"
    landing.mkdir()
    (landing / "a.jsonl").write_text("".join(f'{{"tenant_id": "t{i % 3}", "event_id": "e{i}", '
                                             f'"ts": {1767225600000 + i}}}\n' for i in range(50)))
    command = [*LAKESHARD, "ingest", "--landing", str(landing), "--lakehouse", str(lakehouse)]
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert run.stdout is not None and run.stderr is not None
    run.stdout.close()  # the reader goes away before the command prints
    err = run.stderr.read()
    assert run.wait(timeout=300) == 141, err
    assert err == ""
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("routed 0 events (0 quarantined); wrote 0 events"), again.stdout


def _as_command(preamble: str) -> list[str]:
    """Return a Python command that runs ``preamble``, then the ``lakeshard`` command line (its arguments after
    the command's own) the way its console script does."""
    return [sys.executable, "-c", f"{preamble}; import sys; from lakeshard.app.cli import run; "
                                  "sys.argv = ['lakeshard', *sys.argv[sys.argv.index('--') + 1:]]; run()"]


def test_the_command_ends_at_once_yet_runs_its_exit_handlers_and_prints_everything(tmp_path: Path) -> None:
    command = _as_command("import atexit; atexit.register(lambda: print('exit handler ran'))")
    ok = subprocess.run([*command, "--", "generate", "--events", "30", "--landing", str(tmp_path / "landing")],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("wrote ") and ok.stdout.endswith("exit handler ran\n")
    failed = subprocess.run([*command, "--", "ingest", "--landing", str(tmp_path / "missing"), "--lakehouse",
                             str(tmp_path / "lh")], capture_output=True, text=True, timeout=120)
    assert failed.returncode == 2
    assert failed.stderr == f"error: landing zone {tmp_path / 'missing'} does not exist\n"
    assert failed.stdout == "exit handler ran\n"


def test_a_thread_still_working_when_the_command_ends_is_waited_for(tmp_path: Path) -> None:
    done = tmp_path / "thread.txt"
    command = _as_command(f"import pathlib, threading, time; threading.Thread(target=lambda: (time.sleep(4), "
                          f"pathlib.Path({str(done)!r}).write_text('done'))).start()")
    started = time.monotonic()
    run = subprocess.run([*command, "--", "generate", "--events", "30", "--landing", str(tmp_path / "landing")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert time.monotonic() - started >= 4
    assert done.read_text() == "done"


def test_on_a_databricks_cluster_the_entry_point_returns_its_code_and_leaves_the_process_alone(
        tmp_path: Path) -> None:
    """A wheel task calls the entry point inside the driver's Python process: ending that process, or changing its
    memory settings, is not the command's to do."""
    script = ("import ctypes, os, sys; sys.platform.startswith('linux') and ctypes.CDLL(None).prctl(41, 0, 0, 0, 0); "
              "from lakeshard.app.cli import run; from lakeshard.process.memory import huge_pages_disabled; "
              "sys.argv = ['lakeshard', 'generate', '--events', '30', '--landing', sys.argv[1]]; "
              "code = run(); print('returned', code, huge_pages_disabled(), os.environ.get('MIMALLOC_PURGE_DELAY'))")
    environ = {k: v for k, v in os.environ.items() if k != "MIMALLOC_PURGE_DELAY"}
    run = subprocess.run([sys.executable, "-c", script, str(tmp_path / "landing")], capture_output=True, text=True,
                         env={**environ, "DATABRICKS_RUNTIME_VERSION": "17.3"}, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "returned 0 False None"
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    failing = subprocess.run([sys.executable, "-c", script, str(a_file)], capture_output=True, text=True,
                             env={**environ, "DATABRICKS_RUNTIME_VERSION": "17.3"}, timeout=120)
    assert failing.returncode == 2  # raised as SystemExit(2): the task fails, its code kept
    assert "returned" not in failing.stdout
    assert failing.stderr == f"error: landing: expected a directory (the landing zone), found the file {a_file}\n"


REPO = Path(__file__).resolve().parents[1]  # the repository's own bundle: databricks.yml and bundles/


def _plan(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["bundle-plan", "--bundle", str(REPO), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _block(out: str, header: str) -> list[str]:
    """Return the lines of the plan's block that starts with ``header``."""
    lines = out.splitlines()
    start = lines.index(header)
    end = next((i for i in range(start + 1, len(lines)) if not lines[i]), len(lines))
    return lines[start + 1:end]


def test_bundle_plan_shows_what_a_development_deploy_creates_and_that_nothing_starts_by_itself(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = _plan(["--target", "dev"], capsys)
    assert (code, err) == (0, "")
    assert out.splitlines()[:4] == [
        "target dev (development), Databricks CLI >= 0.287.0",
        "  files      /Workspace/Users/<user>/.bundle/lakeshard/dev",
        "  deployed   by each developer, as themselves (<user>); development mode",
        "  runs as    the deployer (<user>)"]
    assert [line for line in out.splitlines() if line and not line.startswith(" ")][1:-1] == [
        "schema lakeshard: main.dev_<user>_lakeshard_dev", "volume landing: main.dev_<user>_lakeshard_dev.landing",
        "job ingest: [dev <user>] lakeshard-ingest", "job maintenance: [dev <user>] lakeshard-maintenance",
        "job generate_traffic: [dev <user>] lakeshard-generate-traffic",
        "pipeline downstream: [dev <user>] lakeshard-downstream"]
    assert _block(out, "volume landing: main.dev_<user>_lakeshard_dev.landing") == [
        "  storage    /Volumes/main/dev_<user>_lakeshard_dev/landing = external storage s3://lakeshard-dev/<user>/landing",
        "  owner      <user>",
        "  grants     none managed by the bundle (grants made elsewhere stay)",
        "  destroy    drops the volume; its files at s3://lakeshard-dev/<user>/landing stay"]
    ingest = _block(out, "job ingest: [dev <user>] lakeshard-ingest")
    assert ingest[2].startswith("  starts     file arrival on /Volumes/main/dev_<user>_lakeshard_dev/landing/: PAUSED")
    assert ingest[2].endswith("a run triggered meanwhile is queued")
    assert "schedule 0 10 * * * ? UTC: PAUSED" in _block(out, "job maintenance: [dev <user>] lakeshard-maintenance")[2]
    assert out.endswith("  the lakehouse at s3://lakeshard-dev/<user>/lakehouse: lakeshard's tables are external Delta "
                        "tables there (the jobs register the user-facing ones by location); a destroy drops their "
                        "names, never their files\n")


def test_bundle_plan_shows_who_deploys_production_what_it_grants_and_that_a_destroy_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = _plan(["--target", "prod"], capsys)
    assert (code, err) == (0, "")
    sp = "<lookup service_principal 'lakeshard-prod'>"
    assert f"  deployed   by {sp} only: root_path is its home folder (workspace admins aside)" in out
    assert _block(out, "schema lakeshard: main.lakeshard")[2:6] == [
        "  grants     the object's whole grant list (a deploy revokes any other):",
        f"             {sp}: USE_SCHEMA, SELECT, MODIFY, CREATE_TABLE, CREATE_MATERIALIZED_VIEW",
        "             lakeshard-producers: USE_SCHEMA",
        "             lakeshard-readers: USE_SCHEMA, SELECT"]
    for header in ("schema lakeshard: main.lakeshard", "volume landing: main.lakeshard.landing",
                   "pipeline downstream: lakeshard-downstream"):
        assert _block(out, header)[-1].startswith("  destroy    refused: lifecycle.prevent_destroy"), header
    assert "file arrival on /Volumes/main/lakeshard/landing/: UNPAUSED" in out
    assert "generate_traffic" not in out  # a dev-only job


def test_bundle_plan_without_a_target_shows_every_target(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _plan([], capsys)
    assert code == 0
    assert [line for line in out.splitlines() if line.startswith("target ")] == [
        "target dev (development), Databricks CLI >= 0.287.0", "target prod (production), Databricks CLI >= 0.287.0"]


def test_bundle_plan_of_an_unknown_target_is_one_line_naming_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _plan(["--target", "dev", "--target", "staging"], capsys)
    assert (code, out) == (2, "")  # nothing printed for dev either: every target is checked first
    assert err == f"error: {REPO}/databricks.yml: no target 'staging' (known targets: dev, prod)\n"


@pytest.mark.parametrize(("content", "expected"), [
    (None, "no databricks.yml here (run from the bundle's folder or pass --bundle)"),
    ("bundle: [name\n", "databricks.yml: not valid YAML: "),
    ("- a list\n", "databricks.yml: expected a mapping at the top level, found list"),
])
def test_bundle_plan_of_a_folder_without_a_readable_bundle_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, expected: str,
) -> None:
    if content is not None:
        (tmp_path / "databricks.yml").write_text(content)
    assert main(["bundle-plan", "--bundle", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: ") and expected in err and err.count("\n") == 1
