# lakeshard — the two commands of README.md, and what they stand on.
#   make demo   run the main job end to end on the embedded lakehouse (a fresh temporary lakehouse)
#   make demo-native   the same small run on Delta's own engine (the native adapter, Delta's jars from make env)
#   make test   lint (code and notebooks), type-check, and run every test (unit, integration, notebooks through nbval)
# Both create or reuse .venv, install what is missing (Java 17+ via apt when root), then run.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.lakeshard-installed
# Delta's JVM engine for the native adapter (scripts/install-delta-jars.sh; absent where Maven is unreachable).
DELTA_JARS := .delta-jars
DELTA_STAMP := $(DELTA_JARS)/.installed-from.pom.xml
DEMO_ARGS ?=
# pytest workers (pytest-xdist): each module's tests run on one worker, each worker with its own Spark sessions.
# Two fill a two-core machine: run alone, the suite leaves one core idle through its JVM starts and subprocesses;
# three were slower (1,995 s of pytest against 1,823 s for two on 2026-12-02, both cores 99% busy with three).
TEST_WORKERS ?= 2

.PHONY: demo demo-native test matrix lint typecheck unit notebooks bench chaos env java clean help

help:
	@echo "make demo   - run the main job end to end on a fresh embedded lakehouse"
	@echo "make demo-native - a small demo on Delta's own engine (LAKESHARD_SPARK_ADAPTER=native)"
	@echo "make test   - ruff, mypy, pytest (including notebooks via nbval)"
	@echo "make matrix - the environments users run lakeshard in: lowest versions, Databricks Runtime 17.3's shape,"
	@echo "              databricks-connect 17.3 on a laptop (scripts/matrix; make test is the pinned one)"
	@echo "make bench  - run the benchmarks in bench/ (results in bench/results/)"
	@echo "make chaos SEED=<n> FAULTS=<n> [ENGINES=embedded,native] - a seeded fault campaign (bench/chaos.py)"

demo: env
	$(BIN)/lakeshard demo $(DEMO_ARGS)

# Every commit through Delta's JVM writer (a Spark job each, one per shard for the writers): a small stream.
demo-native: env
	LAKESHARD_SPARK_ADAPTER=native $(BIN)/lakeshard demo --events 2000 --tenants 10 --hours 1 $(DEMO_ARGS)

test: env lint typecheck unit

# The environments users run lakeshard in beside the pinned one make test runs (docs/databricks.md, "What has run
# where"): each builds its own virtual environment (.venv-<name>/, reused while its pins are unchanged) and exits
# non-zero when a run fails. One that cannot be built here (no Python 3.12, no network) is skipped with the reason;
# CI sets LAKESHARD_REQUIRE_MATRIX=1, which makes that an error. All of them run even when one fails.
matrix: env
	@status=0; \
	bash scripts/matrix/lowest.sh || status=1; \
	bash scripts/matrix/dbr173.sh || status=1; \
	bash scripts/matrix/laptop.sh || status=1; \
	exit $$status

lint: env
	$(BIN)/ruff check lib tests bench scripts notebooks
	$(BIN)/python scripts/normalize_notebooks.py --check

typecheck: env
	$(BIN)/mypy

unit: env
	$(BIN)/pytest tests notebooks --nbval-lax -p no:cacheprovider --durations=20 -n $(TEST_WORKERS) --dist loadscope

bench: env
	$(BIN)/python -m bench.bench_synth
	$(BIN)/python -m bench.bench_routing
	$(BIN)/python -m bench.bench_balancing
	$(BIN)/python -m bench.bench_compaction
	$(BIN)/python -m bench.bench_planning
	$(BIN)/python -m bench.bench_dedupe
	$(BIN)/python -m bench.bench_dedupe_tiny_cache
	$(BIN)/python -m bench.bench_hostile
	$(BIN)/python -m bench.bench_day
	$(BIN)/python -m bench.bench_scale
	$(BIN)/python -m bench.bench_ingest

# A seeded fault campaign (bench/chaos.py): racing processes under SIGKILLs, a full disk (a tmpfs: needs root),
# clock jumps (bench/clockshift.c, built with the machine's cc), mutated landing files and damaged data
# files; invariants after every round. Ends with the line "N faults: L lost, D duplicated, ..."; exit 1 on a break.
SEED ?= 1
FAULTS ?= 30
ENGINES ?= embedded
CHAOS_ARGS ?=
chaos: env
	$(BIN)/python -m bench.chaos --seed $(SEED) --faults $(FAULTS) --engines $(ENGINES) $(CHAOS_ARGS)

# Java's class-data archive of Spark's classes (lakeshard.jvm.classdata): made once, about a minute; every local
# Spark session lakeshard starts then starts in about two thirds of the time. Quiet when it is there already.
env: java $(STAMP) $(DELTA_STAMP)
	@$(BIN)/python -c 'from lakeshard.jvm.classdata import main; main()'

# Reinstall only when the project's dependency list changes: a second run starts within seconds.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || { \
	  echo "error: '$(PYTHON) -m venv' failed; install python3-venv (e.g. apt-get install python3-venv)"; exit 1; }
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[local,dev,app]"
	@touch $(STAMP)

java:
	@bash scripts/ensure-java.sh

# Resolved again only when the pom, the script or the installed packages change. Without mvn or Maven Central
# the script says why and leaves no stamp (the next run tries again); the embedded default still installs.
$(DELTA_STAMP): scripts/delta-jars/pom.xml scripts/delta-jars/src/io/lakeshard/delta/*.java scripts/install-delta-jars.sh $(STAMP)
	@bash scripts/install-delta-jars.sh $(BIN)/python

clean:
	rm -rf $(VENV) $(DELTA_JARS) lakehouse landing .pytest_cache .mypy_cache .ruff_cache
