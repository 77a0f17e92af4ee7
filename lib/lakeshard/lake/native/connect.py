"""Requests to a Spark Connect server bounded in size and in time: rows handed over in chunks, no endless wait.

Under Spark Connect (serverless, databricks-connect, a standard-access cluster) the native adapter cannot commit
files this process writes, so Arrow rows travel to the server. Sent as one ``createDataFrame``, a batch becomes
one local relation the server holds whole on its heap, and again as serialised tasks: with Spark's default 1 GiB
driver heap, a fused batch of 200,000 events (90 MB of Arrow) ran the server out of memory
(``OutOfMemoryError`` in its scheduler), and the client then waited on that write forever. Two rules here:

- **Bounded requests** (:func:`server_frame`): a table of at most ``request_bytes`` of Arrow goes over as one
  DataFrame, as before. A bigger one is sent in chunks of at most ``request_bytes``, each written by the server as
  Parquet into a staging folder ``w-stage-<id>`` inside the target table's folder, and the rows to commit are then
  a Parquet read of that folder: whatever the batch's size, no request holds more than one chunk on the server's
  heap, and the commit is still one Delta commit of all rows. Staged files are in no commit, so no reader sees
  them; Delta's ``VACUUM`` (lakeshard's hourly maintenance) deletes them once past the table's retention, as it
  deletes any write that never committed (without py4j a client has no call that deletes files).
- **Bounded waits** (:func:`bounded`): each request runs tagged in a thread of its own while the caller watches
  it. A server that no longer takes connections (the process died) is reported within seconds, and a request
  still running after ``timeout_s`` is interrupted (``interruptTag``) and reported; the session's channel is then
  closed, so nothing else in the process waits on that server. Without this the Connect client retries a dead
  server for at least 10 minutes and waits on a stalled one forever. Both raise
  :class:`~lakeshard.errors.ServerUnresponsive`, which names the server, what was being done and the setting; a
  Delta commit is all or nothing, so the write is either committed whole or not at all, and the next run finishes
  the batch exactly once (its app transaction says which).

On a classic session (py4j) neither applies: the rows are written by this process and committed as files.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import pyarrow as pa

from lakeshard.errors import ServerUnresponsive
from lakeshard.runtime import arrow_dataframe, is_spark_connect

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["STAGE_PREFIX", "ConnectLimits", "bounded", "chunks", "server_frame"]

T = TypeVar("T")

STAGE_PREFIX = "w-stage-"  # a write folder (lakeshard.lake.base.WRITE_PREFIX): vacuum deletes what never committed
_LIVENESS_EVERY_S = 5.0  # how often a waiting caller checks that the server still takes connections
_LIVENESS_WAIT_S = 10.0  # how long a connection attempt may take before the server counts as gone
_INTERRUPT_WAIT_S = 10.0  # how long an interrupt of a request past its time may take before the caller moves on


@dataclass(frozen=True)
class ConnectLimits:
    """The bounds of one request to a Spark Connect server (``spark.connect_request_mb``,
    ``spark.connect_timeout_seconds``)."""

    request_bytes: int = 32 * 1024 * 1024
    timeout_s: float = 900.0


def chunks(rows: pa.Table, limit: int) -> Iterator[pa.Table]:
    """Yield ``rows`` in order as slices of at most about ``limit`` bytes of Arrow (at least one row each)."""
    if rows.num_rows == 0:
        return
    per_row = max(1, rows.nbytes // rows.num_rows)
    step = max(1, limit // per_row)
    for start in range(0, rows.num_rows, step):
        yield rows.slice(start, step)


def server_frame(spark: SparkSession, rows: pa.Table, table_uri: str, limits: ConnectLimits) -> DataFrame:
    """Return ``rows`` as a DataFrame the server can write into the table at ``table_uri``, every request bounded.

    At most ``limits.request_bytes`` of Arrow: one ``createDataFrame``. More: staged in chunks under
    ``<table_uri>/w-stage-<id>/`` (see the module's docstring) and read back with the rows' own schema.

    Raises:
        ServerUnresponsive: the server stopped answering or a chunk's write outlasted ``limits.timeout_s``.
    """
    if not is_spark_connect(spark):
        return arrow_dataframe(spark, rows)
    if rows.nbytes <= limits.request_bytes:
        return bounded(spark, lambda: arrow_dataframe(spark, rows), limits=limits,
                       what=f"handing {rows.num_rows:,} rows for {table_uri} to the server")
    from pyspark.sql.pandas.types import from_arrow_schema

    stage = f"{table_uri.rstrip('/')}/{STAGE_PREFIX}{uuid.uuid4().hex}"
    for n, chunk in enumerate(chunks(rows, limits.request_bytes)):
        def stage_chunk(chunk: pa.Table = chunk) -> None:
            arrow_dataframe(spark, chunk).write.mode("append").parquet(stage)

        bounded(spark, stage_chunk, what=f"staging chunk {n + 1} of a {rows.num_rows:,}-row write into {table_uri}",
                limits=limits)
    return spark.read.schema(from_arrow_schema(rows.schema)).parquet(stage)


def bounded(spark: SparkSession, action: Callable[[], T], *, what: str, limits: ConnectLimits) -> T:
    """Return ``action()``, run against a Spark Connect server that must keep answering and finish in time.

    On a classic session this is ``action()``. Under Spark Connect the action runs in a thread of its own, its
    requests tagged; this thread checks every few seconds that the server still takes connections, and after
    ``limits.timeout_s`` interrupts the tagged requests. Either way it raises at once, leaving the abandoned
    thread (a daemon) to the client's own retries.

    Raises:
        ServerUnresponsive: the server stopped taking connections, or the action outlasted ``limits.timeout_s``.
    """
    if not is_spark_connect(spark):
        return action()
    tag = f"lakeshard-{uuid.uuid4().hex}"
    outcome: dict[str, object] = {}

    def run() -> None:
        spark.addTag(tag)
        try:
            outcome["value"] = action()
        except BaseException as exc:  # handed to the waiting caller, raised there
            outcome["error"] = exc
        finally:
            spark.removeTag(tag)

    worker = threading.Thread(target=run, name=f"lakeshard-connect-{tag[-8:]}", daemon=True)
    started = time.monotonic()
    worker.start()
    while True:
        worker.join(_LIVENESS_EVERY_S)
        if not worker.is_alive():
            break
        waited = time.monotonic() - started
        if not _takes_connections(spark):
            _abandon(spark, None)  # nobody to ask to stop
            raise ServerUnresponsive(f"the Spark Connect server {_address(spark)} stopped answering (no connection "
                                     f"within {_LIVENESS_WAIT_S:.0f} s) after {waited:.0f} s of {what}; a Delta commit "
                                     "is all or nothing, so this write is committed whole or not at all: run again "
                                     "once the server is back and the batch is finished exactly once")
        if waited > limits.timeout_s:
            _abandon(spark, tag)
            raise ServerUnresponsive(f"{what} did not finish within {limits.timeout_s:.0f} s on the Spark Connect "
                                     f"server {_address(spark)} (interrupted; spark.connect_timeout_seconds sets "
                                     "the limit, and a server whose driver ran out of memory stalls like this: see "
                                     "its log); a Delta commit is all or nothing, so this write is committed whole "
                                     "or not at all: run again and the batch is finished exactly once")
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]


def _takes_connections(spark: SparkSession) -> bool:
    """Return whether the session's gRPC channel is, or can get, connected to the server (True if unknowable)."""
    channel = getattr(getattr(spark, "client", None), "_channel", None)
    if channel is None:
        return True
    import grpc  # type: ignore[import-untyped]

    try:
        grpc.channel_ready_future(channel).result(timeout=_LIVENESS_WAIT_S)
    except grpc.FutureTimeoutError:
        return False
    return True


def _abandon(spark: SparkSession, tag: str | None) -> None:
    """Ask the server to stop the requests tagged ``tag`` (waiting a few seconds at most for its answer), then
    close the session's channel: every later call on the session fails at once instead of waiting on the same
    server (the run's failure event, the session's stop), so the process reports and ends."""
    if tag is not None:
        asker = threading.Thread(target=lambda: _quietly(lambda: spark.interruptTag(tag)), daemon=True)
        asker.start()
        asker.join(_INTERRUPT_WAIT_S)
    client = getattr(spark, "client", None)
    channel = getattr(client, "_channel", None)
    if channel is not None:
        _quietly(channel.close)
        client._closed = True  # type: ignore[union-attr]  # pyspark's own flag: no release of the session either


def _quietly(call: Callable[[], object]) -> None:
    try:
        call()
    except Exception:  # a server that cannot be told has been reported already
        pass


def _address(spark: SparkSession) -> str:
    builder = getattr(getattr(spark, "client", None), "_builder", None)
    return str(getattr(builder, "endpoint", None) or "(address unknown)")
