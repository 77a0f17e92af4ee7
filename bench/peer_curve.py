"""What the "one operation as X grows, peer against peer" benchmarks share: the per-peer growth lines of the
markdown, the plot, and writing ``<name>.{json,md,png}`` (``bench_commit_log.py``, ``bench_append_files.py``)."""

from __future__ import annotations

import json
import platform
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def growth_lines(rows: Sequence[dict[str, Any]], x: str, peers: Sequence[str], unit: str) -> list[str]:
    """Return one markdown line per peer: its milliseconds added per 1,000 of ``x`` from the first row to the last."""
    first, last = rows[0], rows[-1]
    span = last[x] - first[x]
    return [f"- {peer}: +{(last[peer] - first[peer]) / span * 1000 if span else 0.0:.3f} ms per 1,000 {unit}."
            for peer in peers]


def plot(rows: Sequence[dict[str, Any]], x: str, peers: Sequence[str], path: Path, *, xlabel: str, ylabel: str,
         title: str) -> None:
    """Draw each peer's milliseconds against ``x``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for peer in peers:
        ax.plot([r[x] for r in rows], [r[peer] for r in rows], marker="o", label=peer)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_results(rows: list[dict[str, Any]], repeat: int, out: Path, name: str,
                  render_md: Callable[[dict[str, Any]], str], draw: Callable[[dict[str, Any], Path], None]) -> None:
    """Write the measured ``rows`` (with the machine, date and repeat count) to ``<out>/<name>.json``, ``.md`` and
    ``.png`` and say where."""
    doc = {"machine": f"{platform.machine()}, {platform.python_version()}",
           "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "repeat": repeat, "rows": rows}
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(doc, indent=2))
    (out / f"{name}.md").write_text(render_md(doc))
    draw(doc, out / f"{name}.png")
    print(f"wrote {out / name}.{{json,md,png}}")
