#!/usr/bin/env bash
# The laptop path to Databricks, exactly as docs/databricks.md says: a Python 3.12 virtual environment with
# `pip install ".[databricks]"` (databricks-connect 17.3, its own pyarrow), driving a Spark Connect server with
# Delta's jars that this script starts: scripts/connect_server.py in a Python 3.12 environment of the local extra
# (.venv-laptop-server/: pyspark 4.2 with the Delta jars `make env` resolved), since a Spark Connect client's Python
# functions run on the server only under the same Python line, as on serverless. Runs, through that client, on
# Delta's engine:
#   1. lakeshard doctor,
#   2. lakeshard ingest of a landing zone generated with a fresh seed, run again after files are redelivered under new
#      names, checked by an independent reader (delta-rs) against the zone's ground truth,
#   3. the store contract, both hand-offs (fused and two-job) with a crash replayed, a close and a compaction, and the
#      small demo on Delta's engine (tests/lake/test_store_contract.py, tests/runtime/handoffs_suite.py,
#      tests/runtime/connect_suite.py).
# Usage: bash scripts/matrix/laptop.sh        (environment in .venv-dbc/, reused while pyproject.toml is unchanged)
set -euo pipefail
cd "$(dirname "$0")/../.."
# The whole script is one function, read in full before any of it runs (see dbr173.sh).
main() {
. scripts/matrix/common.sh
matrix_init laptop
venv=.venv-dbc
server=.venv-laptop-server

python="$(find_python 3.12)" || skip "no Python 3.12 interpreter (python3.12 on PATH, pyenv's 3.12.x, or LAKESHARD_PYTHON312)"
compgen -G ".delta-jars/delta-spark_*.jar" >/dev/null || skip "no Delta jars in .delta-jars/ (make env resolves them with mvn)"
export LAKESHARD_DELTA_JARS="$PWD/.delta-jars"
key="$(digest pyproject.toml)"
ensure_env "$server" "$python" "$key" "$server/bin/python" -m pip install --quiet ".[local]"
"$server/bin/python" -m pip install --quiet --no-deps --force-reinstall .
server_python="$server/bin/python"
client() {
  # As docs/databricks.md says; then the demo's figures (the app extra) and the tests' own tools (tests/conftest.py
  # imports hypothesis), nothing of the local extra.
  "$venv/bin/python" -m pip install --quiet ".[databricks]" \
    && "$venv/bin/python" -m pip install --quiet ".[databricks,app]" "pytest>=8" "pytest-timeout>=2.3" "hypothesis>=6.100"
}
ensure_env "$venv" "$python" "$key" client
step "installing lakeshard from this checkout (a wheel, as pip install . does)"
"$venv/bin/python" -m pip install --quiet --no-deps --force-reinstall .
rm -rf build lib/*.egg-info
if "$venv/bin/python" -m pip show pyspark >/dev/null 2>&1; then
  echo "error: laptop: $venv has pyspark beside databricks-connect, which replaces it" >&2
  exit 1
fi
step "installed: $("$venv/bin/python" -c 'import importlib.metadata as m; print(", ".join(
  f"{d} {m.version(d)}" for d in ("databricks-connect", "pyarrow", "pandas", "numpy", "deltalake")))')"

# The server: a local Spark driver with Delta's jars and the Spark Connect plugin, stopped when this script ends.
port="$("$server_python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
work="$(mktemp -d "${TMPDIR:-/tmp}/lakeshard-laptop.XXXXXX")"
mkfifo "$work/server-stdin"
"$server_python" scripts/connect_server.py "$port" <"$work/server-stdin" >"$work/server.out" 2>"$work/server.err" &
server_pid=$!
exec 7>"$work/server-stdin"  # the server stops when this closes: at exit, however the script ends
trap 'exec 7>&-; sleep 5; kill $server_pid 2>/dev/null || true; wait $server_pid 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 180); do
  grep -q ready "$work/server.out" 2>/dev/null && break
  kill -0 $server_pid 2>/dev/null || { tail -20 "$work/server.err"; echo "error: laptop: the Spark Connect server did not start" >&2; exit 1; }
  sleep 1
done
grep -q ready "$work/server.out" || { echo "error: laptop: the Spark Connect server was not ready in 180 s" >&2; exit 1; }
remote="sc://127.0.0.1:$port"
step "Spark Connect server with Delta's jars at $remote"

client=("$matrix_root/$venv/bin/lakeshard")
export LAKESHARD_SPARK_ADAPTER=native
run doctor env LAKESHARD_SPARK_REMOTE="$remote" "${client[@]}" doctor

ingest() {
  local seed=$((RANDOM * 32768 + RANDOM)) zone="$work/zone" lakehouse="$work/lakehouse"
  echo "landing zone seed $seed"
  "${client[@]}" generate --landing "$zone" --events 20000 --tenants 40 --seed "$seed" --quiet
  LAKESHARD_SPARK_REMOTE="$remote" "${client[@]}" ingest --lakehouse "$lakehouse" --landing "$zone"
  # A producer redelivers two files under new names; the same command runs again.
  for f in $(find "$zone" -name 'part-*' -not -path '*/_truth/*' | sort | head -2); do
    cp "$f" "$(dirname "$f")/again-$(basename "$f")"
  done
  LAKESHARD_SPARK_REMOTE="$remote" "${client[@]}" ingest --lakehouse "$lakehouse" --landing "$zone"
  "$matrix_root/$venv/bin/python" - "$zone" "$lakehouse/events" <<'PY'
import sys

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

zone, events = sys.argv[1:]
truth = pq.read_table(f"{zone}/_truth/events.parquet", columns=["tenant_id", "event_id", "ts_ms"])
got = DeltaTable(events).to_pyarrow_table(columns=["tenant_id", "event_id", "ts"])
micros = got.column("ts").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist()
want = set(zip(truth.column("tenant_id").to_pylist(), truth.column("event_id").to_pylist(),
               truth.column("ts_ms").to_pylist(), strict=True))
have = list(zip(got.column("tenant_id").to_pylist(), got.column("event_id").to_pylist(),
                [m // 1000 for m in micros], strict=True))
print(f"events: {len(have)} rows, {len(set(have))} distinct; truth: {len(want)} events")
assert len(have) == len(set(have)), "a duplicate in events"
assert set(have) == want, f"{len(want - set(have))} missing, {len(set(have) - want)} unexpected"
PY
}
run ingest ingest
run tests env LAKESHARD_TEST_SPARK_REMOTE="$remote" LAKESHARD_REQUIRE_DELTA_JVM=1 "$venv/bin/python" -m pytest \
  -p no:cacheprovider -q --timeout 2400 tests/lake/test_store_contract.py tests/runtime/handoffs_suite.py \
  tests/runtime/connect_suite.py
finish "doctor, an ingest with redelivered files, the store contract, both hand-offs and the demo on Delta's engine passed through databricks-connect"
}

main "$@"
