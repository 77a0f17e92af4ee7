"""A Spark Connect server that stalls or dies in the middle of ``lakeshard ingest``'s write: the command ends with
one clear line within a bounded time (never a hang), and the next run finishes the batch exactly once.

The test starts a Connect server of its own (``scripts/connect_server.py``, Delta's engine, the default 1 GiB driver
heap), runs ``lakeshard ingest`` against it with requests of 1 MiB (so a batch is staged in several chunks), and
once the first chunk is on disk stops the server (SIGSTOP: it takes connections but answers nothing) or kills it
(SIGKILL). Before :mod:`lakeshard.lake.native.connect` the client waited forever on the first and retried the second
for at least 10 minutes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.connect import local_connect_server
from lakeshard.lake.native.connect import STAGE_PREFIX

TIMEOUT_S = 20  # spark.connect_timeout_seconds for the stalled server
# What a report may take past the fault: the timeout, the interrupt's wait, the liveness check's own wait, polling.
BOUND_S = TIMEOUT_S + 45


@pytest.fixture
def own_server() -> Iterator[tuple[str, int]]:
    """Return (sc:// URL, process group) of a Connect server started for this test alone, killed at the end."""
    with local_connect_server(own_session=True) as server:
        try:
            yield server.url, os.getpgid(server.pid)
        finally:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.killpg(server.pid, sig)
                except ProcessLookupError:
                    pass


def _ingest(remote: str, lakehouse: Path, landing: Path, **env: str) -> subprocess.Popen[str]:
    environment = {**os.environ, "LAKESHARD_SPARK_REMOTE": remote, "LAKESHARD_SPARK_ADAPTER": "native",
                   "LAKESHARD_LAKEHOUSE": str(lakehouse), "LAKESHARD_LANDING": str(landing), **env}
    return subprocess.Popen([sys.executable, "-m", "lakeshard.app.cli", "ingest"], env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _fault_when_staging(client: subprocess.Popen[str], lakehouse: Path, group: int, sig: int) -> float:
    """Send ``sig`` to the server's process group once a staged chunk of ``events`` is on disk; return when."""
    deadline = time.monotonic() + 300
    before = set((lakehouse / "events").glob(f"{STAGE_PREFIX}*"))  # an earlier run's
    while not any(d not in before and any(d.glob("part-*")) for d in (lakehouse / "events").glob(f"{STAGE_PREFIX}*")):
        assert client.poll() is None, f"the ingest ended before it staged anything: {client.communicate()}"
        assert time.monotonic() < deadline, "nothing was staged within 300 s"
        time.sleep(0.1)
    os.killpg(group, sig)
    return time.monotonic()


@pytest.mark.slow
@pytest.mark.delta_jvm
def test_a_server_that_stalls_or_dies_mid_write_is_reported_in_bounded_time_and_the_batch_finished_once(
    own_server: tuple[str, int], connect_server: str, tmp_path: Path
) -> None:
    from lakeshard.synth import SynthSpec, generate_landing

    remote, group = own_server
    landing, lakehouse = tmp_path / "landing", tmp_path / "lakehouse"
    generate_landing(landing, SynthSpec(events=12_000, tenants=6, hours=0.5, seed=29, retry_rate=0.05,
                                        redelivered_files=0.1))
    outcomes = []
    for sig, expected in ((signal.SIGSTOP, f"did not finish within {TIMEOUT_S} s"),
                          (signal.SIGKILL, "stopped answering")):
        if sig == signal.SIGKILL:
            os.killpg(group, signal.SIGCONT)
        client = _ingest(remote, lakehouse, landing, LAKESHARD_SPARK_CONNECT_REQUEST_MB="1",
                         LAKESHARD_SPARK_CONNECT_TIMEOUT_SECONDS=str(TIMEOUT_S))
        faulted = _fault_when_staging(client, lakehouse, group, sig)
        try:
            _, err = client.communicate(timeout=BOUND_S + 60)
        except subprocess.TimeoutExpired:
            client.kill()
            pytest.fail(f"lakeshard ingest still waited {BOUND_S + 60} s after the server got {sig.name}")
        outcomes.append((sig.name, client.returncode, time.monotonic() - faulted, err))
        assert client.returncode == 2, outcomes
        assert expected in err and "Traceback" not in err, outcomes
        assert time.monotonic() - faulted < BOUND_S, outcomes

    # The server is gone; the shared one finishes the batch: each event once.
    done = _ingest(connect_server, lakehouse, landing)
    _, err = done.communicate(timeout=900)
    assert done.returncode == 0, err[-3000:]
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    events = DeltaTable(str(lakehouse / "events")).to_pyarrow_table(columns=["tenant_id", "event_id"])
    truth = pq.read_table(landing / "_truth" / "events.parquet", columns=["tenant_id", "event_id"])
    keys = list(zip(events["tenant_id"].to_pylist(), events["event_id"].to_pylist(), strict=True))
    assert len(keys) == len(set(keys)) == truth.num_rows, "an event lost or written twice"
    assert set(keys) == set(zip(truth["tenant_id"].to_pylist(), truth["event_id"].to_pylist(), strict=True))


@pytest.mark.parametrize("command", [["ingest"], ["route"], ["fsck"]])
def test_a_command_started_while_no_server_listens_ends_in_bounded_time_naming_the_address(
    command: list[str], tmp_path: Path
) -> None:
    # What a shard writer met in the fault campaign when the server it shared had been killed: a client started
    # then waited on pyspark's retries (at least 10 minutes) before saying anything.
    from bench.connect import free_port

    address = f"127.0.0.1:{free_port()}"
    remote = f"sc://{address}/;token=dapi-not-to-be-printed"
    env = {**os.environ, "LAKESHARD_SPARK_REMOTE": remote, "LAKESHARD_SPARK_ADAPTER": "native",
           "LAKESHARD_LAKEHOUSE": str(tmp_path / "lakehouse"), "LAKESHARD_LANDING": str(tmp_path / "landing")}
    (tmp_path / "landing").mkdir()
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "lakeshard.app.cli", *command], env=env, capture_output=True,
                              text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"lakeshard {command[0]} still waited 120 s on a Spark Connect address nothing listens on")
    assert done.returncode == 2, done.stderr[-2000:]
    assert address in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "dapi-not-to-be-printed" not in done.stderr + done.stdout
    assert time.monotonic() - started < 60


@pytest.mark.slow
@pytest.mark.delta_jvm
def test_a_request_after_the_server_died_fails_within_about_a_minute_saying_so(own_server: tuple[str, int]) -> None:
    # A request outside a bounded write (a read, a schema check, the session's settings) to a server killed between
    # two requests: pyspark's own policy retries it for at least ten minutes (the campaign's server_kill met a
    # client waiting so); lakeshard's sessions give up after about a minute, with one line saying why, and later
    # requests of the process (its failure event, the session's stop) fail at once.
    remote, group = own_server
    code = ("import sys, time\n"
            "from lakeshard.config import load_config\n"
            "from lakeshard.runtime import connect_server_gone, get_spark\n"
            "spark = get_spark(load_config(overrides={'spark': {'remote': sys.argv[1]}}, env={}))\n"
            "print(spark.range(3).count(), flush=True)\n"
            "sys.stdin.readline()\n"
            "started = time.monotonic()\n"
            "try:\n"
            "    spark.range(3).count()\n"
            "except Exception as exc:\n"
            "    first = round(time.monotonic() - started)\n"
            "    started = time.monotonic()\n"
            "    try:\n"
            "        spark.range(3).count()\n"
            "    except Exception:\n"
            "        print(first, round(time.monotonic() - started), connect_server_gone(exc), flush=True)\n")
    client = subprocess.Popen([sys.executable, "-c", code, remote], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    assert client.stdout is not None and client.stdin is not None
    assert client.stdout.readline().strip() == "3", client.communicate()[1][-2000:]
    os.killpg(group, signal.SIGKILL)
    client.stdin.write("\n")
    client.stdin.flush()
    try:
        out, err = client.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        client.kill()
        pytest.fail("a request to the killed server still waited 300 s")
    first, again, line = out.strip().split(" ", 2)
    assert int(first) < 150 and line.startswith("the Spark Connect server stopped answering"), (out, err[-2000:])
    assert int(again) < 10, out  # the server is gone for the process: its next request does not wait again
    assert "Traceback" not in err and "RETRIES_EXCEEDED" not in err, err[-2000:]
