"""The shape of the library: no import cycles between its packages, a public API per package, one exception
base per package. Parsed with ``ast`` (function-local and ``TYPE_CHECKING`` imports count: each is a
dependency the moment it runs), so nothing here starts Spark."""

from __future__ import annotations

import ast
import importlib
import inspect
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import lakeshard
from lakeshard.downstream import TRANSFORMATIONS
from lakeshard.errors import LakeshardError

LIB = Path(lakeshard.__file__).parent


def _modules(root: Path) -> Iterator[tuple[str, Path]]:
    """Yield ``(dotted module name, path)`` of every module under the package directory ``root``.

    Left out: files in a folder without ``__init__.py`` (no package), and the Lakeflow pipeline's source files
    (:data:`lakeshard.downstream.TRANSFORMATIONS`), which the pipeline runner runs by path, never imports, and
    which need its Spark session to run at all.
    """
    for path in sorted(root.rglob("*.py")):
        if any(not (d / "__init__.py").exists() for d in path.parents if d.is_relative_to(root)):
            continue
        if path.parent == TRANSFORMATIONS and path.name != "__init__.py":
            continue
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path


def _unit(module: str) -> str:
    """Return the unit a module belongs to: its package below the root, or itself for a top-level module."""
    return ".".join(module.split(".")[:2])


def package_edges(root: Path) -> dict[str, set[str]]:
    """Return, for every unit under ``root``, the other units its modules import (anywhere in the module)."""
    top = root.name
    edges: dict[str, set[str]] = {}
    for module, path in _modules(root):
        me = _unit(module)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: resolve against this module's package
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                # `from lakeshard import routing` imports the package lakeshard.routing
                targets = [f"{stem}.{a.name}" for a in node.names] if stem == top else [stem]
            for target in targets:
                if target.startswith(top + ".") and _unit(target) != me:
                    edges.setdefault(me, set()).add(_unit(target))
    return edges


def import_cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """Return one shortest cycle per strongly connected group of units (``[a, b, ..., a]``), sorted."""
    cycles: set[tuple[str, ...]] = set()
    for start in edges:
        # Breadth-first from start: the first path back to it is a shortest cycle through it.
        paths: list[list[str]] = [[start]]
        seen = {start}
        found: list[str] | None = None
        while paths and found is None:
            nxt: list[list[str]] = []
            for path in paths:
                for n in sorted(edges.get(path[-1], ())):
                    if n == start:
                        found = [*path, start]
                        break
                    if n not in seen:
                        seen.add(n)
                        nxt.append([*path, n])
                if found:
                    break
            paths = nxt
        if found:
            ring = found[:-1]
            i = ring.index(min(ring))  # one spelling per cycle: start at its smallest unit
            cycles.add(tuple([*ring[i:], *ring[:i], ring[i]]))
    return [list(c) for c in sorted(cycles)]


def test_no_import_cycle_between_packages() -> None:
    cycles = import_cycles(package_edges(LIB))
    assert not cycles, "import cycles between packages (move the shared name to lakeshard.tables, or the " \
        "function to the package that owns it):\n" + "\n".join(" -> ".join(c) for c in cycles)


def module_edges(root: Path) -> dict[str, set[str]]:
    """Return, for every module under ``root`` that is not a package face, the other such modules it imports.

    Faces (``__init__.py``) are left out: they name their package's modules for readers and load them lazily, so
    an arrow through a face says nothing about which module needs which.
    """
    modules = dict(_modules(root))
    edges: dict[str, set[str]] = {}
    for module, path in modules.items():
        if path.name == "__init__.py":
            continue
        package = module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                targets = [stem, *(f"{stem}.{a.name}" for a in node.names)]
            for target in targets:
                if target in modules and target != module and modules[target].name != "__init__.py":
                    edges.setdefault(module, set()).add(target)
    return edges


def test_no_import_cycle_between_modules() -> None:
    cycles = import_cycles(module_edges(LIB))
    assert not cycles, "import cycles between modules (a TYPE_CHECKING import counts: the two modules can no " \
        "longer be read one after the other):\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_module_cycle_check_sees_type_checking_imports(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n")
    (root / "b.py").write_text("from .a import A\n")
    assert import_cycles(module_edges(root)) == [["pkg.a", "pkg.b", "pkg.a"]]


def test_the_cycle_check_sees_function_local_and_relative_imports(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    for sub in ("a", "b", "c"):
        (root / sub).mkdir(parents=True)
        (root / sub / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "a" / "x.py").write_text("def f():\n    from pkg.b.y import g\n    return g\n")
    (root / "b" / "y.py").write_text("from ..c import z\n")
    (root / "c" / "z.py").write_text("from pkg import a\n")
    assert import_cycles(package_edges(root)) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]


def test_table_names_are_spelled_only_in_the_catalog() -> None:
    # A module-level constant holding a table's name outside lakeshard.tables is a second definition of it.
    from lakeshard.tables import TABLES

    found = []
    for module, path in _modules(LIB):
        if _unit(module) == "lakeshard.tables":
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            if isinstance(value, ast.Constant) and value.value in TABLES:
                found.append(f"{module}:{node.lineno} = {value.value!r}")
    assert not found, "table names defined outside lakeshard.tables (import them from there):\n" + "\n".join(found)


def _packages() -> list[str]:
    return sorted(p.name for p in LIB.iterdir() if p.is_dir() and any(p.glob("*.py")))


@pytest.mark.parametrize("package", _packages())
def test_every_package_declares_its_public_api(package: str) -> None:
    assert (LIB / package / "__init__.py").exists(), f"lakeshard.{package} has no __init__.py"
    module = importlib.import_module(f"lakeshard.{package}")
    names = getattr(module, "__all__", None)
    assert names, f"lakeshard.{package} declares no __all__"
    missing = [n for n in names if not hasattr(module, n)]
    assert not missing, f"lakeshard.{package}.__all__ names what it cannot give: {missing}"


def test_each_package_has_one_exception_base() -> None:
    # Every error class a package defines derives, within the package, from one class directly under the
    # library's errors (LakeshardError or one of lakeshard.errors' classes).
    roots: dict[str, set[str]] = {}
    for module, _ in _modules(LIB):
        if _unit(module) in ("lakeshard", "lakeshard.errors"):
            continue
        for cls in vars(importlib.import_module(module)).values():
            if inspect.isclass(cls) and issubclass(cls, LakeshardError) and cls.__module__ == module:
                own = [c for c in cls.__mro__ if c.__module__.startswith(_unit(module) + ".")
                       or c.__module__ == _unit(module)]
                roots.setdefault(_unit(module), set()).add(own[-1].__name__)
    several = {package: sorted(r) for package, r in roots.items() if len(r) > 1}
    assert not several, f"packages with more than one exception base: {several}"


def _imports(path: Path, module: str) -> Iterator[tuple[int, str]]:
    """Yield ``(line, imported module)`` for every import in the module at ``path``, relative ones resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            yield node.lineno, stem


def test_every_package_keeps_its_error_base_in_its_errors_module() -> None:
    # A base defined beside the code that raises it makes every other module of the package import that code.
    misplaced = []
    for module, path in _modules(LIB):
        unit = _unit(module)
        if unit in ("lakeshard", "lakeshard.errors") or path.parent == LIB:
            continue
        for cls in vars(importlib.import_module(module)).values():
            if inspect.isclass(cls) and issubclass(cls, LakeshardError) and cls.__module__ == module:
                bases = [b for b in cls.__bases__ if b.__module__.startswith(unit + ".")]
                if not bases and module != f"{unit}.errors":
                    misplaced.append(f"{module}.{cls.__name__}")
    assert not misplaced, "package error bases outside the package's errors.py:\n" + "\n".join(misplaced)


def test_other_packages_use_the_lake_package_through_its_face() -> None:
    reaching = []
    for module, path in _modules(LIB):
        if _unit(module) == "lakeshard.lake":
            continue
        for line, target in _imports(path, module):
            if target.startswith("lakeshard.lake."):
                reaching.append(f"{module}:{line} imports {target}")
    assert not reaching, "imports into lakeshard.lake's modules (use the names lakeshard.lake exports):\n" + \
        "\n".join(reaching)


def _face_names(package: str, root: Path = LIB) -> set[str]:
    """Return the names the face of the package ``package`` under ``root`` lists in its ``__all__`` (read, not
    imported)."""
    for node in ast.parse((root / package / "__init__.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


def imports_past_faces(root: Path) -> tuple[list[str], int]:
    """Return the imports between packages under ``root`` that go past the imported package's face (into one of
    its modules, or of a name its ``__all__`` does not list), and how many imports between packages there are."""
    past: list[str] = []
    between = 0
    for module, path in _modules(root):
        me = _unit(module)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                pairs = [(a.name, None) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                stem = node.module or ""
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    stem = ".".join(base + ([node.module] if node.module else []))
                pairs = [(stem, [a.name for a in node.names])]
            else:
                continue
            for target, names in pairs:
                parts = target.split(".")
                if parts[0] != root.name or len(parts) < 2 or _unit(target) == me or not (root / parts[1]).is_dir():
                    continue
                between += 1
                if len(parts) > 2:
                    past.append(f"{module}:{node.lineno} imports {target}")
                elif names and (hidden := sorted(set(names) - _face_names(parts[1], root))):
                    past.append(f"{module}:{node.lineno} imports {', '.join(hidden)} from {target}, not in its __all__")
    return past, between


def test_packages_import_each_other_through_their_faces() -> None:
    # A package's face (its __init__.py and __all__) is its front door: what another package may use.
    past, between = imports_past_faces(LIB)
    assert not past, f"{len(past)} of {between} imports between packages go past a package's face (add the name " \
        "to the face's __all__, or keep it inside its package):\n" + "\n".join(past)


def test_the_face_check_sees_modules_and_names_past_a_face(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    for sub in ("a", "b"):
        (root / sub).mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "a" / "__init__.py").write_text("from pkg.a.x import f\n__all__ = ['f']\n")
    (root / "a" / "x.py").write_text("def f(): ...\ndef g(): ...\n")
    (root / "b" / "__init__.py").write_text("__all__ = []\n")
    (root / "b" / "y.py").write_text("from pkg.a import f\nfrom pkg.a import g\nfrom ..a.x import f\n"
                                     "def h():\n    import pkg.a.x\n")
    past, between = imports_past_faces(root)
    assert between == 4
    assert past == ["pkg.b.y:2 imports g from pkg.a, not in its __all__", "pkg.b.y:3 imports pkg.a.x",
                    "pkg.b.y:5 imports pkg.a.x"]


def _imported_names(path: Path) -> dict[str, str]:
    """Return name -> the module it is imported from, for the ``from lakeshard... import`` lines of the module at
    ``path`` (absolute imports, anywhere in the module)."""
    return {a.asname or a.name: node.module for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lakeshard.")
            for a in node.names}


def test_no_face_hands_on_another_package_s_names() -> None:
    # A face lists its own package's names; a name of another package is imported from that package's face, not
    # from this face nor through one of this package's modules that imports it.
    found = []
    modules = dict(_modules(LIB))
    for package in _packages():
        unit = f"lakeshard.{package}"
        exported = _face_names(package)
        for name, home in _imported_names(LIB / package / "__init__.py").items():
            if name not in exported:
                continue
            if _unit(home) != unit:
                found.append(f"{unit} hands on {name} from {home}")
            elif home in modules and _unit(further := _imported_names(modules[home]).get(name, home)) != unit:
                found.append(f"{unit} hands on {name} from {further} (through {home})")
    assert not found, "faces re-exporting another package's names:\n" + "\n".join(found)


def test_no_module_imports_the_internals_of_another_package_s_sub_package() -> None:
    # lakeshard.<package>.<sub-package> is entered from outside <package> only through the sub-package's face.
    reaching = []
    for module, path in _modules(LIB):
        for line, target in _imports(path, module):
            parts = target.split(".")
            if parts[0] != "lakeshard" or len(parts) < 4 or _unit(target) == _unit(module):
                continue
            if (LIB / parts[1] / parts[2]).is_dir():
                reaching.append(f"{module}:{line} imports {target}")
    assert not reaching, "imports past a sub-package's face:\n" + "\n".join(reaching)


def test_only_the_lake_package_imports_the_delta_libraries() -> None:
    found = [f"{module}:{line} imports {target}" for module, path in _modules(LIB) if _unit(module) != "lakeshard.lake"
             for line, target in _imports(path, module) if target.split(".")[0] in ("deltalake", "delta")]
    assert not found, "Delta libraries imported outside lakeshard.lake:\n" + "\n".join(found)


def test_domain_packages_never_import_the_app_wing() -> None:
    found = [f"{module}:{line} imports {target}" for module, path in _modules(LIB) if _unit(module) != "lakeshard.app"
             for line, target in _imports(path, module) if _unit(target) == "lakeshard.app"]
    assert not found, "the presentation wing imported from below it (move the caller into lakeshard.app):\n" + \
        "\n".join(found)


def test_plots_and_progress_bars_are_drawn_only_in_the_app_wing() -> None:
    found = [f"{module}:{line} imports {target}" for module, path in _modules(LIB) if _unit(module) != "lakeshard.app"
             for line, target in _imports(path, module) if target.split(".")[0] in ("matplotlib", "tqdm")]
    assert not found, "matplotlib or tqdm (the app extra) imported outside lakeshard.app:\n" + "\n".join(found)


# lakeshard.utc's helpers, and the names private copies of them went by.
_TIME_HELPERS = {"as_utc", "aware", "micros", "from_micros", "millis", "_utc", "_epoch_ms", "_as_utc", "_micros"}


def test_time_helpers_are_defined_only_in_the_time_module() -> None:
    found = [f"{module}:{node.lineno} defines {node.name}"
             for module, path in _modules(LIB) if module != "lakeshard.utc"
             for node in ast.parse(path.read_text(encoding="utf-8")).body
             if isinstance(node, ast.FunctionDef) and node.name in _TIME_HELPERS]
    assert not found, "time helpers outside lakeshard.utc (import them from there):\n" + "\n".join(found)


def test_the_library_reports_the_version_the_project_declares() -> None:
    import importlib.metadata
    import tomllib

    project = tomllib.loads((LIB.parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    # One place holds the version: pyproject reads it from the library, and an install carries that one.
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "lakeshard.__version__"}
    assert importlib.metadata.version("lakeshard") == lakeshard.__version__


def test_the_router_module_only_orchestrates_a_batch() -> None:
    """The route (Spark and Arrow), the plan's rows, the metrics and the backlog estimate each have a module of
    their own; ``routing/router.py`` keeps the :class:`Router` that runs a batch through them."""
    path = LIB / "routing" / "router.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    functions = [f"router.py:{node.lineno} defines {node.name}" for node in tree.body
                 if isinstance(node, ast.FunctionDef)]
    assert not functions, "module-level functions in the router (give each job its module):\n" + "\n".join(functions)
    exported = next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets))
    assert sorted(exported) == ["RouteReport", "Router"], f"router.py exports {exported}: table names live in " \
        "lakeshard.tables, the routes in spark_route/arrow_route"


def key_spellings(source: str) -> list[int]:
    """Return the lines of ``source`` where a tuple, list or set literal names the event key's columns: both
    ``tenant_id`` and ``event_id`` among its strings (a key, or a column list that starts from one)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            strings = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            if {"tenant_id", "event_id"} <= strings:
                found.append(node.lineno)
    return found


def test_the_key_spelling_check_finds_key_lists_and_nothing_else() -> None:
    source = ('KEY = ["tenant_id", "event_id", "ts"]\n'
              'rows.select(("tenant_id", "event_id", "shard"))\n'
              'ts = rows.column("ts"); on = ["tenant_id", "hour"]\n'
              'record = {"tenant_id": t, "event_id": e}; row["tenant_id"], row["event_id"]\n'
              'keys = (*EVENT_KEY, "shard")\n')
    assert key_spellings(source) == [1, 2]


def test_the_event_key_is_spelled_only_in_the_catalog() -> None:
    # The dedupe key, its hash and the record's required fields are lakeshard.tables.EVENT_KEY; a list of its column
    # names elsewhere is a second definition of what makes two events the same event.
    found = [f"{module}:{line}" for module, path in _modules(LIB) if _unit(module) != "lakeshard.tables"
             for line in key_spellings(path.read_text(encoding="utf-8"))]
    assert not found, "the event key spelled outside lakeshard.tables (use EVENT_KEY from there):\n" + "\n".join(found)


# The delivery wing: one way into ``events`` (docs/architecture.md, "The delivery wing").

# The parts a shard writer owns and drives; a module that reads them off a writer re-implements a step of it.
WRITER_PARTS = frozenset({"feed", "cache", "index", "arrow_step", "spark_step", "retry_policy", "failures",
                          "dead_letters", "_excluded", "_before_commit", "_count_failure"})


def writer_part_reads(source: str) -> list[tuple[int, str]]:
    """Return ``(line, expression)`` of each read of a :data:`WRITER_PARTS` attribute off a name that holds a shard
    writer (``writer``, ``w``, ``self.writer``, ``*_writer``) in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in WRITER_PARTS:
            holder = ast.unparse(node.value)
            if holder.split(".")[-1] in {"w", "writer", "_writer"} or holder.endswith("_writer"):
                found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_the_writer_part_check_finds_reads_off_a_writer_and_nothing_else() -> None:
    source = "w.feed.saw(p)\nself.writer.failures += 1\nfused_writer.cache.drop()\nself.feed.saw(p)\nx.index(3)\n"
    assert writer_part_reads(source) == [(1, "w.feed"), (2, "self.writer.failures"), (3, "fused_writer.cache")]


def test_only_the_shard_writer_drives_its_parts() -> None:
    """Delivering a batch (a routed step or a batch in memory) is :class:`ShardWriter`'s job alone: no other module
    reads its feed, ID cache and index, engines, retry policy or failure count."""
    owner = LIB / "dedupe" / "writer.py"
    reads = [f"{path.relative_to(LIB)}:{line}: {expr}" for path in sorted(LIB.rglob("*.py")) if path != owner
             for line, expr in writer_part_reads(path.read_text(encoding="utf-8"))]
    assert not reads, "modules that drive a shard writer's parts (call a ShardWriter method instead):\n" + \
        "\n".join(reads)


WING = ("lakeshard.landing.", "lakeshard.routing.", "lakeshard.dedupe.", "lakeshard.pipelines.")
WALKED_ID = "walked-record-1"  # the event_id of the one landing record followed to ``events``


def _carries(value: object, depth: int = 0) -> bool:
    """Return whether ``value`` holds the walked record: its bytes or text, or an Arrow table with its event_id
    (also inside a list, tuple, dict or dataclass, two levels down)."""
    import dataclasses

    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(value, pa.Table | pa.RecordBatch):
        if "event_id" not in value.column_names or not value.num_rows:
            return False
        ids = value.column("event_id")
        return pa.types.is_string(ids.type) and bool(pc.any(pc.equal(ids, WALKED_ID)).as_py())
    if isinstance(value, str):
        return WALKED_ID in value
    if isinstance(value, bytes | bytearray | memoryview):
        return WALKED_ID.encode() in bytes(value)
    if depth > 1:
        return False
    if isinstance(value, list | tuple):
        return any(_carries(v, depth + 1) for v in value[:64])
    if isinstance(value, dict):
        return any(_carries(v, depth + 1) for v in list(value.values())[:64])
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return any(_carries(getattr(value, f.name, None), depth + 1) for f in dataclasses.fields(value))
    return False


def record_walk(tmp_path: Path, handoff: str) -> list[tuple[str, str, str]]:
    """Return the walk of one landing record to ``events`` through ``lakeshard route`` + ``ingest`` (``handoff``:
    ``"fused"`` or ``""``, the two jobs) on the embedded lakehouse: ``(module, function, caller module)`` of each
    call that hands the record (its bytes or rows) into a module of the delivery wing from another module, in
    order. Calls within a module, and code generated at run time (dataclass constructors), are no hand-over."""
    import json
    import sys

    from lakeshard.config import load_config
    from lakeshard.lake import open_lazy_store
    from lakeshard.pipelines import lakeshard_pipeline, run_pipeline

    landing = tmp_path / "landing"
    landing.mkdir()
    record = {"tenant_id": "t1", "event_id": WALKED_ID, "ts": "2026-01-01T10:00:00Z", "service": "api"}
    (landing / "walked.json").write_text(json.dumps(record) + "\n", encoding="utf-8")
    cfg = load_config(overrides={"lakehouse": str(tmp_path / "lh"), "landing": str(landing),
                                 "routing": {"total_shards": 2, "default_shard_count": 1}}, env={})
    store = open_lazy_store(cfg)
    walk: list[tuple[str, str, str]] = []

    def watch(frame: Any, event: str, arg: object) -> None:
        if event != "call":
            return
        code = frame.f_code
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(WING) or code.co_filename.startswith("<"):
            return
        back = frame.f_back
        while back is not None and back.f_code.co_filename.startswith("<"):
            back = back.f_back
        caller = back.f_globals.get("__name__", "") if back is not None else ""
        if caller == module:
            return
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        if any(_carries(frame.f_locals.get(n)) for n in names):
            walk.append((module, code.co_qualname, caller))

    sys.setprofile(watch)
    try:
        report = run_pipeline(None, store, cfg, lakeshard_pipeline(), flows=["route", "ingest"], handoff=handoff)
    finally:
        sys.setprofile(None)
    assert report.ok, report.render()
    events = store.read_table_arrow(cfg.table_uri("events"), ["event_id"]).column("event_id").to_pylist()
    assert events == [WALKED_ID]
    return walk


def visits(walk: Sequence[tuple[str, str, str]]) -> dict[str, int]:
    """Return how many times the walk enters each module (hand-overs into the module it is in count once)."""
    counts: dict[str, int] = {}
    for i, (module, _, _) in enumerate(walk):
        if i == 0 or walk[i - 1][0] != module:
            counts[module] = counts.get(module, 0) + 1
    return counts


def test_visits_count_entries_not_hand_overs_in_a_row() -> None:
    walk = [("a", "f", "x"), ("a", "g", "x"), ("b", "h", "a"), ("a", "i", "b"), ("b", "j", "a"), ("a", "k", "b")]
    assert visits(walk) == {"a": 3, "b": 2}


@pytest.fixture(scope="module")
def record_walks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[str, str, str]]]:
    return {name: record_walk(tmp_path_factory.mktemp(name), handoff)
            for name, handoff in (("fused", "fused"), ("two-job", ""))}


@pytest.mark.parametrize("path", ["fused", "two-job"])
def test_one_landing_record_visits_each_delivery_module_at_most_twice(
        record_walks: dict[str, list[tuple[str, str, str]]], path: str) -> None:
    walk = record_walks[path]
    assert {"lakeshard.landing.arrow_read", "lakeshard.routing.arrow_route", "lakeshard.dedupe.engines"} <= \
        {module for module, _, _ in walk}, walk
    again = {module: n for module, n in visits(walk).items() if n > 2}
    assert not again, f"{path}: modules the record enters more than twice: {again}\n" + \
        "\n".join(f"  {caller} -> {module}.{function}" for module, function, caller in walk)


def test_the_router_hands_a_fused_batch_straight_to_the_one_delivery_entry(
        record_walks: dict[str, list[tuple[str, str, str]]]) -> None:
    """On the fused path the record goes from the router to :meth:`ShardWriter.deliver` with nothing between:
    the flows wire the writers, they do not pass the batch on."""
    walk = record_walks["fused"]
    after_router = [(m, f) for m, f, caller in walk if caller == "lakeshard.routing.router"
                    and m.startswith(("lakeshard.dedupe.", "lakeshard.pipelines."))]
    assert after_router[:1] == [("lakeshard.dedupe.writer", "ShardWriter.deliver")], walk
    assert [f for m, f, _ in walk if m == "lakeshard.dedupe.writer"] == ["ShardWriter.deliver"], walk


def test_the_runtime_package_holds_the_session_factory_only() -> None:
    # The JVM's tuning (lakeshard.jvm), the process's threads and memory (lakeshard.process) and the notebooks'
    # parameters (lakeshard.notebook) each have a package of their own: runtime is where a session comes from.
    modules = sorted(p.stem for p in (LIB / "runtime").glob("*.py") if p.stem != "__init__")
    assert modules == ["environments", "session"], f"lakeshard.runtime holds more than the session factory: {modules}"


def test_figures_are_drawn_only_in_the_plots_package() -> None:
    found = [f"{module}:{line} imports {target}" for module, path in _modules(LIB)
             if not module.startswith("lakeshard.app.plots")
             for line, target in _imports(path, module) if target.split(".")[0] == "matplotlib"]
    assert not found, "matplotlib imported outside lakeshard.app.plots (give the figure a module there):\n" + \
        "\n".join(found)
