# Shared by the environment matrix's scripts (scripts/matrix/<environment>.sh), sourced after `cd` to the project's
# root with `matrix_init <environment>`. Each script builds its environment in .venv-<environment>/ (reused while its
# pins are unchanged), runs lakeshard there and exits non-zero when a run fails.
#
# An environment this machine cannot build (no such interpreter, no network to PyPI or Maven Central) is skipped with
# the reason and exit 0 on a user's machine; CI sets LAKESHARD_REQUIRE_MATRIX=1, which makes it an error.

matrix_init() {
  matrix_name="$1"
  matrix_started=$SECONDS
  matrix_failed=()
  matrix_root="$PWD"
}

skip() {
  if [ "${LAKESHARD_REQUIRE_MATRIX:-0}" != "0" ]; then
    echo "error: $matrix_name: $1 (LAKESHARD_REQUIRE_MATRIX is set: this environment must run)" >&2
    exit 1
  fi
  echo "skipped: $matrix_name: $1"
  exit 0
}

step() { echo "== $matrix_name [$((SECONDS - matrix_started))s] $*"; }

# find_python X.Y: print an interpreter of Python X.Y ($LAKESHARD_PYTHON<XY>, pyenv's X.Y.*, then pythonX.Y on PATH).
find_python() {
  local want="$1" given candidate
  given="$(printenv "LAKESHARD_PYTHON${want/./}" || true)"
  for candidate in ${given:-} "$(pyenv root 2>/dev/null || echo /nonexistent)"/versions/"$want".*/bin/python \
                   "python$want"; do
    if "$candidate" -c "import sys; assert '%d.%d' % sys.version_info[:2] == '$want'" >/dev/null 2>&1; then
      command -v "$candidate"
      return 0
    fi
    [ -n "${given:-}" ] && return 1  # a named interpreter that is not X.Y is not replaced by another
  done
  return 1
}

# ensure_env VENV PYTHON KEY INSTALL...: make VENV with PYTHON and run INSTALL... (any command; VENV's pip is
# ready), unless VENV was made from KEY already (a digest of what it installs). A failure skips the environment.
ensure_env() {
  local venv="$1" python="$2" key="$3"
  shift 3
  [ -e "$venv/.installed-from-$key" ] && return 0
  step "creating $venv with $python: $*"
  rm -rf "$venv"
  "$python" -m venv "$venv" || skip "'$python -m venv' failed (python3-venv missing?)"
  "$venv/bin/python" -m pip install --quiet --upgrade pip || skip "pip could not upgrade itself (no network to PyPI?)"
  "$@" || skip "could not install what $venv needs (no network to PyPI?)"
  touch "$venv/.installed-from-$key"
}

# digest FILE...: the key of an environment made from FILE... (ensure_env).
digest() { sha1sum "$@" | sha1sum | cut -c1-12; }

# run NAME CMD...: run a check, say how long it took; a failure is remembered, the next check still runs.
run() {
  local name="$1" begun=$SECONDS
  shift
  step "$name: $*"
  if "$@"; then
    echo "== $matrix_name $name passed in $((SECONDS - begun))s"
  else
    echo "== $matrix_name $name FAILED (exit $?) after $((SECONDS - begun))s"
    matrix_failed+=("$name")
  fi
}

# finish SUMMARY: exit non-zero naming the failed checks, or say SUMMARY.
finish() {
  step "done"
  if [ ${#matrix_failed[@]} -gt 0 ]; then
    echo "$matrix_name: FAILED: ${matrix_failed[*]}" >&2
    exit 1
  fi
  echo "$matrix_name: $1"
}
