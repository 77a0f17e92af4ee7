"""What the "one operation as X grows, peer against peer" benchmarks share: the command line, the per-peer growth
lines of the markdown, the plot, and writing ``<name>.{json,md,png}`` (``bench_commit_log.py``,
``bench_append_files.py``, ``bench_close_check.py``)."""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def growth_lines(rows: Sequence[dict[str, Any]], x: str, peers: Sequence[str], unit: str) -> list[str]:
    """Return one markdown line per peer: its milliseconds added per 1,000 of ``x`` from the first row to the last."""
    first, last = rows[0], rows[-1]
    span = last[x] - first[x]
    return [f"- {peer}: {(last[peer] - first[peer]) / span * 1000 if span else 0.0:+.3f} ms per 1,000 {unit}."
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


def main(doc: str, *, sizes_flag: str, sizes: str, sizes_help: str, repeat: int, name: str, results: Path,
         measure: Callable[[list[int], int, Path], list[dict[str, Any]]],
         render_md: Callable[[dict[str, Any]], str], x: str, peers: Sequence[str], xlabel: str, ylabel: str,
         title: str) -> int:
    """Parse the command line (``--<sizes_flag>`` ascending sizes, ``--repeat``, ``--name``, ``--out``), run
    ``measure(sizes, repeat, work)`` in a temporary work directory and write its rows as :func:`write_results`,
    plotting each of ``peers`` against the rows' ``x``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument(f"--{sizes_flag}", default=sizes, help=sizes_help)
    parser.add_argument("--repeat", type=int, default=repeat)
    parser.add_argument("--name", default=name)
    parser.add_argument("--out", type=Path, default=results)
    args = parser.parse_args()
    chosen = sorted(int(v) for v in getattr(args, sizes_flag).split(","))
    with tempfile.TemporaryDirectory(prefix=f"lakeshard-{name}-") as work:
        rows = measure(chosen, args.repeat, Path(work))

    def draw(result: dict[str, Any], path: Path) -> None:
        plot(result["rows"], x, peers, path, xlabel=xlabel, ylabel=ylabel, title=title)

    write_results(rows, args.repeat, args.out, args.name, render_md, draw)
    return 0
