"""Run one compaction (streaming-merge engine, no Spark needed) of the table given as argv[1].

The test kills this process at chosen moments (SIGKILL) and checks the table afterwards.
"""

import sys

from lakeshard.compaction import CompactionSettings, Compactor, LocalityPlanner, SizeTieredPlanner
from lakeshard.lake.embedded import EmbeddedTableStore

settings = CompactionSettings(
    size_tiered=SizeTieredPlanner(min_files=4, target_rows=150, base_rows=16, growth=4, settle_seconds=0,
                                  grace_seconds=0),
    locality=LocalityPlanner(target_rows=150, growth=2, max_level=3), max_regex_chars=200,
)
# The streaming merge and the delta-rs commit never touch Spark, so no session is started here.
report = Compactor(EmbeddedTableStore(None), sys.argv[1], settings=settings).run(apply=True)  # no Spark: driver-side
print(f"rounds={len(report.rounds)}", flush=True)
