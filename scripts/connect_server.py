"""A local Spark Connect server with Delta's engine in its own process: ``scripts/connect_server.py PORT [HEAP]``.

It is a local Spark driver with lakeshard's settings (``local_spark_conf``), the Delta jars ``make env`` installed
with Delta's SQL extension and catalog (so the native adapter runs on Delta's engine behind Connect: its public
writer and SQL need nothing else on the server), and the Spark Connect plugin pyspark ships, listening on
``127.0.0.1:PORT``, its driver's heap ``HEAP`` (default ``1g``, Spark's own default). It prints ``ready`` once it
takes connections and stops when its standard input closes (the test fixture or benchmark that started it ends, or
dies). The tests (``connect_server`` in ``tests/conftest.py``), ``make matrix``'s laptop run and the benchmarks
under Connect (``bench/bench_ingest.py``) start it.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from lakeshard.config import load_config
from lakeshard.runtime import delta_jars, find_java, local_spark_conf


def main(port: int, heap: str = "1g") -> None:
    """Serve Spark Connect on ``port`` with a driver heap of ``heap`` until standard input closes."""
    find_java()
    # Python code the server runs for its clients (a streaming foreachBatch function, a UDF) runs in a worker started
    # with this interpreter, which has pyspark: Spark's default `python3` may not.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    cfg = load_config(overrides={"spark": {"master": "local[2]", "shuffle_partitions": 2, "driver_memory": heap,
                                           "app_name": "lakeshard-tests-connect", "jars": delta_jars()}}, env={})
    conf = {**local_spark_conf(cfg),
            "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(port)}
    spark = SparkSession.builder.master(cfg.spark.master).config(map=conf).getOrCreate()  # type: ignore[arg-type]
    print("ready", flush=True)
    sys.stdin.read()
    spark.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]), *sys.argv[2:3])
