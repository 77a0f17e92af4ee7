"""Nothing outside ``lakeshard.lake.native.jvm`` touches Spark's JVM internals, so every other path runs under
Spark Connect.

Spark Connect sessions (pyspark's ``remote()``, databricks-connect, serverless, standard-access clusters) have no
py4j gateway, no SparkContext and no RDDs. The scan reads the syntax tree of every module: imports of ``py4j``,
and the names, attributes and ``getattr`` strings below.
"""

from __future__ import annotations

import ast
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "lib" / "lakeshard"
JVM_INTERNALS = {"_jvm", "_jsparkSession", "_jsc", "_jdf", "_jconf", "_sc", "sparkContext", "SparkContext", "rdd",
                 "_gateway"}
ALLOWED = {
    "lake/native/jvm.py",  # the one module that talks to Delta's JVM classes through py4j
}
# Single functions allowed elsewhere, each on a path no Spark Connect session takes.
ALLOWED_FUNCTIONS = {
    # Starting a local classic session: whether this process's JVM (one per process) was launched without Delta's
    # jars, before Delta's catalog is asked of it.
    ("runtime/session.py", "_jvm_without_delta"),
    # A classic session's py4j view handed to jvm.replies (TCP_NODELAY on its connection); a Spark Connect
    # session has no _jvm, and the getattr finds none.
    ("runtime/session.py", "_quick"),
}


def _uses(tree: ast.AST, allowed_functions: frozenset[str] = frozenset()) -> list[tuple[int, str]]:
    found = []
    skipped = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name in allowed_functions
               for n in ast.walk(f)}
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [(node.lineno, f"import {m}") for m in modules if m.split(".")[0] == "py4j"]
        elif isinstance(node, ast.Attribute) and node.attr in JVM_INTERNALS:
            found.append((node.lineno, f".{node.attr}"))
        elif isinstance(node, ast.Name) and node.id in JVM_INTERNALS:
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.Constant) and node.value in JVM_INTERNALS:
            found.append((node.lineno, repr(node.value)))
    return found


def test_only_the_jvm_module_touches_jvm_internals() -> None:
    offenders = {}
    for path in sorted(LIB.rglob("*.py")):
        relative = path.relative_to(LIB).as_posix()
        functions = frozenset(name for file, name in ALLOWED_FUNCTIONS if file == relative)
        if relative not in ALLOWED and (uses := _uses(ast.parse(path.read_text(), str(path)), functions)):
            offenders[relative] = uses
    assert not offenders, \
        f"JVM internals outside lakeshard.lake.native.jvm (use public, Connect-safe APIs): {offenders}"


def test_an_allowed_function_is_skipped_and_nothing_else() -> None:
    code = "def probe():\n    return SparkContext._jvm\n\ndef other():\n    return SparkContext._jvm\n"
    assert sorted(u for _, u in _uses(ast.parse(code), frozenset({"probe"}))) == ["._jvm", "SparkContext"]


def test_the_scan_sees_each_kind_of_use() -> None:
    code = ("import py4j.java_gateway\nfrom py4j import protocol\nspark.sparkContext.setLogLevel('ERROR')\n"
            "df._jdf\ngetattr(spark, '_jsparkSession')\ndf.rdd.map(f)\nspark.conf.get('spark.master')\n")
    assert sorted(u for _, u in _uses(ast.parse(code))) == sorted([
        "import py4j.java_gateway", "import py4j", ".sparkContext", "._jdf", "'_jsparkSession'", ".rdd"])
