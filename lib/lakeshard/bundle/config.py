"""Read a Databricks asset bundle (``databricks.yml`` and its ``include`` files) and merge it as a target deploys it.

The merge follows the Databricks CLI: a target's ``resources`` (in ``databricks.yml`` or in any included file) are
merged into the bundle's key by key, lists appended; the target's variable values replace the declared defaults;
its ``workspace``, ``run_as``, ``permissions``, ``presets``, ``artifacts``, ``sync`` and ``bundle`` merge into the
top level. Nothing here talks to a workspace: values only a deploy knows (the deployer's name, a ``lookup``
variable) stay as readable placeholders.

Example::

    bundle = load_bundle(Path("."))
    config = bundle.merged("prod")            # what `databricks bundle validate -t prod` would merge
    resolved = bundle.resolved("dev")         # with ${var.*}, ${bundle.*}, resource fields and dev prefixes filled in
"""

from __future__ import annotations

import copy
import glob
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lakeshard.bundle.errors import BundleError

__all__ = [
    "TARGET_KEYS", "USER", "Bundle", "BundleFile", "load_bundle", "merge", "resolve_resource_fields", "substitute",
]

# What a target gives beside resources and variables, merged into the top level of the configuration.
TARGET_KEYS = ("bundle", "workspace", "run_as", "permissions", "presets", "artifacts", "sync")
# How a resolved configuration spells the deploying user's short name, which only a deploy knows.
USER = "<user>"

_VAR_REF = re.compile(r"\$\{var\.([A-Za-z_][\w-]*)\}")
_RESOURCE_FIELD = re.compile(r"\$\{resources\.([A-Za-z_]+)\.([A-Za-z_][\w-]*)\.([A-Za-z_]+)\}")
_CURRENT_USER = re.compile(r"\$\{workspace\.current_user\.(?:short_name|userName|domain_friendly_name)\}")


@dataclass(frozen=True)
class BundleFile:
    """One YAML file of a bundle: its path relative to the bundle's root, and its data."""

    path: str
    doc: Mapping[str, Any]


@dataclass(frozen=True)
class Bundle:
    """A bundle as its files hold it: ``databricks.yml`` first, then the included files in name order."""

    root: Path
    files: tuple[BundleFile, ...]

    @property
    def config(self) -> Mapping[str, Any]:
        """Return the data of ``databricks.yml``."""
        return self.files[0].doc

    @property
    def name(self) -> str:
        """Return the bundle's name (``bundle.name``)."""
        return str((self.config.get("bundle") or {}).get("name", ""))

    @property
    def targets(self) -> tuple[str, ...]:
        """Return the names of the targets ``databricks.yml`` declares, in its order."""
        return tuple(self.config.get("targets") or {})

    def target(self, name: str) -> Mapping[str, Any]:
        """Return target ``name`` as ``databricks.yml`` declares it.

        Raises:
            BundleError: the bundle declares no such target (the message names the known ones).
        """
        if name not in self.targets:
            known = ", ".join(self.targets) or "none"
            raise BundleError(f"{self.root / 'databricks.yml'}: no target {name!r} (known targets: {known})")
        target: Mapping[str, Any] = (self.config.get("targets") or {}).get(name) or {}
        return target

    def mode(self, target: str) -> str:
        """Return the target's ``mode`` (``development``, ``production``), or ``""`` when it gives none."""
        return str(self.target(target).get("mode") or "")

    def merged(self, target: str) -> dict[str, Any]:
        """Return the configuration ``target`` deploys, merged as the CLI merges it, references left as written.

        Its ``variables`` keep each declaration with the target's value as ``default`` (or its ``lookup``).
        """
        spec = self.target(target)
        out: dict[str, Any] = {k: v for k, v in self.config.items() if k not in ("targets", "include", "resources")}
        resources: dict[str, Any] = {}
        for file in self.files:
            resources = merge(resources, file.doc.get("resources") or {})
        for file in self.files:
            over = (((file.doc.get("targets") or {}).get(target) or {}).get("resources")) or {}
            resources = merge(resources, over)
        if resources:
            out["resources"] = resources
        for key in TARGET_KEYS:
            if key in spec:
                out[key] = merge(out.get(key), spec[key])
        variables = {name: dict(decl or {}) for name, decl in (self.config.get("variables") or {}).items()}
        for name, value in (spec.get("variables") or {}).items():
            decl = variables.setdefault(name, {})
            decl.pop("default", None)
            decl.pop("lookup", None)
            if isinstance(value, Mapping) and "lookup" in value:
                decl["lookup"] = dict(value["lookup"])
            else:
                decl["default"] = value
        if variables:
            out["variables"] = variables
        return copy.deepcopy(out)  # the caller's to change: nothing in it is shared with the bundle's files

    def variable_values(self, target: str) -> dict[str, Any]:
        """Return each variable's value in ``target``; a ``lookup`` variable reads ``<lookup KIND 'NAME'>``."""
        values: dict[str, Any] = {}
        for name, decl in (self.merged(target).get("variables") or {}).items():
            if "lookup" in decl:
                kind, key = next(iter(decl["lookup"].items()))
                values[name] = f"<lookup {kind} {key!r}>"
            else:
                values[name] = decl.get("default")
        return values

    def resolved(self, target: str, *, user: str = USER) -> dict[str, Any]:
        """Return :meth:`merged` with ``${var.*}``, ``${bundle.name}``, ``${bundle.target}``, the deployer's name
        (``user``) and ``${resources.<kind>.<name>.<field>}`` of scalar fields filled in.

        In development mode, names get the prefixes the CLI gives them before it resolves references: ``[dev
        <user>] `` for jobs and pipelines, ``dev_<user>_`` for schemas (volumes keep theirs).
        """
        config = self.merged(target)
        values = self.variable_values(target)
        config.pop("variables", None)
        known = {"bundle.name": self.name, "bundle.target": target}
        out: dict[str, Any] = substitute(config, values, known, user)
        if self.mode(target) == "development":
            resources = out.get("resources") or {}
            for kind in ("jobs", "pipelines"):
                for spec in (resources.get(kind) or {}).values():
                    spec["name"] = f"[dev {user}] {spec.get('name', '')}"
            for spec in (resources.get("schemas") or {}).values():
                spec["name"] = f"dev_{user}_{spec.get('name', '')}"
        return resolve_resource_fields(out)


def merge(base: Any, over: Any) -> Any:
    """Return ``over`` merged into ``base`` as a target merges into a bundle: mappings key by key, lists appended,
    anything else replaced by ``over``."""
    if isinstance(base, Mapping) and isinstance(over, Mapping):
        return {**base, **{k: merge(base.get(k), v) for k, v in over.items()}}
    if isinstance(base, list) and isinstance(over, list):
        return base + over
    return over


def substitute(node: Any, values: Mapping[str, Any], known: Mapping[str, str] | None = None,
               user: str | None = None) -> Any:
    """Return ``node`` with each ``${var.X}`` of ``values`` replaced (a whole-string reference keeps the value's
    type), each ``${<key>}`` of ``known`` replaced, and the deployer's name replaced by ``user`` when given."""
    if isinstance(node, Mapping):
        return {k: substitute(v, values, known, user) for k, v in node.items()}
    if isinstance(node, list):
        return [substitute(v, values, known, user) for v in node]
    if not isinstance(node, str):
        return node
    whole = _VAR_REF.fullmatch(node)
    if whole and whole.group(1) in values:
        return substitute(values[whole.group(1)], values, known, user)
    text = _VAR_REF.sub(lambda m: str(values.get(m.group(1), m.group(0))), node)
    for key, value in (known or {}).items():
        text = text.replace("${" + key + "}", value)
    if user is not None:
        text = _CURRENT_USER.sub(user, text)
    return text


def resolve_resource_fields(config: dict[str, Any]) -> dict[str, Any]:
    """Return ``config`` with each ``${resources.<kind>.<name>.<field>}`` of a scalar field the configuration gives
    replaced by that field's value; references to what only a deploy knows (``.id``) stay."""
    resources = config.get("resources") or {}

    def field(m: re.Match[str]) -> str:
        value = ((resources.get(m.group(1)) or {}).get(m.group(2)) or {}).get(m.group(3))
        return str(value) if isinstance(value, str | int | float) and "${resources." not in str(value) else m.group(0)

    def walk(node: Any) -> Any:
        if isinstance(node, Mapping):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return _RESOURCE_FIELD.sub(field, node) if isinstance(node, str) else node

    for _ in range(4):  # a field may name another resource's field (a volume's schema_name, say)
        resources = config.get("resources") or {}
        again = walk(config)
        if again == config:
            break
        config = again
    return config


def load_bundle(root: Path) -> Bundle:
    """Return the bundle whose ``databricks.yml`` is in ``root``, with the files its ``include`` globs name.

    Raises:
        BundleError: no ``databricks.yml`` in ``root``, a file that is not YAML or not a mapping, or PyYAML missing
            (it comes with the ``app`` extra).
    """
    try:
        import yaml
    except ImportError:
        raise BundleError("reading a bundle needs PyYAML: pip install 'lakeshard[app]'") from None
    root = root.resolve()
    main = root / "databricks.yml"
    if not main.is_file():
        raise BundleError(f"{root}: no databricks.yml here (run from the bundle's folder or pass --bundle)")

    def read(path: Path) -> Mapping[str, Any]:
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise BundleError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None
        if doc is None:
            return {}
        if not isinstance(doc, Mapping):
            raise BundleError(f"{path}: expected a mapping at the top level, found {type(doc).__name__}")
        return doc

    config = read(main)
    files = [BundleFile("databricks.yml", config)]
    for pattern in config.get("include") or []:
        for path in sorted(glob.glob(str(root / pattern))):
            files.append(BundleFile(str(Path(path).relative_to(root)), read(Path(path))))
    return Bundle(root, tuple(files))
