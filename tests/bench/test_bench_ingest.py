"""Smoke test of bench/bench_ingest.py: each case in its own process, its output checked against the zone's truth."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import bench_ingest as bench


def _run(tmp_path: Path, cases: str, *more: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    args = bench.parser().parse_args(["--events", "1500", "--tenants", "4", "--cases", cases,
                                      "--files-per-trigger", "61", "--settle", "0", *more])
    doc = bench.run(args, tmp_path, say=lambda line: None)
    return doc, {c["case"]: c for c in doc["cases"]}


@pytest.mark.slow
def test_lakeshard_is_exact_and_the_floors_write_every_duplicate(tmp_path: Path) -> None:
    doc, by = _run(tmp_path, "cli,one-table,one-table-partitioned,machine,three-tables", "--repeat", "2")
    # lakeshard and its floors ran twice each, every run checked; three-tables once
    assert [len(by[c]["wall_runs_s"]) for c in ("cli", "one-table", "one-table-partitioned", "machine")] == [2] * 4
    assert "wall_runs_s" not in by["three-tables"]

    cli = by["cli"]
    assert cli["rows_out"] == doc["unique_events"] == 1500, cli
    assert cli["duplicates_let_through"] == cli["events_dropped"] == cli["extra_events"] == 0, cli
    # No dedupe: every duplicate record of the zone lands.
    for case in ("one-table", "one-table-partitioned", "machine", "three-tables"):
        assert by[case]["duplicates_let_through"] == doc["duplicates"] > 0, by[case]
        assert by[case]["events_dropped"] == by[case]["extra_events"] == 0, by[case]
    assert all(c["peak_rss_mib"] > 0 and c["files_out"] > 0 for c in by.values()), by
    # One batch at this size: lakeshard's events and the partitioned floor both write a file per (tenant, hour).
    assert by["one-table-partitioned"]["files_out"] == cli["files_out"] > by["one-table"]["files_out"], by
    assert {"cli_over_one_table", "cli_over_one_table_paired", "cli_over_machine", "cli_over_partitioned",
            "cli_cpu_over_three_tables"} <= set(doc["ratios"])


def test_the_round_by_round_ratio_holds_through_a_drift_of_the_machines_speed() -> None:
    """Five rounds on a machine whose speed drifts from round to round (both runs of a round at one speed), one
    lakeshard run stalled besides: the round-by-round ratio stays lakeshard's true 1.4x, where the ratio of the two
    medians, taken from different rounds, does not."""
    speed = [1.0, 1.6, 0.8, 1.3, 1.1]
    floor = [5 * s for s in speed]
    cli = [7 * s for s in speed]
    cli[2] *= 1.5  # a stall during one lakeshard run only

    def case(name: str, runs: list[float]) -> dict[str, Any]:
        median = sorted(runs)[len(runs) // 2]
        return {"case": name, "wall_s": median, "process_wall_s": median, "cpu_s": median, "wall_runs_s": runs}

    ratios = bench.ratios([case("cli", cli), case("one-table", floor)])
    assert ratios["cli_over_one_table_paired"] == 1.4
    assert ratios["cli_over_one_table"] > 1.5
    # One run of each: no rounds to pair.
    single = bench.ratios([{**case("cli", cli[:1]), "wall_runs_s": None}, case("one-table", floor[:1])])
    assert "cli_over_one_table_paired" not in single and single["cli_over_one_table"] == 1.4


@pytest.mark.slow
@pytest.mark.delta_jvm
@pytest.mark.usefixtures("delta_jars_installed")
def test_lakeshard_and_the_delta_peers_write_each_event_once_classic_and_under_connect(tmp_path: Path) -> None:
    """lakeshard on Delta's engine and the Delta peers, on a classic session and under Spark Connect (one local
    server for the Connect cases), each checked against the zone's truth. The Delta sink's stream under Connect is
    left out (the same code as on the classic session; `foreachBatch` is what runs differently there)."""
    doc, by = _run(tmp_path, "cli,cli-native,stream-delta,merge,cli-connect,merge-connect")

    for case in ("cli-native", "cli-connect"):
        c = by[case]
        assert c["rows_out"] == doc["unique_events"] == 1500, c
        assert c["duplicates_let_through"] == c["events_dropped"] == c["extra_events"] == 0, c
    for case in ("stream-delta", "merge", "merge-connect"):
        c = by[case]
        # A 6 h watermark keeps every late event of the zone; dedupe on the event key lets no duplicate through.
        assert c["duplicates_let_through"] == c["events_dropped"] == 0, c
        assert c["rows_out"] == doc["unique_events"] + c["extra_events"], c
        assert c["files_out"] > 0 and c["peak_rss_mib"] > 0, c
    # 122 landing files at 61 per trigger: two micro-batches, counted from the checkpoint on both clients.
    assert by["merge"]["micro_batches"] == by["merge-connect"]["micro_batches"] == 2, by
    # Under Connect the server's JVM is counted with the client: more memory than the embedded run's process.
    assert by["cli-connect"]["peak_rss_mib"] > by["cli"]["peak_rss_mib"], by
    ratios = doc["ratios"]
    assert {"cli-native_over_cli", "cli-connect_over_cli", "best_peer_over_cli-native",
            "best_peer_over_cli-connect"} <= set(ratios), ratios
    assert ratios["best_peer_of_cli-connect"] == "merge-connect", ratios
