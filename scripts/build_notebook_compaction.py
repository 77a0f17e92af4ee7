"""Writes notebooks/10_compact_and_prune.ipynb from its cells here.

Run: .venv/bin/python scripts/build_notebook_compaction.py
"""

from pathlib import Path

import nbformat as nbf

OUT = Path(__file__).resolve().parent.parent / "notebooks" / "10_compact_and_prune.ipynb"

nb = nbf.v4.new_notebook()
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nb.cells = [
    nbf.v4.new_markdown_cell("""# 10 — Compact and prune: size-tiered + locality compaction, regex pruning

Writes a small-file `events` table (each bucket `(tenant, hour)` gets many small sorted files, as shard
writers flush them), plans and runs **compaction** (lazy size-tiered merges, then locality levels; each
round one atomic `dataChange=false` swap that also stores every new file's pruning regexes in the Delta
log), then runs **needle queries** with min/max pruning alone and with the regexes. Shows:

1. the plan: which files of which bucket merge, and into which level;
2. files per bucket and level before/after, and file sizes before/after;
3. files read per needle query, min/max only vs min/max + regex.

The same runs on a lakehouse with `lakeshard compact [--apply]` and `lakeshard query`.

**Parameters** (next cell; widgets on Databricks):

| name | meaning |
| --- | --- |
| `tenants` | tenants in the table (two hour buckets each) |
| `files` | small files per bucket |
| `rows` | events per small file |
| `target_rows` | rows per compacted file |
| `out` | directory for the table and the figure |
"""),
    nbf.v4.new_code_cell("""# Parameters (Databricks widgets when run there)
import tempfile

from lakeshard.runtime.params import notebook_params

p = notebook_params({"tenants": 2, "files": 12, "rows": 40, "target_rows": 120,
                     "out": tempfile.mkdtemp(prefix="lakeshard-compact-")})"""),
    nbf.v4.new_code_cell("""from lakeshard.compaction.sample import SmallFileTable
from lakeshard.config import load_config
from lakeshard.lake import open_store
from lakeshard.runtime import get_spark

cfg = load_config(overrides={"lakehouse": f"{p['out']}/lakehouse"})
spark = get_spark(cfg)
store = open_store(spark, cfg)
table = SmallFileTable(spark, store, cfg.table_uri("events"))
for t in range(p["tenants"]):
    table.append(f"tenant-{t}", files=p["files"], rows=p["rows"])
print(f"{len(store.files(table.uri))} files, {store.read(table.uri).count():,} events")"""),
    nbf.v4.new_code_cell(
        """from lakeshard.compaction import CompactionSettings, Compactor, LocalityPlanner, SizeTieredPlanner
from lakeshard.report import format_table

settings = CompactionSettings(
    size_tiered=SizeTieredPlanner(min_files=8, target_rows=p["target_rows"], base_rows=8, growth=4),
    locality=LocalityPlanner(target_rows=p["target_rows"], growth=2, max_level=3))
compactor = Compactor(store, table.uri, settings=settings)
_, _, before = compactor.snapshot()
plan = compactor.plan()
print(format_table(["bucket", "kind", "files", "rows", "outputs", "level"],
                   [[f"{t.bucket[0]}/{t.bucket[1]}", t.kind, len(t.inputs), t.rows, t.outputs,
                     f"L{t.output_level}"] for t in plan.tasks]))"""
    ),
    nbf.v4.new_code_cell("""report = compactor.run(apply=True)
_, _, after = compactor.snapshot()
for r in report.rounds:
    print(f"version {r.version}: {len(r.tasks)} buckets, {r.files_removed} files -> {r.files_added}")
print(f"{len(before)} files before, {len(after)} after; levels after: "
      f"{sorted({f.level for f in after})}")"""),
    nbf.v4.new_code_cell("""from datetime import UTC, datetime

from lakeshard.compaction import read_events

start, end = datetime(2026, 1, 1, 10, tzinfo=UTC), datetime(2026, 1, 1, 12, tzinfo=UTC)
needles = {"service=search": {"service": "search"}, "service=catalog (absent)": {"service": "catalog"},
           "env=pre.view|1 (rare)": {"env": "pre.view|1"}, "env=qa (absent)": {"env": "qa"}}
queries = {}
for label, predicates in needles.items():
    df, with_regex = read_events(spark, store, table.uri, tenant="tenant-0", start=start, end=end,
                                 predicates=predicates)
    _, min_max = read_events(spark, store, table.uri, tenant="tenant-0", start=start, end=end,
                             predicates=predicates, use_regex=False)
    queries[label] = (with_regex, min_max)
    print(f"{label}: {df.count()} events; {with_regex.render()}; min/max only reads {len(min_max.read)}")"""),
    nbf.v4.new_code_cell("""from pathlib import Path

from IPython.display import Image

from lakeshard.compaction.plots import compaction_figure

png = compaction_figure(Path(p["out"]) / "compaction.png", before, after, queries)
assert all(len(q[0].read) <= len(q[1].read) for q in queries.values())  # regexes never read more
Image(filename=str(png))"""),
]
nbf.write(nb, OUT)
print(f"wrote {OUT}")
