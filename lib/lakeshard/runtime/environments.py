"""The environments lakeshard is tested in (the environment matrix, ``make matrix``), and whether the running one is
among them, for ``lakeshard doctor``.

Each entry says what its CI run installs: the Python line, the Spark client and the Spark (with Delta) that runs the
queries, and the pyarrow. ``scripts/matrix/`` builds them; ``tests/runtime/test_environments.py`` holds this list
to those scripts' pins and to pyproject.toml's, so the two cannot drift apart.

Example::

    verdict = tested_environment(python="3.12", client_spark="4.0.0", server_spark="4.0.0", pyarrow="19.0.1")
    verdict.name  # "dbr173"
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TESTED_ENVIRONMENTS", "EnvironmentVerdict", "TestedEnvironment", "tested_environment"]


@dataclass(frozen=True)
class TestedEnvironment:
    """One environment of the matrix: its name, what it stands for, and the lines of what it installs."""

    name: str
    stands_for: str
    python: str  # major.minor
    client: str  # the Spark client's major.minor (pyspark's, or databricks-connect's pyspark)
    server: str  # the Spark that runs the queries (the same as the client's on a classic session)
    delta: str  # Delta's jars on that Spark
    pyarrow: int  # pyarrow's major version


TESTED_ENVIRONMENTS: tuple[TestedEnvironment, ...] = (
    TestedEnvironment("pins", "make test: the versions pyproject.toml pins", "3.11", "4.2", "4.2", "4.4", 26),
    TestedEnvironment("lowest", "every dependency at the lowest version pyproject.toml allows", "3.11", "4.2",
                      "4.2", "4.4", 18),
    TestedEnvironment("dbr173", "a Databricks Runtime 17.3 LTS-shaped classic cluster", "3.12", "4.0", "4.0", "4.0",
                      19),
    TestedEnvironment("laptop", "databricks-connect 17.3 on a laptop, as docs/databricks.md sets it up", "3.12",
                      "4.0", "4.2", "4.4", 24),
)
"""The matrix, in the order ``make matrix`` runs it (``pins`` is ``make test`` itself)."""


@dataclass(frozen=True)
class EnvironmentVerdict:
    """Which tested environment the running one matches (None: none), and what differs from the nearest one."""

    name: str | None
    differences: tuple[str, ...]

    def describe(self) -> str:
        """Return the verdict as doctor prints it."""
        if self.name is not None and not self.differences:
            return f"{self.name} (tested by the environment matrix, scripts/matrix)"
        nearest = f"nearest tested: {self.name}; " if self.name else ""
        return f"WARNING: not an environment the matrix tests ({nearest}{'; '.join(self.differences)})"


def _line(version: str) -> str:
    return ".".join(version.split(".")[:2])


def tested_environment(*, python: str, client_spark: str, server_spark: str, pyarrow: str,
                       environments: tuple[TestedEnvironment, ...] = TESTED_ENVIRONMENTS) -> EnvironmentVerdict:
    """Return which of ``environments`` the given versions match: the same Python and Spark lines, and a pyarrow
    within the majors the matrix tests on that Spark client line (its lowest and highest), the one of the nearest
    pyarrow where several do; else the nearest one and what differs from it."""
    got = {"python": _line(python), "client": _line(client_spark), "server": _line(server_spark)}
    arrow = int(pyarrow.split(".")[0]) if pyarrow.split(".")[0].isdigit() else -1

    def differences(env: TestedEnvironment) -> tuple[str, ...]:
        out = [f"{what} {got[what]} (tested {getattr(env, what)})"
               for what in ("python", "client", "server") if got[what] != getattr(env, what)]
        arrows = [e.pyarrow for e in environments if e.client == env.client]
        if not min(arrows) <= arrow <= max(arrows):
            out.append(f"pyarrow {pyarrow} (tested {min(arrows)} to {max(arrows)} with Spark {env.client} clients)")
        return tuple(out)

    ranked = sorted(environments, key=lambda e: (len(differences(e)), abs(e.pyarrow - arrow)))
    best = ranked[0]
    found = differences(best)
    return EnvironmentVerdict(best.name if len(found) < 3 else None, found)
