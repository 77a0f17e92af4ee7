"""Writes notebooks/11_buckets_and_versions.ipynb (run: .venv/bin/python scripts/build_notebook_buckets.py)."""

from pathlib import Path

import nbformat as nbf

OUT = Path(__file__).resolve().parent.parent / "notebooks" / "11_buckets_and_versions.ipynb"

nb = nbf.v4.new_notebook()
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nb.cells = [
    nbf.v4.new_markdown_cell("""# 11 — Buckets closing, late events, and a chunk's version history

Ingests a few hours of synthetic traffic (router + shard writers, exactly once), then walks the
**completionist** forward in 15-minute steps: each `(tenant, hour)` bucket closes once it is quiet and the
backlog is past its hour's end plus a grace, after an integrity check that records its checksum. Then shows:

1. the open/closed timeline of every bucket;
2. where late events of a closed hour go (the tenant's open bucket, `late = true`, true `ts` kept);
3. a chunk compacted under its replace lock, and its history printed like `git log` — while the closed
   bucket's checksum stays the same.

The same steps run on a lakehouse with `lakeshard buckets close|closed` and `lakeshard versions log|diff|show`.

**Parameters** (next cell; widgets on Databricks):

| name | meaning |
| --- | --- |
| `events` | unique synthetic events |
| `tenants` | tenants (Zipf-skewed volumes) |
| `hours` | hours of event time, starting one hour ago |
| `seed` | random seed |
| `out` | directory for landing, lakehouse and the figure |
"""),
    nbf.v4.new_code_cell("""# Parameters (Databricks widgets when run there)
import tempfile

from lakeshard.runtime.params import notebook_params

p = notebook_params({"events": 600, "tenants": 3, "hours": 3.0, "seed": 3,
                     "out": tempfile.mkdtemp(prefix="lakeshard-buckets-")})"""),
    nbf.v4.new_code_cell("""from datetime import UTC, datetime, timedelta

from lakeshard.config import load_config
from lakeshard.dedupe.writer import ShardWriter
from lakeshard.lake import open_store
from lakeshard.routing.router import Router
from lakeshard.runtime import get_spark
from lakeshard.synth import SynthSpec, generate_landing

start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
cfg = load_config(overrides={"lakehouse": f"{p['out']}/lakehouse", "landing": f"{p['out']}/landing",
                             "routing": {"total_shards": 2, "default_shard_count": 1}})
manifest = generate_landing(cfg.landing, SynthSpec(events=p["events"], tenants=p["tenants"], hours=p["hours"],
                                                   seed=p["seed"], start=start, gzip_rate=0.0))
spark = get_spark(cfg)
store = open_store(spark, cfg)
routed = Router(spark, store, cfg).run()
written = ShardWriter(spark, store, cfg, [0, 1]).run()
print(f"{manifest.unique_events} unique events from {start:%H:%M} UTC on; routed {sum(r.routed for r in routed)}, "
      f"wrote {sum(w.written for w in written)}")"""),
    nbf.v4.new_code_cell("""from lakeshard.buckets import Completionist
from lakeshard.report import format_table

quiet, grace = timedelta(minutes=10), timedelta(minutes=15)
clock = {"now": datetime.now(UTC) + quiet}
completionist = Completionist(spark, store, cfg, quiet=quiet, grace=grace, clock=lambda: clock["now"])
steps = []
end = start + timedelta(hours=p["hours"]) + grace + timedelta(minutes=30)
while clock["now"] <= end:
    report = completionist.run()
    still_open = sum(1 for d in report.decisions if not d.close)
    steps.append([f"{clock['now']:%H:%M}", len(report.closed), still_open])
    clock["now"] += timedelta(minutes=15)
print(format_table(["completionist clock", "closed this run", "still open"], steps))
assert completionist.verify() == []  # every closed bucket still has the checksum it closed with"""),
    nbf.v4.new_code_cell("""from pathlib import Path

from IPython.display import Image

from lakeshard.buckets.plots import plot_bucket_timeline

states = list(completionist.states().values())
Image(filename=str(plot_bucket_timeline(states, Path(p["out"]) / "buckets.png", until=clock["now"])))"""),
    nbf.v4.new_code_cell("""from pyspark.sql import functions as F

from lakeshard.buckets import assign_buckets

closed = completionist.closed()
tenant, hour = sorted(closed)[0]
# Three events of a closed hour arrive late (re-sent with new ids): the writer's bucketing sends them on.
late = (store.read(cfg.table_uri("events")).where((F.col("tenant_id") == tenant) & (F.col("hour") == hour))
        .select("tenant_id", F.concat(F.lit("late-"), "event_id").alias("event_id"), "ts").limit(3))
assigned = assign_buckets(late, closed, now=clock["now"]).orderBy("ts").collect()
print(format_table(["tenant", "event", "ts (true event time)", "bucket written to", "late"],
                   [[r.tenant_id, r.event_id, f"{r.ts:%Y-%m-%d %H:%M:%S}", r.hour, r.late] for r in assigned]))
assert all(r.late and r.hour != hour for r in assigned)"""),
    nbf.v4.new_code_cell("""from lakeshard.versions import Chunk, ChunkLocks, ChunkVersions, read_chunk, replace_chunk
from lakeshard.versions.cli import format_log

files = store.files(cfg.table_uri("events"))
chunk = max({Chunk(f.partition_values["tenant_id"], f.partition_values["hour"]) for f in files},
            key=lambda c: sum(1 for f in files if c.holds(f)))
events_uri = cfg.table_uri("events")
locks = ChunkLocks(store, cfg.table_uri("chunk_locks"), holder="notebook-compaction")
with locks.lock(chunk.tenant_id, chunk.hour) as lease:  # compaction: same rows, one file
    read_at = store.version(events_uri)
    merged = read_chunk(spark, store, events_uri, chunk, read_at).coalesce(1)
    replace_chunk(store, events_uri, chunk, merged, lease=lease, read_version=read_at, data_change=False)
print("\\n".join(format_log(ChunkVersions(store, events_uri, chunk).log())))
assert completionist.verify() == []  # compaction rearranged a closed bucket's files, not its rows"""),
]
for i, cell in enumerate(nb.cells):  # stable ids: rebuilding an unchanged notebook changes no byte
    cell["id"] = f"cell-{i:02d}"
nbf.write(nb, OUT)
print(f"wrote {OUT}")
