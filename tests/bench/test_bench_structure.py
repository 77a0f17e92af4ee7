"""The shape of ``bench/``: a package whose benchmarks share helpers through public names, never through
``sys.path`` edits or each other's private names. Parsed with ``ast``: nothing here runs a benchmark."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _bench_modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(BENCH.glob("*.py")):
        yield path.stem, ast.parse(path.read_text(encoding="utf-8"), str(path))


def _imported_names(tree: ast.Module) -> Iterator[tuple[int, str, str]]:
    """Yield (line, module, name) of every ``from module import name``, and (line, module, "") of ``import module``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level:
            for alias in node.names:
                yield node.lineno, node.module or "", alias.name
        elif isinstance(node, ast.ImportFrom):
            yield node.lineno, "." * node.level + (node.module or ""), "*relative*"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ""


def test_bench_is_a_package() -> None:
    assert (BENCH / "__init__.py").is_file(), "bench/ has no __init__.py"


def test_no_benchmark_edits_the_import_path() -> None:
    found = [f"bench/{name}.py:{node.lineno}" for name, tree in _bench_modules() for node in ast.walk(tree)
             if isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
             and node.value.id == "sys"]
    assert not found, "sys.path used (import other benchmarks as `bench.<name>`):\n" + "\n".join(found)


def test_benchmarks_import_each_other_by_package_and_public_names_only() -> None:
    siblings = {path.stem for path in BENCH.glob("*.py")} - {"__init__"}
    found = []
    for name, tree in _bench_modules():
        for line, module, imported in _imported_names(tree):
            where = f"bench/{name}.py:{line}"
            if imported == "*relative*" or module.split(".")[0] in siblings:
                found.append(f"{where} imports {module} (write `from bench import ...` or `from bench.<name> ...`)")
            elif module == "bench" and imported not in siblings:
                found.append(f"{where} imports {imported} from bench's face, which holds no code")
            elif module.startswith("bench.") and imported.startswith("_"):
                found.append(f"{where} imports the private name {imported} of {module}")
    assert not found, "\n".join(found)


def test_the_structure_checks_see_a_path_edit_and_a_private_import(tmp_path: Path) -> None:
    tree = ast.parse("import sys\nsys.path.insert(0, 'x')\nfrom bench.bench_day import _private\n")
    assert any(isinstance(n, ast.Attribute) and n.attr == "path" for n in ast.walk(tree))
    assert (3, "bench.bench_day", "_private") in set(_imported_names(tree))
