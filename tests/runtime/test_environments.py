"""The environment matrix as doctor knows it (lakeshard.runtime.environments) agrees with what the matrix installs
(pyproject.toml's ranges and pins, Delta's pom, scripts/matrix), and doctor's verdict names each difference."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from lakeshard.runtime import environments
from lakeshard.runtime.environments import TESTED_ENVIRONMENTS

ROOT = Path(__file__).resolve().parents[2]
BY_NAME = {e.name: e for e in TESTED_ENVIRONMENTS}


def _requirement(package: str) -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    everything = deps["dependencies"] + [d for extra in deps["optional-dependencies"].values() for d in extra]
    found = [d for d in everything if re.match(rf"{re.escape(package)}(\[[^\]]*\])?\s*[<>=!~]", d)]
    assert found, f"{package} is not in pyproject.toml"
    return found[0]


def _lower_bound(package: str) -> str:
    requirement = _requirement(package)
    match = re.search(r">=\s*([\d.]+)", requirement) or re.search(r"==\s*([\d.]+)", requirement)
    assert match, requirement
    return match[1]


def test_the_pins_and_lowest_entries_are_the_ends_of_pyproject_s_ranges() -> None:
    pyarrow = _requirement("pyarrow")
    upper = int(re.search(r"<\s*(\d+)", pyarrow)[1])  # type: ignore[index]
    assert BY_NAME["pins"].pyarrow == upper - 1  # the newest major the range allows: what a resolver picks
    assert BY_NAME["lowest"].pyarrow == int(_lower_bound("pyarrow").split(".")[0])
    pyspark = re.search(r"==\s*(\d+\.\d+)", _requirement("pyspark"))[1]  # type: ignore[index]
    assert BY_NAME["pins"].client == BY_NAME["pins"].server == BY_NAME["lowest"].client == pyspark
    python = re.search(r">=\s*(\d+\.\d+)", tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
                       ["requires-python"])[1]  # type: ignore[index]
    assert BY_NAME["lowest"].python == python
    delta = re.search(r"<delta.version>(\d+\.\d+)", (ROOT / "scripts/delta-jars/pom.xml").read_text())[1]  # type: ignore[index]
    assert BY_NAME["pins"].delta == BY_NAME["lowest"].delta == delta


def test_the_laptop_entry_is_the_databricks_extra_against_the_project_s_own_server() -> None:
    connect = _requirement("databricks-connect")
    assert 'python_version == "3.12"' in connect and BY_NAME["laptop"].python == "3.12"
    # databricks-connect 17.x is a Spark 4.0 client; the server scripts/matrix/laptop.sh starts is the local extra's
    # Spark with the jars make env resolves, which are the pins'.
    assert ">=17.3" in connect and BY_NAME["laptop"].client == "4.0"
    assert (BY_NAME["laptop"].server, BY_NAME["laptop"].delta) == (BY_NAME["pins"].server, BY_NAME["pins"].delta)
    script = (ROOT / "scripts/matrix/laptop.sh").read_text()
    assert 'pip install --quiet ".[local]"' in script and 'LAKESHARD_DELTA_JARS="$PWD/.delta-jars"' in script


def test_the_dbr173_entry_is_what_its_constraints_install() -> None:
    pins = dict(line.split("==") for line in (ROOT / "scripts/matrix/dbr173-constraints.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    entry = BY_NAME["dbr173"]
    assert entry.client == entry.server == ".".join(pins["pyspark"].split(".")[:2])
    assert entry.delta == ".".join(pins["delta-spark"].split(".")[:2])
    assert entry.pyarrow == int(pins["pyarrow"].split(".")[0])


def test_every_matrix_environment_has_its_script_and_make_runs_it() -> None:
    makefile = (ROOT / "Makefile").read_text()
    for env in TESTED_ENVIRONMENTS[1:]:
        assert (ROOT / "scripts" / "matrix" / f"{env.name}.sh").exists(), env.name
        assert f"scripts/matrix/{env.name}.sh" in makefile, env.name
    assert "make matrix" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("env", TESTED_ENVIRONMENTS, ids=lambda e: e.name)
def test_each_tested_environment_is_recognised_as_itself(env: environments.TestedEnvironment) -> None:
    verdict = environments.tested_environment(python=f"{env.python}.4", client_spark=f"{env.client}.1",
                                 server_spark=f"{env.server}.0", pyarrow=f"{env.pyarrow}.0.1")
    assert (verdict.name, verdict.differences) == (env.name, ())
    assert not verdict.describe().startswith("WARNING")


@pytest.mark.parametrize(("python", "client", "server", "pyarrow", "named"), [
    ("3.13.0", "4.2.0", "4.2.0", "26.0.0", "python 3.13"),
    ("3.11.7", "4.2.0", "4.2.0", "17.0.0", "pyarrow 17.0.0"),
    ("3.12.1", "4.0.0", "4.0.0", "27.0.0", "pyarrow 27.0.0"),
    ("3.12.1", "4.1.0", "4.1.0", "21.0.0", "client 4.1"),
    ("3.12.1", "4.0.0", "3.5.1", "19.0.1", "server 3.5"),
])
def test_an_environment_outside_the_matrix_is_a_warning_naming_what_differs(
    python: str, client: str, server: str, pyarrow: str, named: str
) -> None:
    verdict = environments.tested_environment(python=python, client_spark=client, server_spark=server, pyarrow=pyarrow)
    assert verdict.describe().startswith("WARNING: not an environment the matrix tests")
    assert named in verdict.describe()
