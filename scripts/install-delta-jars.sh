#!/usr/bin/env bash
# Resolve Delta Lake's JVM engine (delta-spark and the jars it needs that pyspark lacks) from Maven Central into
# .delta-jars/ with `mvn dependency:copy-dependencies`, once, at install time: lakeshard then hands those files
# to Spark as spark.jars, so no session resolves anything when it starts.
#
# Without mvn or without Maven Central the embedded default still installs: this prints why and exits 0, and the
# native adapter's tests skip with that reason (CI sets LAKESHARD_REQUIRE_DELTA_JVM=1, which makes them fail).
#
# Usage: scripts/install-delta-jars.sh [PYTHON]    (PYTHON: the interpreter whose pyspark the jars must fit)
#
# Another Delta for another Spark (an environment of scripts/matrix/) is named by three variables, each defaulting
# to the pom's own value and .delta-jars/:
#   DELTA_VERSION    delta-spark's version on Maven Central, e.g. 4.0.0
#   DELTA_ARTIFACT   its artifact id: delta-spark_<spark binary>_<scala binary> from Delta 4.1 on (delta-spark_4.2_2.13),
#                    delta-spark_<scala binary> up to Delta 4.0 (delta-spark_2.13), which had one Spark per release
#   DELTA_JARS_DEST  the folder to fill (point LAKESHARD_DELTA_JARS at it), relative to the project's root
set -euo pipefail
cd "$(dirname "$0")/.."
python="${1:-.venv/bin/python}"
dest="${DELTA_JARS_DEST:-.delta-jars}"
pom=scripts/delta-jars/pom.xml
overrides=()
[ -z "${DELTA_VERSION:-}" ] || overrides+=("-Ddelta.version=$DELTA_VERSION")
[ -z "${DELTA_ARTIFACT:-}" ] || overrides+=("-Ddelta.artifact=$DELTA_ARTIFACT")

skip() {
  echo "Delta's jars were not installed: $1."
  echo "  The embedded adapter (delta-rs) works without them; the native adapter and its tests need them."
  echo "  Fix it and run 'bash scripts/install-delta-jars.sh' (or 'make env') again."
  # An environment of the matrix under CI must not pass without the jars it exists to test.
  [ "${LAKESHARD_REQUIRE_MATRIX:-0}" = "0" ] || exit 1
  exit 0
}

command -v mvn >/dev/null 2>&1 || skip "'mvn' (Apache Maven) is not installed (e.g. 'apt-get install maven')"
pyspark_jars="$("$python" -c 'import pathlib, pyspark; print(pathlib.Path(pyspark.__file__).parent / "jars")' \
  2>/dev/null)" || skip "pyspark is not importable with $python"
jackson="$(ls "$pyspark_jars" | sed -n 's/^jackson-databind-\(.*\)\.jar$/\1/p' | head -n 1)"
[ -n "$jackson" ] || skip "no jackson-databind jar in $pyspark_jars to match"

staging="$(mktemp -d "${TMPDIR:-/tmp}/delta-jars.XXXXXX")"
trap 'rm -rf "$staging"' EXIT
echo "Resolving Delta's jars with mvn (Maven Central) into $dest/ ..."
if ! mvn -B -q -f "$pom" -Djackson.version="$jackson" ${overrides[@]+"${overrides[@]}"} dependency:copy-dependencies \
     -DincludeScope=runtime -DoutputDirectory="$staging" >"$staging.log" 2>&1; then
  tail -n 5 "$staging.log" | sed 's/^/  mvn: /'
  rm -f "$staging.log"
  skip "mvn could not resolve $pom (no network to Maven Central?)"
fi
rm -f "$staging.log"
# A jar pyspark already ships (same artifact, any version) would put two versions of one class on the classpath.
for jar in "$staging"/*.jar; do
  artifact="$(basename "$jar" .jar | sed -E 's/-[0-9][0-9.]*([-.][A-Za-z0-9]+)*$//')"
  if compgen -G "$pyspark_jars/$artifact-[0-9]*.jar" >/dev/null; then
    rm -f "$jar"
  fi
done
compgen -G "$staging/delta-spark_*.jar" >/dev/null || skip "mvn resolved no delta-spark jar"

# lakeshard's log store for file: tables (scripts/delta-jars/src): Delta's default can lose a commit when two
# processes commit to one local table at once (docs/lake.md). Compiled here against the jars just resolved.
store_jar=lakeshard-delta-logstore.jar
if command -v javac >/dev/null 2>&1 && command -v jar >/dev/null 2>&1; then
  classes="$staging/classes"
  mkdir -p "$classes"
  classpath="$(ls "$staging"/delta-storage-*.jar "$pyspark_jars"/hadoop-client-api-*.jar | tr '\n' ':')"
  if javac -nowarn --release 17 -cp "$classpath" -d "$classes" scripts/delta-jars/src/io/lakeshard/delta/*.java \
       && jar cf "$staging/$store_jar" -C "$classes" .; then
    rm -rf "$classes"
  else
    rm -rf "$classes"
    echo "warning: javac could not compile lakeshard's log store; Delta's default log store is used for file: tables."
  fi
else
  echo "warning: no JDK (javac, jar) to compile lakeshard's log store: Delta's default log store is used for file:"
  echo "  tables, which can lose a commit when two processes commit to one local table at once (docs/lake.md)."
fi
rm -rf "$dest"
mkdir -p "$dest"
mv "$staging"/*.jar "$dest"/
cp "$pom" "$dest/.installed-from.pom.xml"
echo "Delta's jars installed in $dest/: $(cd "$dest" && ls *.jar | tr '\n' ' ')"
