"""The notebooks are their own source: every one is normalised (stable ids, no outputs, trimmed metadata)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_normaliser() -> ModuleType:
    spec = importlib.util.spec_from_file_location("normalize_notebooks", ROOT / "scripts" / "normalize_notebooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


normaliser = _load_normaliser()
NOTEBOOKS = normaliser.notebook_paths()


def test_the_job_and_tutorial_notebooks_are_found() -> None:
    names = {str(p.relative_to(ROOT / "notebooks")) for p in NOTEBOOKS}
    assert {"jobs/route.ipynb", "tutorials/01_generate_traffic.ipynb"} <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[str(p.relative_to(ROOT)) for p in NOTEBOOKS])
def test_every_notebook_is_normalised(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert normaliser.normalized(text) == text, (
        f"{path.relative_to(ROOT)} is not normalised: run python scripts/normalize_notebooks.py")


def _run_notebook_like_jupyter() -> str:
    """Return a notebook as Jupyter saves it after a run: random ids, outputs, counts, extra metadata."""
    nb = nbformat.v4.new_notebook()
    nb.metadata.update({"kernelspec": {"name": "venv", "display_name": "venv", "language": "python"},
                        "language_info": {"name": "python", "version": "3.11.9"}})
    nb.cells = [nbformat.v4.new_markdown_cell("# A title"),
                nbformat.v4.new_code_cell("print(1)", execution_count=3, metadata={"collapsed": True, "tags": ["t"]},
                                          outputs=[nbformat.v4.new_output("stream", text="1\n")])]
    return nbformat.writes(nb)


def test_normalising_strips_a_run_and_gives_ids_by_position() -> None:
    clean = normaliser.normalized(_run_notebook_like_jupyter())
    nb = json.loads(clean)
    assert nb["metadata"] == {"kernelspec": normaliser.KERNELSPEC}
    assert [c["id"] for c in nb["cells"]] == ["cell-00", "cell-01"]
    code = nb["cells"][1]
    assert (code["outputs"], code["execution_count"], code["metadata"]) == ([], None, {"tags": ["t"]})
    assert normaliser.normalized(clean) == clean


def test_check_names_the_notebook_that_is_not_normalised(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dirty = tmp_path / "dirty.ipynb"
    dirty.write_text(_run_notebook_like_jupyter(), encoding="utf-8")
    assert normaliser.main(["--check", str(dirty)]) == 1
    assert f"{dirty}: not normalised" in capsys.readouterr().err
    assert normaliser.main([str(dirty)]) == 0
    assert normaliser.main(["--check", str(dirty)]) == 0
