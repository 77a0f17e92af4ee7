"""Spark Connect is a runtime like any other: the store contract suite and the small demo pass over a Connect session.

They run in a pytest subprocess whose ``spark`` fixture is a Spark Connect session to the test session's local
Connect server (``connect_server`` in ``tests/conftest.py``): classic and Connect sessions cannot share one Python
process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lakeshard.config import load_config
from lakeshard.errors import ConfigError
from lakeshard.runtime import RuntimeKind, describe_mode, detect_runtime, is_spark_connect, runtime_name

TESTS = Path(__file__).resolve().parents[1]
# Under Spark Connect: the TableStore contract (the embedded adapter, and the native one on the server's Delta
# engine), the native adapter's table-feature guards, the demo with every batch through Spark and the demo on
# Delta's engine, doctor, the pruning data source (format("lakeshard") registered over Connect, planned and read on
# the server), compaction's whole-bucket swap on Delta's public writer losing to an append (the in-write check),
# the hourly upkeep of bookkeeping tables on Delta's engine (rewrite and checkpoint without py4j), and the closing
# fence failing a public append whose transaction overlaps it.
SWAP = TESTS / "compaction" / "test_native_swap.py"
GUARD = TESTS / "buckets" / "test_guard.py"
CONNECT_SUITE = [TESTS / "lake" / "test_store_contract.py", TESTS / "lake" / "test_native_engine.py",
                 TESTS / "runtime" / "connect_suite.py", TESTS / "query" / "test_datasource.py",
                 f"{SWAP}::test_an_append_landing_after_lakeshards_log_check_fails_the_swap_which_retries",
                 f"{SWAP}::test_the_in_write_check_refuses_a_bucket_that_gained_a_file",
                 TESTS / "maintenance" / "test_native_bookkeeping.py",
                 f"{GUARD}::test_a_fence_fails_a_public_append_whose_transaction_overlaps_it"]


# The suite takes about 5 minutes beside the other test worker on a two-core machine; on a slower CI machine it once
# ran past an old limit of 1,200 s. The limit only stops a hung subprocess.
TIMEOUT = 2400


@pytest.mark.slow
def test_the_store_contract_and_the_demo_pass_under_spark_connect(connect_server: str, tmp_path: Path) -> None:
    env = {**os.environ, "LAKESHARD_TEST_SPARK_REMOTE": connect_server}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *map(str, CONNECT_SUITE), "-q", "-p", "no:cacheprovider",
         "--basetemp", str(tmp_path / "connect")],
        cwd=TESTS.parent, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    tail = run.stdout[-6000:] + run.stderr[-2000:]
    assert run.returncode == 0, tail
    assert " passed" in run.stdout.splitlines()[-1] and "failed" not in run.stdout.splitlines()[-1], tail


@pytest.mark.parametrize(("remote", "mode"), [
    ("local[2]", "Spark Connect to a local server (Spark local[2] started in this process, reached over Spark "
                 "Connect on port 15002)"),
    ("sc://spark.example:15002", "Spark Connect to sc://spark.example:15002 (Spark runs on that server)"),
])
def test_spark_remote_selects_the_spark_connect_runtime(remote: str, mode: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    cfg = load_config(env={"LAKESHARD_SPARK_REMOTE": remote})
    assert cfg.spark.remote == remote
    assert detect_runtime(cfg) is RuntimeKind.SPARK_CONNECT and describe_mode(cfg) == mode


def test_a_malformed_spark_remote_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"spark\.remote"):
        load_config(overrides={"spark": {"remote": "spark://master:7077"}}, env={})


def test_the_classic_session_is_named_classic(spark: object) -> None:
    assert not is_spark_connect(spark) and runtime_name(spark) == "classic"
