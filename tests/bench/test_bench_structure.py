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


# Benchmarks that time one internal piece of lakeshard by itself import it by its module: (bench module, lakeshard
# module) → what the benchmark measures. Everything else comes through a package's face.
MEASURES_INTERNALS = {
    ("bench_append_files", "lakeshard.lake.embedded.write"): "a commit with and without the embedded commit hooks",
    ("bench_commit_log", "lakeshard.lake.embedded.write"): "delta-rs commits with lakeshard's commit hooks",
    ("bench_balancing", "lakeshard.app.plots.balancing"): "draws the balancing simulation's figure",
    ("bench_balancing", "lakeshard.balancing.balancer"): "the balancer's candidate shards in the simulation",
    ("bench_close_check", "lakeshard.buckets.checksum"): "the bucket checksum, bucket by bucket against one pass",
    ("chaos_check", "lakeshard.buckets.checksum"): "re-reads each closed bucket's checksum after a round",
    ("bench_ingest", "lakeshard.lake.protocol.partitions"): "reads the floor's flat files' partition values",
    ("bench_planning", "lakeshard.compaction.fragment_table"): "the fragments table's build from commit infos",
    ("bench_refusals", "lakeshard.synth.malformed"): "lines only Arrow's JSON reader refuses",
    ("bench_scale", "lakeshard.app.demo"): "the demo's whole path at several sizes",
    ("profile_dedupe", "lakeshard.dedupe.engines"): "a writer step's phases, timed by wrapping them",
    ("profile_dedupe", "lakeshard.dedupe.feed"): "a writer step's phases, timed by wrapping them",
    ("profile_dedupe", "lakeshard.dedupe.index"): "a writer step's phases, timed by wrapping them",
    ("profile_ingest", "lakeshard.app.cli"): "`lakeshard ingest` by phase and thread, in process",
    ("bench_append_files", "lakeshard.lake.embedded.adapter"): "the embedded append, before and after its change",
    ("bench_native_commits", "lakeshard.jvm.replies"): "py4j's replies with Nagle's algorithm on and off",
    ("bench_refusals", "lakeshard.landing.arrow_json"): "the landing parse by the share of lines Arrow refuses",
    ("profile_dedupe", "lakeshard.dedupe.keyhash"): "a writer step's phases, timed by wrapping them",
    ("profile_dedupe", "lakeshard.lake.embedded.adapter"): "a writer step's phases, timed by wrapping them",
    ("profile_dedupe", "lakeshard.lake.embedded.log"): "a writer step's phases, timed by wrapping them",
    ("profile_dedupe", "lakeshard.lake.embedded.write"): "a writer step's phases, timed by wrapping them",
    ("profile_parse", "lakeshard.landing.arrow_json"): "the landing parse by phase, timed by wrapping them",
    ("profile_parse", "lakeshard.landing.arrow_read"): "the landing parse by phase, timed by wrapping them",
    ("profile_parse", "lakeshard.landing.batches"): "the landing parse by phase, timed by wrapping them",
}


def test_benchmarks_use_lakeshard_through_its_faces() -> None:
    import importlib

    lib = Path(importlib.import_module("lakeshard").__file__ or "").parent
    found = []
    for name, tree in _bench_modules():
        for line, module, imported in _imported_names(tree):
            if imported and (lib / "/".join(module.split(".")[1:]) / f"{imported}.py").is_file():
                module, imported = f"{module}.{imported}", ""  # `from lakeshard.landing import arrow_json`
            parts = module.split(".")
            if parts[0] != "lakeshard" or len(parts) < 2 or not (lib / parts[1]).is_dir():
                continue
            if len(parts) > 2 and (name, module) not in MEASURES_INTERNALS:
                found.append(f"bench/{name}.py:{line} imports {module}")
            elif len(parts) == 2 and imported and imported not in importlib.import_module(module).__all__:
                found.append(f"bench/{name}.py:{line} imports {imported} from {module}, not in its __all__")
    assert not found, "imports past a lakeshard package's face (use the face's names):\n" + "\n".join(found)
