"""A local Spark Connect server for the tests, in its own process: ``python tests/connect_server.py PORT``.

It is a local Spark driver with lakeshard's settings (``local_spark_conf``), the Delta jars ``make env`` installed
with Delta's SQL extension and catalog (so the native adapter runs on Delta's engine behind Connect: its public
writer and SQL need nothing else on the server), and the Spark Connect plugin pyspark ships, listening on
``127.0.0.1:PORT``. It prints ``ready`` once it takes connections and stops when
its standard input closes (the fixture that started it ends, or dies).
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

from lakeshard.config import load_config
from lakeshard.runtime import delta_jars, find_java, local_spark_conf


def main(port: int) -> None:
    """Serve Spark Connect on ``port`` until standard input closes."""
    find_java()
    cfg = load_config(overrides={"spark": {"master": "local[2]", "shuffle_partitions": 2, "driver_memory": "1g",
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
    main(int(sys.argv[1]))
