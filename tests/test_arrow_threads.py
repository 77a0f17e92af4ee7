"""Arrow joins and groupings of in-memory tables run on the calling thread, so a finished process exits cleanly.

By default Acero runs ``Table.join`` and ``Table.group_by`` on Arrow's CPU thread pool. A task closure there can
hold the last reference to a column whose memory numpy owns (``pa.array(np.arange(n))`` is zero-copy); freeing
it takes the GIL from the pool thread. If that happens while the interpreter is finalizing, CPython 3.11 ends
the thread with ``pthread_exit``, whose forced unwind through the C++ destructor calls ``std::terminate``: the
process aborts ("terminate called without an active exception", SIGABRT) after its work is done and committed.
A core dump of such an abort (an allocator process in the race test) showed exactly this stack:
``NumPyBuffer::~NumPyBuffer`` under ``SourceNode::SliceAndDeliverMorsel`` on a pool thread. A CLI run that
aborts at exit reports failure to its scheduler. With ``use_threads=False`` Acero runs on the calling thread, and
the driver-side tables joined here are small. The scan reads the syntax tree of every module: every
``.group_by(...)`` call (Spark's is ``groupBy``) and every ``.join(...)`` with a ``join_type=`` (Spark's takes
``how``) must pass ``use_threads=False``.
"""

from __future__ import annotations

import ast
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "lib" / "lakeshard"


def _threaded_arrow_calls(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        keywords = {k.arg: k.value for k in node.keywords}
        arrow = node.func.attr == "group_by" or (node.func.attr == "join" and "join_type" in keywords)
        serial = isinstance(keywords.get("use_threads"), ast.Constant) and keywords["use_threads"].value is False
        if arrow and not serial:
            found.append((node.lineno, f".{node.func.attr}"))
    return found


def test_arrow_joins_and_groupings_run_on_the_calling_thread() -> None:
    offenders = {}
    for path in sorted(LIB.rglob("*.py")):
        if uses := _threaded_arrow_calls(ast.parse(path.read_text(), str(path))):
            offenders[path.relative_to(LIB).as_posix()] = uses
    assert not offenders, f"Arrow join/group_by on the CPU thread pool (pass use_threads=False): {offenders}"


def test_the_scan_tells_arrow_calls_from_spark_and_strings() -> None:
    code = ("t.group_by(['k']).aggregate([])\n"
            "t.join(o, 'k', join_type='left semi')\n"
            "t.group_by('k', use_threads=False).aggregate([])\n"
            "t.join(o, 'k', join_type='inner', use_threads=False)\n"
            "df.join(F.broadcast(o), 'k', 'left_anti')\n"
            "', '.join(names)\n"
            "df.groupBy('k').count()\n")
    assert sorted(_threaded_arrow_calls(ast.parse(code))) == [(1, ".group_by"), (2, ".join")]
