"""Normalises the notebooks in notebooks/, which are kept in git as their own source, free of outputs.

A normalised notebook has cell ids derived from the cells' positions (``cell-00``, ``cell-01`` ...), no outputs
and no execution counts, cell metadata trimmed to ``tags`` (nbval reads them), notebook metadata trimmed to a
Python 3 kernelspec, and nbformat's own JSON layout, so that running or re-saving a notebook and normalising it
again changes no byte unless a cell changed.

    .venv/bin/python scripts/normalize_notebooks.py            # rewrite every notebook under notebooks/
    .venv/bin/python scripts/normalize_notebooks.py --check    # exit 1 naming each notebook that is not
    .venv/bin/python scripts/normalize_notebooks.py PATH ...   # only these notebooks
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}
KEPT_CELL_METADATA = ("tags",)


def notebook_paths(root: Path = NOTEBOOKS) -> list[Path]:
    """Return every notebook under ``root`` (checkpoint copies excluded), sorted by path."""
    return sorted(p for p in root.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def normalized(text: str) -> str:
    """Return the normalised JSON text of the notebook whose JSON text is ``text``."""
    nb = nbformat.reads(text, as_version=4)
    nb.nbformat_minor = max(nb.nbformat_minor, 5)  # cell ids exist from nbformat 4.5 on
    nb.metadata = nbformat.from_dict({"kernelspec": KERNELSPEC})
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:02d}"  # position, not chance: re-saving a notebook keeps its ids
        cell.metadata = nbformat.from_dict({k: v for k, v in cell.metadata.items() if k in KEPT_CELL_METADATA})
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    out: str = nbformat.writes(nb)
    return out if out.endswith("\n") else out + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Normalise (or with ``--check`` only inspect) the notebooks; return the exit code (1: some were not)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a notebook is not normalised")
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks to normalise (default: all of notebooks/)")
    args = parser.parse_args(argv)
    unnormalised = []
    for path in args.paths or notebook_paths():
        text = path.read_text(encoding="utf-8")
        clean = normalized(text)
        if clean == text:
            continue
        unnormalised.append(path)
        if not args.check:
            path.write_text(clean, encoding="utf-8")
            print(f"normalised {path}")
    if args.check and unnormalised:
        for path in unnormalised:
            print(f"{path}: not normalised (run: python scripts/normalize_notebooks.py {path})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
