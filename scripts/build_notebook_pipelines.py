"""Writes the pipeline notebooks (one per flow, run by the bundle's job tasks, and an exploration notebook)
from their cells here, with stable cell ids (run: .venv/bin/python scripts/build_notebook_pipelines.py)."""

import json
from pathlib import Path

import nbformat as nbf

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

PARAMS = '''# Parameters (job parameters / widgets on Databricks; these defaults locally)
import tempfile

from lakeshard.runtime.params import notebook_params

base = tempfile.mkdtemp(prefix="lakeshard-pipeline-")
p = notebook_params({"lakehouse": f"{base}/lakehouse", "landing": f"{base}/landing", "total_shards": 4,
                     "generate": True, "upstream": True%s})'''

SETUP = '''from datetime import UTC, datetime, timedelta

from lakeshard.config import load_config
from lakeshard.lake import open_store
from lakeshard.runtime import get_spark

cfg = load_config(overrides={"lakehouse": p["lakehouse"], "landing": p["landing"],
                             "routing": {"total_shards": p["total_shards"]}%(config)s})
spark = get_spark(cfg)
store = open_store(spark, cfg)
if p["generate"]:  # by hand: a small landing zone of %(when)s
    from lakeshard.synth import SynthSpec, generate_landing

    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=%(ago)d)
    generate_landing(cfg.landing, SynthSpec(events=p.get("events", 800), tenants=p.get("tenants", 6), hours=0.1,
                                            start=start), overwrite=True)'''

PARAM_TABLE = """| name | meaning |
| --- | --- |
| `lakehouse`, `landing` | where tables and input live (default: a new temporary directory) |
| `total_shards` | shards on the ring (used when the lakehouse is new) |
| `generate` | write a small synthetic landing zone first (jobs pass `false`) |
| `upstream` | also run the flows this one depends on, in DAG order (jobs pass `false`: the job's DAG orders them) |
"""

RECENT = {"config": "", "when": "the last minutes' traffic (recent, so metrics are fresh)", "ago": 10}
# Closing and compacting need hours that are over: a hand run generates traffic of three hours ago, lets
# buckets close without a quiet period (the generated landing zone is complete), and for compaction has
# the writers take one routed commit per step (several small files per bucket, as a busy stream leaves them).
HOURS_AGO = {"config": "", "when": "three hours ago (hours that are over)", "ago": 180,
             "params": {"close_buckets": {"quiet_minutes": 0}}}
SMALL_STEPS = {**HOURS_AGO, "config": ',\n                             **({"dedupe": {"max_batch_bytes": 1}} if p["generate"] else {})',
               "params": {"close_buckets": {"quiet_minutes": 0}, "route": {"batch_files": 3}}}
PARAMS_ARG = """,
                      params=hand_run if p["generate"] else None"""

STEPS = {
    "route": ("05", "Validates every new landing record (bad ones to `quarantine` with a reason), gives each event "
              "its tenant's time-bounded placement and a shard, and commits `routed` and `routing_metrics`, "
              "exactly once per landing file."),
    "ingest": ("06", "Runs the shard writers: they drop duplicates within each batch and against the IDs kept in "
               "the lakehouse, pass the survivors through the flow's expectations, and commit each event to "
               "`events` exactly once, with their progress in the same commit."),
    "autoshard": ("07", "Sizes each tenant's shard count from its recent bytes/s in `routing_metrics` (up within "
                  "one window of a burst, down only after sustained calm) and commits it to `tenant_settings`, "
                  "effective from each tenant's next placement window."),
    "balance": ("08", "Moves tenants off the hottest shards by changing their salts (at most `max_moves` a run), "
                "committed to `tenant_settings`, effective from each tenant's next placement window."),
    "close_buckets": ("12", "The completionist: closes each `(tenant, hour)` bucket of `events` that has been quiet "
                      "for `quiet_minutes`, whose hour ended `grace_minutes` before the oldest unconsumed landing "
                      "input, and none of whose events is still in flight (unrouted, or routed but not written). "
                      "A closing bucket's integrity is checked (no key twice, rows as the log promises) and its "
                      "checksum kept in `buckets`; a closed bucket never changes again (late events go to the open "
                      "bucket, flagged `late`).", HOURS_AGO),
    "compact": ("13", "Compacts `events`: closed buckets merge all their small files at once, open ones lazily "
                "when a size tier fills; leveled (locality) merges keep each level's files disjoint in sort "
                "order. Each round holds its buckets' replace locks (`chunk_locks`) and commits one atomic "
                "swap with the outputs' pruning regexes.", SMALL_STEPS),
}


def _notebook(cells: list[nbf.NotebookNode]) -> nbf.NotebookNode:
    nb = nbf.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = cells
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:02d}"  # stable ids: rebuilding an unchanged notebook changes no byte
    return nb


def step_notebook(flow: str, number: str, what: str, local: dict | None = None) -> nbf.NotebookNode:
    """Return the thin notebook a job task runs for ``flow``: parameters, one pipeline run, its event log."""
    local = local or RECENT
    hand = ""
    if local.get("params"):
        hand = f"""
# A hand run (generate) overrides these flow parameters; a job uses the declared ones.
hand_run = {json.dumps(local["params"])}"""
    return _notebook([
        nbf.v4.new_markdown_cell(f"""# {number} — Flow `{flow}`

{what}

The flow runs through the pipeline runner (`lakeshard.pipelines`), so every run is recorded in the
lakehouse's `pipeline_events` table; the bundle's job runs this notebook as task `{flow}`.

**Parameters** (next cell; job parameters or widgets on Databricks):

{PARAM_TABLE}"""),
        nbf.v4.new_code_cell(PARAMS % ""),
        nbf.v4.new_code_cell(SETUP % local),
        nbf.v4.new_code_cell(f'''from lakeshard.pipelines import lakeshard_pipeline, run_pipeline
{hand}
pipeline = lakeshard_pipeline()
report = run_pipeline(spark, store, cfg, pipeline,
                      flows=pipeline.with_upstream(["{flow}"]) if p["upstream"] else ["{flow}"]{
                      PARAMS_ARG if hand else ""})
print(report.render())
assert report.ok, "a flow failed: see the table above and the event log"  # fails the job task'''),
        nbf.v4.new_code_cell('''from lakeshard.pipelines import EventLog

EventLog(store, cfg).read(report.run_id).select(
    "flow", "event", "rows_in", "rows_out", "duplicates_dropped", "quarantined", "dropped", "duration_seconds"
).toPandas()'''),
    ])


def exploration_notebook() -> nbf.NotebookNode:
    """Return the notebook that runs the whole pipeline and explores its event log."""
    return _notebook([
        nbf.v4.new_markdown_cell(f"""# 09 — Explore a pipeline run and its event log

Runs the declared pipeline (route → ingest → close_buckets → compact → autoshard → balance, in DAG order) on a landing zone, then
queries the event log `pipeline_events` the way one queries Delta Live Tables' event log: what each flow
did, how every expectation fared, and where every landing record went
(`records in = events + duplicates dropped + quarantined`).

**Parameters** (next cell; job parameters or widgets on Databricks):

{PARAM_TABLE}| `events`, `tenants` | size of the generated traffic |
"""),
        nbf.v4.new_code_cell(PARAMS % ', "events": 1_000, "tenants": 8'),
        nbf.v4.new_code_cell(SETUP % RECENT),
        nbf.v4.new_code_cell('''from lakeshard.pipelines import EventLog, lakeshard_pipeline, run_pipeline

pipeline = lakeshard_pipeline()
report = run_pipeline(spark, store, cfg, pipeline)
log = EventLog(store, cfg).read(report.run_id)
log.where("event != 'started'").select("flow", "event", "rows_in", "rows_out", "duplicates_dropped",
                                       "quarantined", "duration_seconds", "error").toPandas()'''),
        nbf.v4.new_code_cell('''from pyspark.sql import functions as F

# Every expectation of the run: one row per (flow, rule), like DLT's flow_progress data_quality.
(log.where("event = 'completed'").select("flow", F.explode("expectations").alias("e"))
 .select("flow", "e.name", "e.kind", "e.condition", "e.passed", "e.failed").toPandas())'''),
        nbf.v4.new_code_cell('''ends = {r["flow"]: r for r in log.where("event = 'completed'").collect()}
route, ingest = ends["route"], ends["ingest"]
went = {"events": ingest["rows_out"], "duplicates dropped": ingest["duplicates_dropped"],
        "quarantined": route["quarantined"] + ingest["quarantined"], "dropped by expectations": ingest["dropped"]}
print(f"records in {route['rows_in']:,} = " + " + ".join(f"{v:,} {k}" for k, v in went.items()))
assert route["rows_in"] == sum(went.values()), "the event log does not account for every record"'''),
        nbf.v4.new_code_cell('''import matplotlib.pyplot as plt

fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
left.barh(list(went), list(went.values()), color=["tab:green", "tab:orange", "tab:red", "tab:gray"])
left.set(title=f"where the {route['rows_in']:,} landing records went", xlabel="records")
flows = [f.flow for f in report.flows]
right.bar(flows, [f.seconds for f in report.flows])
right.set(title="seconds per flow", ylabel="seconds")
fig.tight_layout()
plt.show()'''),
    ])


def main() -> None:
    """Write notebooks 05-09, 12 and 13."""
    for flow, (number, what, *local) in STEPS.items():
        path = NOTEBOOKS / f"{number}_flow_{flow}.ipynb"
        nbf.write(step_notebook(flow, number, what, *local), path)
        print(f"wrote {path}")
    path = NOTEBOOKS / "09_explore_pipeline.ipynb"
    nbf.write(exploration_notebook(), path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
