"""A demo whose ingest flow fails says which flow failed and why, instead of failing in its checks."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakeshard.config import LakeshardConfig
from lakeshard.lake import TableStore


def test_a_failed_ingest_flow_is_named_with_its_error_and_the_checks_do_not_run(
        spark: SparkSession, store: TableStore, test_config: LakeshardConfig, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from lakeshard.app.demo import run_demo
    from lakeshard.dedupe.writer import ShardWriter
    from lakeshard.pipelines import PipelineError
    from lakeshard.synth import SynthSpec

    def broken(self: ShardWriter, **_: object) -> list[object]:
        raise OSError("disk full (injected)")

    monkeypatch.setattr(ShardWriter, "run", broken)
    cfg = dataclasses.replace(test_config, lakehouse=str(tmp_path / "lakehouse"), landing=str(tmp_path / "landing"))
    with pytest.raises(PipelineError) as failed:
        run_demo(spark, store, cfg, SynthSpec(events=120, tenants=4, hours=0.5, seed=5), out=tmp_path / "out",
                 say=lambda _: None, progress=False)

    message = str(failed.value)
    assert "checks did not run" in message and "disk full (injected)" in message, message
    assert [line.split()[:2] for line in message.splitlines() if line.startswith("ingest")] == [["ingest", "failed"]]
