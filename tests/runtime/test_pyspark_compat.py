"""The library calls only pyspark APIs that Spark 4.0 has (Databricks Runtime 17.3, the bundle's runtime).

pyspark documents each function and method with ``.. versionadded:: X.Y``: every pyspark name the library
imports, every ``F.<function>`` it calls and every method name it calls that pyspark's DataFrame, Column,
reader, writer, session or conf classes define must say 4.0 or earlier. Calls whose signature changed after 4.0
are listed by hand in :data:`CHANGED_SIGNATURES`.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

LIB = Path(__file__).resolve().parents[2] / "lib" / "lakeshard"
RUNTIME = (4, 0)
# Newer APIs the library uses only behind a fallback for older runtimes.
GUARDED = {"arrow_udf": "routing/hashing.py falls back to pandas_udf on ImportError (Spark < 4.1)"}
# (function, keyword) pairs whose keyword came after 4.0: the call raises TypeError on a 4.0 runtime.
CHANGED_SIGNATURES = {("to_arrow_schema", "timezone"), ("to_arrow_schema", "prefers_large_types")}
CLASSES = ["pyspark.sql.DataFrame", "pyspark.sql.Column", "pyspark.sql.readwriter.DataFrameReader",
           "pyspark.sql.readwriter.DataFrameWriter", "pyspark.sql.SparkSession", "pyspark.sql.conf.RuntimeConfig",
           "pyspark.sql.group.GroupedData", "pyspark.sql.Observation", "pyspark.sql.types.StructType"]


def _added(obj: object) -> tuple[int, int] | None:
    match = re.search(r"versionadded::\s*(\d+)\.(\d+)", getattr(obj, "__doc__", None) or "")
    return (int(match[1]), int(match[2])) if match else None


def _resolve(dotted: str) -> object:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _own_names(trees: list[ast.AST]) -> set[str]:
    """Return the function, method and field names lakeshard defines itself (``.changes`` of a LogEntry is not
    pyspark's ``DataFrameReader.changes``)."""
    names = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return names


def _pyspark_uses() -> dict[str, tuple[object, set[str]]]:
    """Return, per pyspark function or method the library calls or imports, the object and the modules."""
    from pyspark.sql import functions

    trees = {path.relative_to(LIB).as_posix(): ast.parse(path.read_text()) for path in sorted(LIB.rglob("*.py"))}
    own = _own_names(list(trees.values()))
    methods = {name: (f"{cls}.{name}", member) for cls in CLASSES
               for name, member in vars(_resolve(cls)).items() if not name.startswith("_") and name not in own}
    uses: dict[str, tuple[object, set[str]]] = {}

    def use(dotted: str, obj: object, where: str) -> None:
        uses.setdefault(dotted, (obj, set()))[1].add(where)

    for where, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pyspark"):
                module = importlib.import_module(node.module or "")
                for alias in node.names:
                    if hasattr(module, alias.name) and alias.name not in GUARDED:
                        use(f"{node.module}.{alias.name}", getattr(module, alias.name), where)
            elif isinstance(node, ast.Attribute):
                if isinstance(node.value, ast.Name) and node.value.id == "F" and hasattr(functions, node.attr):
                    use(f"pyspark.sql.functions.{node.attr}", getattr(functions, node.attr), where)
                elif node.attr in methods:
                    use(*methods[node.attr], where)
    return uses


def test_every_pyspark_api_the_library_calls_is_in_spark_4_0() -> None:
    uses = _pyspark_uses()
    assert "pyspark.sql.functions.col" in uses and "pyspark.sql.DataFrame.persist" in uses  # the scan sees calls
    newer = {dotted: (added, sorted(where)) for dotted, (obj, where) in uses.items()
             if (added := _added(obj)) is not None and added > RUNTIME}
    assert not newer, f"pyspark APIs newer than Spark {RUNTIME[0]}.{RUNTIME[1]} (DBR 17.3): {newer}"


def _called(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")


def test_no_call_uses_a_keyword_added_after_spark_4_0() -> None:
    found = []
    for path in sorted(LIB.rglob("*.py")):
        where = path.relative_to(LIB).as_posix()
        tree = ast.parse(path.read_text())
        # A function that asks inspect.signature first calls the newer form only where it exists.
        detected = {id(inner) for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef)
                    and any(isinstance(c, ast.Call) and _called(c) == "signature" for c in ast.walk(fn))
                    for inner in ast.walk(fn)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and id(node) not in detected:
                name = _called(node)
                found += [f"{where}:{node.lineno} {name}({k.arg}=...)" for k in node.keywords
                          if (name, k.arg) in CHANGED_SIGNATURES]
    assert not found, f"keywords a Spark 4.0 runtime does not take: {found}"


def test_the_version_check_sees_a_newer_api() -> None:
    from pyspark.sql.pandas import functions

    assert _added(functions.arrow_udf) is not None and _added(functions.arrow_udf) > RUNTIME  # type: ignore[operator]
