"""The demo's pipeline figure: where the landing records went, files around compaction, files read per needle
query."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["pipeline_plot"]


def pipeline_plot(log: Mapping[str, Mapping[str, int]], files_before: int, files_after: int,
                  needles: Sequence[tuple[str, int, int]], tenant: str, path: Path) -> Path:
    """Return the PNG path of three panels: where the landing records went, files before/after compaction,
    files read per needle query with regex pruning vs min/max only.

    ``log`` is the pipeline event log's counts by flow (``route``, ``ingest``); ``needles`` holds, per query of
    ``tenant``, its label and the files read with min/max statistics only and with regex pruning.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    route, ingest = log["route"], log["ingest"]
    went = {"events": ingest["rows_out"], "duplicates dropped": ingest["duplicates_dropped"],
            "quarantined": route["quarantined"] + ingest["quarantined"], "dropped by expectations": ingest["dropped"]}
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(16, 4.2))
    left.barh(list(went), list(went.values()), color=["tab:green", "tab:orange", "tab:red", "tab:gray"])
    left.set_xscale("symlog")
    left.invert_yaxis()
    left.set(title=f"where the {route['rows_in']:,} landing records went (event log)", xlabel="records")
    middle.bar(["before", "after"], [files_before, files_after], color=["#bbbbbb", "tab:blue"])
    middle.set(title="files in 'events' around compaction", ylabel="files")
    x = range(len(needles))
    right.bar([i - 0.2 for i in x], [min_max for _, min_max, _ in needles], 0.4, label="min/max only")
    right.bar([i + 0.2 for i in x], [regex for _, _, regex in needles], 0.4, label="regex pruning")
    right.set_xticks(list(x), [label.replace(" ", "\n", 1) for label, _, _ in needles], fontsize=8)
    right.set(title=f"files read per needle query (tenant {tenant})", ylabel="files")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
