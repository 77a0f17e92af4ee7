"""Create Delta tables ``argv[1]/t000``, ``t001``, ... (``argv[2]`` of them, schema ``argv[3]`` as Spark's JSON,
partitioned by the comma-separated ``argv[4]``) on Delta's own engine, one after another, printing ``creating N``
before and ``created N`` after each: the test SIGKILLs this process inside one of them."""

import dataclasses
import json
import sys

from pyspark.sql.types import StructType

from lakeshard.config import load_config
from lakeshard.lake import open_store
from lakeshard.runtime import get_spark

root, count, schema, partition_by = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].split(",")
cfg = load_config(overrides={"spark": {"master": "local[1]", "shuffle_partitions": 1, "driver_memory": "1g"}}, env={})
cfg = dataclasses.replace(cfg, spark=dataclasses.replace(cfg.spark, adapter="native"))
store = open_store(get_spark(cfg), cfg)
for i in range(count):
    print(f"creating {i}", flush=True)
    store.create(f"{root}/t{i:03d}", StructType.fromJson(json.loads(schema)), partition_by=partition_by)
    print(f"created {i}", flush=True)
