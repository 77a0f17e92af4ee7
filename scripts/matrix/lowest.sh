#!/usr/bin/env bash
# The lowest versions pyproject.toml allows: every direct dependency at the lower end of its declared range
# (uv's --resolution lowest-direct: pyarrow 18, pandas 2.2.0, numpy 1.26.0, matplotlib 3.8, tqdm 4.66, ...), on the
# lowest Python it allows (3.11). Runs, on the embedded lakehouse:
#   1. the demo at 20,000 events (exactly once against the generator's truth, closed buckets unchanged),
#   2. the ingest, routing, landing, dedupe and compaction tests and the command line's.
# Usage: bash scripts/matrix/lowest.sh        (environment in .venv-lowest/, reused while pyproject.toml is unchanged)
set -euo pipefail
cd "$(dirname "$0")/../.."
# The whole script is one function, read in full before any of it runs (see dbr173.sh).
main() {
. scripts/matrix/common.sh
matrix_init lowest
venv=.venv-lowest

python="$(find_python 3.11)" || skip "no Python 3.11 interpreter (python3.11 on PATH, pyenv's 3.11.x, or LAKESHARD_PYTHON311)"
lowest_versions() {
  "$venv/bin/python" -m pip install --quiet uv \
    && "$venv/bin/uv" pip install --quiet --python "$venv/bin/python" --resolution lowest-direct -e ".[local,dev,app]"
}
ensure_env "$venv" "$python" "$(digest pyproject.toml)" lowest_versions
"$venv/bin/python" -m pip check >/dev/null || { "$venv/bin/python" -m pip check; echo "error: lowest: the installed" \
  "packages do not agree with each other (above)" >&2; exit 1; }
step "installed: $("$venv/bin/python" -c 'import importlib.metadata as m; print(", ".join(
  f"{d} {m.version(d)}" for d in ("pyspark", "pyarrow", "pandas", "numpy", "deltalake", "matplotlib")))')"

work="$(mktemp -d "${TMPDIR:-/tmp}/lakeshard-lowest.XXXXXX")"
demo() {
  "$matrix_root/$venv/bin/lakeshard" demo --events 20000 --tenants 40 --out "$work/demo" --quiet | tee "$work/demo.log"
  grep -q "^result: all checks passed" "$work/demo.log"
}
run demo demo
# The embedded lakehouse's paths (Delta's engine runs on the same pyspark as today's pins: make test covers it); the
# SIGKILL harness is make test's (what it proves does not depend on the libraries' versions).
run tests "$venv/bin/python" -m pytest -p no:cacheprovider -q -m "not delta_jvm" -k "not sigkill" --timeout 1200 \
  -n "${TEST_WORKERS:-2}" --dist loadscope \
  tests/dedupe tests/compaction tests/routing tests/landing tests/test_sortorder.py tests/test_cli.py
rm -rf "$work"
finish "the demo, ingest, dedupe and compaction tests passed at the lowest versions"
}

main "$@"
