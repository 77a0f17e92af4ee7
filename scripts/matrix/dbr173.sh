#!/usr/bin/env bash
# The Databricks Runtime 17.3 LTS-shaped classic environment: Python 3.12, pyspark 4.0 with Delta 4.0's jars, and the
# runtime's pyarrow, pandas and numpy (dbr173-constraints.txt, which names its source). It installs lakeshard there
# from this checkout as a wheel (as a job cluster gets it), then runs on Delta's own engine:
#   1. lakeshard doctor (which commit path the native adapter found on Delta 4.0's classes, and why),
#   2. the small demo (what make demo-native runs),
#   3. the store contract on the native adapter, classic session, and the commit-path tests.
# It exits non-zero when any of them fails.
#
# Without Python 3.12 (or mvn, or Maven Central) it prints "skipped: <reason>" and exits 0; CI sets
# LAKESHARD_REQUIRE_MATRIX=1, which makes any of those an error. LAKESHARD_PYTHON312 names the interpreter to use.
#
# Usage: bash scripts/matrix/dbr173.sh        (from anywhere; the environment is made in .venv-dbr173/ and
#                                             .delta-jars-spark4.0/ at the project's root, and reused)
set -euo pipefail
cd "$(dirname "$0")/../.."

# The whole script is one function, read in full before any of it runs: an edit to this file while it runs (a
# long demo) cannot change what the running copy does next.
main() {
venv=.venv-dbr173
jars=.delta-jars-spark4.0
constraints=scripts/matrix/dbr173-constraints.txt
delta_version="$(sed -n 's/^delta-spark==//p' "$constraints")"
required="${LAKESHARD_REQUIRE_MATRIX:-0}"

skip() {
  if [ "$required" != "0" ]; then
    echo "error: dbr173: $1 (LAKESHARD_REQUIRE_MATRIX is set: this environment must run)" >&2
    exit 1
  fi
  echo "skipped: dbr173: $1"
  exit 0
}

started=$SECONDS
step() { echo "== dbr173 [$((SECONDS - started))s] $*"; }

# ------------------------------------------------------------------------------------------------- interpreter
is_312() { "$1" -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1; }
python312="${LAKESHARD_PYTHON312:-}"
if [ -n "$python312" ]; then
  is_312 "$python312" || skip "LAKESHARD_PYTHON312=$python312 is not a working Python 3.12"
else
  # pyenv's own interpreters first: its python3.12 shim fails where 3.12 is installed but not selected.
  for candidate in "$(pyenv root 2>/dev/null || echo /nonexistent)"/versions/3.12*/bin/python python3.12; do
    if is_312 "$candidate"; then python312="$(command -v "$candidate")"; break; fi
  done
  [ -n "$python312" ] || skip "no Python 3.12 interpreter (python3.12 on PATH, pyenv's 3.12.x, or LAKESHARD_PYTHON312)"
fi

# ------------------------------------------------------------------------------------------------- install
# The third-party packages are installed once per constraints file; lakeshard itself on every run, from this checkout.
stamp="$venv/.installed-from-$(sha1sum "$constraints" pyproject.toml | sha1sum | cut -c1-12)"
if [ ! -e "$stamp" ]; then
  step "creating $venv with $python312 and the pins of $constraints"
  rm -rf "$venv"
  "$python312" -m venv "$venv" || skip "'$python312 -m venv' failed (python3.12-venv missing?)"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  # The app extra for the demo; pytest, pytest-timeout and hypothesis for the tests (tests/conftest.py imports it).
  "$venv/bin/python" -m pip install --quiet -c "$constraints" ".[app]" pyspark delta-spark \
    pytest pytest-timeout hypothesis || skip "pip could not install the pinned packages (no network to PyPI?)"
  touch "$stamp"
fi
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
"$venv/bin/python" -c 'from lakeshard.runtime.classdata import main; main()'
installed=$((SECONDS - started))

# ------------------------------------------------------------------------------------------------- runs
failed=()
cd "$(mktemp -d "${TMPDIR:-/tmp}/lakeshard-dbr173.XXXXXX")"  # the demo's output and Spark's scratch, not the checkout
run() {
  local name="$1"; shift
  local begun=$SECONDS
  step "$name: $*"
  if "$@"; then
    echo "== dbr173 $name passed in $((SECONDS - begun))s"
  else
    echo "== dbr173 $name FAILED (exit $?) after $((SECONDS - begun))s"
    failed+=("$name")
  fi
}
root="$OLDPWD"
export LAKESHARD_SPARK_ADAPTER=native
run doctor "$root/$venv/bin/lakeshard" doctor
run demo "$root/$venv/bin/lakeshard" demo --events 2000 --tenants 10 --hours 1
# The native half of the contract (the delta_jvm marker) and the commit path's own tests, on a classic session; Delta's
# engine is required (a missing jar fails, it does not skip).
run contract env LAKESHARD_REQUIRE_DELTA_JVM=1 "$root/$venv/bin/python" -m pytest -p no:cacheprovider -q \
  --rootdir "$root" -c "$root/pyproject.toml" -m delta_jvm --timeout 600 \
  "$root/tests/lake/test_store_contract.py" "$root/tests/lake/test_commit_path.py"

step "done: installed in ${installed}s, ran in $((SECONDS - started - installed))s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "dbr173: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "dbr173: doctor, demo and the native store contract passed"
}

main "$@"
