"""Draw lakeshard's layers and ports (docs/design.md §4) as ``layers.png`` beside this script.

    /work/main/.venv/bin/python docs/figures/layers.py     # or any Python with matplotlib

Each band is a layer; a layer imports only the bands below it. The ``lake`` band is the one port to storage:
its face (``TableStore``) above, the shared Delta protocol pieces and the two adapters below it.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch

OUT = Path(__file__).with_suffix(".png")

# (label, detail, x, y, width, height, face colour)
BOXES: list[tuple[str, str, float, float, float, float, str]] = [
    ("callers", "notebooks · Databricks bundle jobs & pipelines · Lakeflow pipelines", 0.5, 9.1, 15.0, 0.8, "#eeeeee"),
    ("app", "lakeshard CLI · demo · plots  (extra: matplotlib, tqdm)", 0.5, 7.9, 15.0, 0.9, "#fde2c8"),
    ("pipelines", "flows declared once · expectations · runner · event log (pipeline_events)", 0.5, 6.7, 15.0, 0.9,
     "#fff2b3"),
    ("landing", "record format,\nparse, quarantine", 0.5, 4.75, 2.3, 1.45, "#d9ecd0"),
    ("routing", "placements,\nallocator, router", 2.92, 4.75, 2.3, 1.45, "#d9ecd0"),
    ("dedupe", "exactly-once\nshard writers, IDs", 5.34, 4.75, 2.3, 1.45, "#d9ecd0"),
    ("buckets", "completionist,\nfence, late", 7.76, 4.75, 2.3, 1.45, "#d9ecd0"),
    ("compaction · pruning", "tiers, merge, swaps,\nregex fragments", 10.18, 4.75, 2.6, 1.45, "#d9ecd0"),
    ("versions · balancing", "chunk history, locks;\nautoshard, salts", 12.9, 4.75, 2.6, 1.45, "#d9ecd0"),
    ("tables · config · runtime · errors", "one catalog of names and schemas · typed config · Spark session "
     "(local, Databricks, Spark Connect) · LakeshardError", 0.5, 3.6, 15.0, 0.8, "#dde7f5"),
    ("lake: TableStore (the port)", "create · read (Spark / Arrow) · append · replace_files · fence · history · "
     "app versions · vacuum", 0.5, 2.5, 15.0, 0.8, "#c9d8ef"),
    ("lake/embedded", "Spark or Arrow write Parquet;\ndelta-rs commits; own blind appends", 0.5, 1.0, 4.9, 1.2,
     "#b7cbe8"),
    ("lake/protocol", "Delta log replay · Parquet footers\nand row groups · file systems", 5.55, 1.0, 4.9, 1.2,
     "#b7cbe8"),
    ("lake/native", "Delta's JVM engine through public APIs\n(classic session and Spark Connect)", 10.6, 1.0, 4.9,
     1.2, "#b7cbe8"),
    ("Delta tables", "<lakehouse>/<table>: the Delta log is the one source of truth", 0.5, 0.05, 15.0, 0.7,
     "#e6e6e6"),
]


def draw(path: Path = OUT) -> Path:
    """Return ``path`` after drawing the layer picture into it."""
    fig, ax = plt.subplots(figsize=(12, 7.6))
    for label, detail, x, y, w, h, colour in BOXES:
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.12", fc=colour,
                                    ec="#555555", lw=1))
        ax.text(x + w / 2, y + h - 0.08, label, ha="center", va="top", fontsize=10 if w > 3 else 9, fontweight="bold")
        ax.text(x + w / 2, y + 0.1, detail, ha="center", va="bottom", fontsize=8, color="#333333")
    grey = {"arrowstyle": "-|>", "color": "#555555"}
    for x in (2.95, 13.05):  # the two adapters implement the port
        ax.annotate("", xy=(x, 2.5), xytext=(x, 2.22), arrowprops=grey)
        ax.text(x + 0.1, 2.3, "implements", fontsize=7, color="#555555", va="center")
    for x0, x1 in ((5.4, 5.55), (10.6, 10.45)):  # and share the protocol pieces
        ax.annotate("", xy=(x1, 1.6), xytext=(x0, 1.6), arrowprops=grey)
    ax.annotate("", xy=(16.1, 0.4), xytext=(16.1, 9.5), arrowprops={"arrowstyle": "-|>", "color": "#888888", "lw": 1.5})
    ax.text(16.25, 5.0, "imports point down only", rotation=270, va="center", fontsize=9, color="#555555")
    ax.text(0.5, 6.45, "domain packages: pure planners + executors that go through the port", fontsize=8,
            color="#555555", va="top")
    ax.set_xlim(0, 16.8)
    ax.set_ylim(-0.1, 10.1)
    ax.axis("off")
    ax.set_title("lakeshard: layers and the storage port", fontsize=12)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    print(draw())
