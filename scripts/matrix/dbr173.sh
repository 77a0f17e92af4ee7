#!/usr/bin/env bash
# The Databricks Runtime 17.3 LTS-shaped classic environment: Python 3.12, pyspark 4.0 with Delta 4.0's jars, and the
# runtime's pyarrow, pandas and numpy (dbr173-constraints.txt, which names its source). It installs lakeshard there
# from this checkout as a wheel (as a job cluster gets it), then runs on Delta's own engine:
#   1. lakeshard doctor (which commit path the native adapter found on Delta 4.0's classes, and why),
#   2. the small demo (what make demo-native runs),
#   3. the store contract on the native adapter, classic session, and the commit-path tests.
# Usage: bash scripts/matrix/dbr173.sh        (environment in .venv-dbr173/ and .delta-jars-spark4.0/, reused)
set -euo pipefail
cd "$(dirname "$0")/../.."

# The whole script is one function, read in full before any of it runs: an edit to this file while it runs (a
# long demo) cannot change what the running copy does next.
main() {
. scripts/matrix/common.sh
matrix_init dbr173
venv=.venv-dbr173
jars=.delta-jars-spark4.0
constraints=scripts/matrix/dbr173-constraints.txt
delta_version="$(sed -n 's/^delta-spark==//p' "$constraints")"

python="$(find_python 3.12)" || skip "no Python 3.12 interpreter (python3.12 on PATH, pyenv's 3.12.x, or LAKESHARD_PYTHON312)"
# The third-party packages are installed once per constraints file; lakeshard itself on every run, from this checkout.
# The app extra for the demo; pytest, pytest-timeout and hypothesis for the tests (tests/conftest.py imports it).
ensure_env "$venv" "$python" "$(digest "$constraints" pyproject.toml)" "$venv/bin/python" -m pip install --quiet \
  -c "$constraints" ".[app]" pyspark delta-spark pytest pytest-timeout hypothesis
step "installing lakeshard from this checkout (a wheel, as a job cluster installs it)"
"$venv/bin/python" -m pip install --quiet --no-deps --force-reinstall .
rm -rf build lib/*.egg-info
if ! "$venv/bin/python" -m pip check >/dev/null; then
  "$venv/bin/python" -m pip check
  echo "error: dbr173: the installed packages do not agree with each other (above)" >&2
  exit 1
fi

if ! compgen -G "$jars/delta-spark_*-$delta_version.jar" >/dev/null; then
  step "resolving Delta $delta_version's jars into $jars/"
  # Delta 4.0 is built for one Spark, so its artifact id has no Spark infix (delta-spark_2.13).
  DELTA_VERSION="$delta_version" DELTA_ARTIFACT=delta-spark_2.13 DELTA_JARS_DEST="$jars" \
    bash scripts/install-delta-jars.sh "$venv/bin/python"
  compgen -G "$jars/delta-spark_*-$delta_version.jar" >/dev/null || skip "Delta $delta_version's jars are not installed"
fi
[ -e "$jars/lakeshard-delta-logstore.jar" ] || echo "warning: dbr173: no lakeshard log store in $jars/ (see above):" \
  "Delta's default log store is used for file: tables"
export LAKESHARD_DELTA_JARS="$PWD/$jars"

cd "$(mktemp -d "${TMPDIR:-/tmp}/lakeshard-dbr173.XXXXXX")"  # the demo's output and Spark's scratch, not the checkout
root="$matrix_root"
export LAKESHARD_SPARK_ADAPTER=native
run doctor "$root/$venv/bin/lakeshard" doctor
run demo "$root/$venv/bin/lakeshard" demo --events 2000 --tenants 10 --hours 1 --quiet
# The native half of the contract (the delta_jvm marker) and the commit path's own tests, on a classic session; Delta's
# engine is required (a missing jar fails, it does not skip).
run contract env LAKESHARD_REQUIRE_DELTA_JVM=1 "$root/$venv/bin/python" -m pytest -p no:cacheprovider -q \
  --rootdir "$root" -c "$root/pyproject.toml" -m delta_jvm --timeout 600 \
  "$root/tests/lake/test_store_contract.py" "$root/tests/lake/test_commit_path.py"
finish "doctor, the demo and the native store contract passed on Delta 4.0"
}

main "$@"
