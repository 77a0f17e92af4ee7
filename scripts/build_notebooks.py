"""Writes the notebooks in notebooks/ from their cells here (run: .venv/bin/python scripts/build_notebooks.py)."""
import nbformat as nbf


def _write(notebook: nbf.NotebookNode, path: str) -> None:
    """Write ``notebook`` with stable cell ids, so rebuilding an unchanged notebook changes no byte."""
    for i, cell in enumerate(notebook.cells):
        cell["id"] = f"cell-{i:02d}"
    nbf.write(notebook, path)

nb = nbf.v4.new_notebook()
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
cells = [
nbf.v4.new_markdown_cell("""# 01 — Generate synthetic traffic

Writes a landing zone of newline-delimited JSON files that looks like multi-tenant observability
traffic (Zipf-skewed tenants, bursts, producer retries, redelivered files, late events, malformed
records) together with its ground truth, then shows what it wrote.

**Parameters** (next cell; widgets on Databricks):

| name | meaning |
| --- | --- |
| `landing` | where to write the landing zone (default: a new temporary directory) |
| `events` | unique valid events to generate |
| `tenants` | number of tenants |
| `seed` | random seed: the same seed writes the same bytes |
"""),
nbf.v4.new_code_cell("""# Parameters (Databricks widgets when run there)
import tempfile

from lakeshard.runtime.params import notebook_params

p = notebook_params({"landing": tempfile.mkdtemp(prefix="lakeshard-landing-"), "events": 20_000, "tenants": 50, "seed": 7})
landing, events, tenants, seed = p["landing"], p["events"], p["tenants"], p["seed"]"""),
nbf.v4.new_code_cell("""from lakeshard.synth import SynthSpec, generate_landing

manifest = generate_landing(landing, SynthSpec(events=events, tenants=tenants, seed=seed), overwrite=True)
assert manifest.records == manifest.unique_events + manifest.duplicate_records + manifest.bad_records
print(f"{manifest.records:,} records in {manifest.files} files: {manifest.unique_events:,} events, "
      f"{manifest.duplicate_records:,} duplicates, {manifest.bad_records} bad, {manifest.late_events} late")"""),
nbf.v4.new_code_cell("""from lakeshard.report import format_table

top = sorted(manifest.events_by_tenant.items(), key=lambda kv: -kv[1])[:5]
print(format_table(["tenant", "events", "bytes"], [[t, n, manifest.bytes_by_tenant[t]] for t, n in top]))
print()
print(format_table(["bad record category", "records"], [[c, n] for c, n in manifest.bad_by_category.items() if n]))"""),
nbf.v4.new_code_cell("""from pathlib import Path

from IPython.display import Image

from lakeshard.report.landing import landing_overview_plot

png = landing_overview_plot(landing, manifest, manifest.bad_by_category, Path(landing) / "_report" / "overview.png")
Image(filename=str(png))"""),
]
nb.cells = cells
_write(nb, "notebooks/01_generate_traffic.ipynb")

nb2 = nbf.v4.new_notebook()
nb2.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nb2.cells = [
nbf.v4.new_markdown_cell("""# 02 — Route traffic to shards

Routes a landing zone into the lakehouse the way Husky's shard router does: every valid record gets its
tenant's time-bounded placement (a list of shards chosen by consistent hashing) and one shard of it by
the hash of its event ID; bad records go to `quarantine` with a reason; per-shard bytes go to
`routing_metrics`. Each batch of landing files is routed exactly once, even across crashes.

**Parameters** (next cell; widgets on Databricks):

| name | meaning |
| --- | --- |
| `lakehouse` | lakehouse root (default: a new temporary directory) |
| `landing` | landing zone to route; generated here when `generate` is true |
| `generate` | write a synthetic landing zone first |
| `events`, `tenants` | size of the generated traffic |
| `total_shards` | shards on the ring |
"""),
nbf.v4.new_code_cell("""# Parameters (Databricks widgets when run there)
import tempfile

from lakeshard.runtime.params import notebook_params

base = tempfile.mkdtemp(prefix="lakeshard-route-")
p = notebook_params({"lakehouse": f"{base}/lakehouse", "landing": f"{base}/landing", "generate": True,
                     "events": 20_000, "tenants": 40, "total_shards": 16})"""),
nbf.v4.new_code_cell("""from lakeshard.config import load_config
from lakeshard.lake import open_store
from lakeshard.runtime import get_spark

cfg = load_config(overrides={"lakehouse": p["lakehouse"], "landing": p["landing"],
                             "routing": {"total_shards": p["total_shards"]}})
spark = get_spark(cfg)
store = open_store(spark, cfg)
if p["generate"]:
    from lakeshard.synth import SynthSpec, generate_landing

    generate_landing(cfg.landing, SynthSpec(events=p["events"], tenants=p["tenants"]), overwrite=True)"""),
nbf.v4.new_code_cell("""from lakeshard.report import format_table
from lakeshard.routing.router import Router

reports = Router(spark, store, cfg).run()
print(format_table(["batch", "files", "records", "routed", "quarantined"],
                   [[r.batch, r.files, r.records, r.routed, r.quarantined] for r in reports]))
assert all(r.records == r.routed + r.quarantined for r in reports)"""),
nbf.v4.new_code_cell("""from pathlib import Path

from IPython.display import Image

from lakeshard.report.routing import shard_load, shard_load_plot

load = shard_load(store, cfg)
Image(filename=str(shard_load_plot(load, Path(base) / "shard-load.png")))"""),
]
_write(nb2, "notebooks/02_route_traffic.ipynb")

nb4 = nbf.v4.new_notebook()
nb4.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nb4.cells = [
nbf.v4.new_markdown_cell("""# 04 — Write events exactly once

Routes a landing zone, then runs shard writers that consume the routed events, drop duplicates within each
batch and against the IDs already committed to the lakehouse (`event_ids`), and commit the survivors to
`events` together with their progress. Then the same files are delivered again, as an at-least-once
producer would, and the writers drop every copy.

**Parameters** (next cell; widgets on Databricks):

| name | meaning |
| --- | --- |
| `lakehouse`, `landing` | where tables and input live (default: a new temporary directory) |
| `events`, `tenants` | size of the generated traffic |
| `total_shards` | shards on the ring; one writer here owns them all |
"""),
nbf.v4.new_code_cell("""# Parameters (Databricks widgets when run there)
import tempfile

from lakeshard.runtime.params import notebook_params

base = tempfile.mkdtemp(prefix="lakeshard-write-")
p = notebook_params({"lakehouse": f"{base}/lakehouse", "landing": f"{base}/landing", "events": 10_000,
                     "tenants": 20, "total_shards": 8})"""),
nbf.v4.new_code_cell("""from lakeshard.config import load_config
from lakeshard.dedupe import ShardWriter
from lakeshard.lake import open_store
from lakeshard.routing.router import Router
from lakeshard.runtime import get_spark
from lakeshard.synth import SynthSpec, generate_landing

# max_batch_bytes=1: each writer step takes one routed commit (the memory gate), so the plots show steps.
cfg = load_config(overrides={"lakehouse": p["lakehouse"], "landing": p["landing"],
                             "routing": {"total_shards": p["total_shards"], "default_shard_count": 2},
                             "dedupe": {"max_batch_bytes": 1}})
spark = get_spark(cfg)
store = open_store(spark, cfg)
manifest = generate_landing(cfg.landing, SynthSpec(events=p["events"], tenants=p["tenants"]), overwrite=True)
writer = ShardWriter(spark, store, cfg, list(range(p["total_shards"])))
Router(spark, store, cfg, max_batch_files=40).run()
first = writer.run()"""),
nbf.v4.new_code_cell("""import shutil
from pathlib import Path

# The first files delivered again, hours later, under new names.
files = sorted(f for f in Path(cfg.landing).rglob("part-*") if "_truth" not in f.parts)[:10]
for i, f in enumerate(files):
    shutil.copy(f, f.with_name(f"again-{i}-{f.name}"))
Router(spark, store, cfg).run()
second = writer.run()"""),
nbf.v4.new_code_cell("""from lakeshard.report import format_table
from lakeshard.synth.verify import check_against_truth

rows = [["first delivery", *[sum(getattr(r, k) for r in first) for k in
         ("rows_in", "duplicates_in_batch", "duplicates_in_index", "written")]],
        ["files delivered again", *[sum(getattr(r, k) for r in second) for k in
         ("rows_in", "duplicates_in_batch", "duplicates_in_index", "written")]]]
print(format_table(["run", "routed rows in", "dropped: same batch", "dropped: ID index", "written"], rows))
check = check_against_truth(spark, store.read(cfg.table_uri("events")), cfg.landing)
print(check)
assert check.exactly_once and check.rows == manifest.unique_events"""),
nbf.v4.new_code_cell("""import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(7, 3.5))
labels = [r[0] for r in rows]
bottom = [0, 0]
for i, name in enumerate(["written", "dropped: same batch", "dropped: ID index"]):
    values = [r[4] if i == 0 else r[i + 1] for r in rows]
    ax.bar(labels, values, bottom=bottom, label=name)
    bottom = [b + v for b, v in zip(bottom, values)]
ax.set(ylabel="routed rows", title="where every routed row went")
ax.legend()
plt.show()"""),
nbf.v4.new_code_cell("""# Every writer step: rows committed, latency, and where the ID checks were answered from.
steps = first + second
x = list(range(1, len(steps) + 1))
fig, axes = plt.subplots(1, 3, figsize=(13, 3.5))
axes[0].bar(x, [r.written for r in steps], label="written")
axes[0].bar(x, [r.duplicates_in_batch + r.duplicates_in_index for r in steps],
            bottom=[r.written for r in steps], label="dropped")
axes[0].set(title="rows per commit", xlabel="writer step")
axes[0].legend()
axes[1].plot(x, [r.seconds for r in steps], marker="o", label="step")
axes[1].plot(x, [r.page_in_seconds for r in steps], marker=".", label="of which ID page-in")
axes[1].set(title="latency (s)", xlabel="writer step")
axes[1].legend()
axes[2].bar(x, [r.intervals_paged_in for r in steps], label="paged in from event_ids")
axes[2].bar(x, [r.interval_hits for r in steps], bottom=[r.intervals_paged_in for r in steps],
            label="answered from the cache")
axes[2].set(title="ID intervals checked", xlabel="writer step")
axes[2].legend()
fig.tight_layout()
plt.show()
stats = writer.cache.stats()
print(f"ID cache: {stats.intervals} intervals, {stats.ids:,} IDs, {stats.bytes / 2**20:.1f} MiB, "
      f"hit rate {stats.hit_rate:.0%}")"""),
]
_write(nb4, "notebooks/04_write_exactly_once.ipynb")
