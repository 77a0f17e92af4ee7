"""Figures for the compaction notebook: files per bucket and level, file sizes, files read per query."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from lakeshard.compaction import FileNode
from lakeshard.query import PruningReport

__all__ = ["compaction_figure"]


def compaction_figure(out: str | Path, before: Sequence[FileNode], after: Sequence[FileNode],
                      queries: Mapping[str, tuple[PruningReport, PruningReport]]) -> Path:
    """Write a three-panel PNG and return its path.

    Args:
        out: the PNG to write.
        before: the table's files before compaction (planner view: bucket, level, rows).
        after: the files after compaction.
        queries: per query label, its report with regex pruning and with min/max only.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_files, ax_sizes, ax_reads) = plt.subplots(1, 3, figsize=(16, 4.8))
    buckets = sorted({f.bucket for f in before} | {f.bucket for f in after})
    labels = [f"{t}\n{h[5:]}" for t, h in buckets]
    x = range(len(buckets))
    width = 0.4
    count_before = Counter(f.bucket for f in before)
    ax_files.bar([i - width / 2 for i in x], [count_before[b] for b in buckets], width, label="before (L0)",
                 color="#bbbbbb")
    levels = sorted({f.level for f in after})
    bottom = [0] * len(buckets)
    for level in levels:
        heights = [sum(1 for f in after if f.bucket == b and f.level == level) for b in buckets]
        ax_files.bar([i + width / 2 for i in x], heights, width, bottom=bottom, label=f"after L{level}")
        bottom = [a + b for a, b in zip(bottom, heights, strict=True)]
    ax_files.set_xticks(list(x), labels, fontsize=7)
    ax_files.set_ylabel("files")
    ax_files.set_title("Files per bucket (tenant, hour) and level")
    ax_files.legend(fontsize=8)

    # Shared bins: every small file may have the same size, which alone would give a zero-width bin.
    largest = max([f.rows for f in [*before, *after]], default=1)
    bins = [largest * 1.05 * i / 30 for i in range(31)]
    ax_sizes.hist([f.rows for f in before], bins=bins, alpha=0.7, label="before", color="#999999")
    ax_sizes.hist([f.rows for f in after], bins=bins, alpha=0.7, label="after")
    ax_sizes.set_xlabel("rows per file")
    ax_sizes.set_ylabel("files")
    ax_sizes.set_title("File sizes")
    ax_sizes.legend(fontsize=8)

    names = list(queries)
    qx = range(len(names))
    ax_reads.bar([i - width / 2 for i in qx], [len(queries[n][1].read) for n in names], width,
                 label="min/max only", color="#999999")
    ax_reads.bar([i + width / 2 for i in qx], [len(queries[n][0].read) for n in names], width,
                 label="min/max + regex")
    ax_reads.set_xticks(list(qx), names, fontsize=7, rotation=20)
    ax_reads.set_ylabel("files read")
    ax_reads.set_title("Files read per needle query")
    ax_reads.legend(fontsize=8)
    fig.tight_layout()
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
