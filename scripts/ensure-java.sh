#!/usr/bin/env bash
# Make sure a Java 17+ runtime is available for Spark; install it with apt when running as root.
set -euo pipefail

java_major() {
  local java="${1:-java}"
  "$java" -version 2>&1 | sed -n 's/.*version "\([0-9]*\)\(\.[0-9]*\)\?.*/\1/p' | head -n 1
}

candidate="${JAVA_HOME:+$JAVA_HOME/bin/java}"
candidate="${candidate:-$(command -v java || true)}"
if [ -n "$candidate" ] && [ -x "$candidate" ]; then
  major="$(java_major "$candidate")"
  if [ -n "$major" ] && [ "$major" -ge 17 ]; then
    exit 0
  fi
  echo "Found Java ${major:-unknown} at $candidate; Spark 4 needs Java 17 or newer."
fi

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  # The JDK, not only the runtime: make env compiles lakeshard's log store for Delta with javac.
  echo "Installing a Java 17+ JDK with apt-get (needed by Spark; javac builds lakeshard's log store for Delta)..."
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq openjdk-17-jdk-headless >/dev/null 2>&1 \
    || apt-get install -y -qq openjdk-21-jdk-headless >/dev/null 2>&1 \
    || apt-get install -y -qq default-jdk-headless
  major="$(java_major java)"
  if [ -n "$major" ] && [ "$major" -ge 17 ]; then
    echo "Java $major installed."
    exit 0
  fi
fi

cat >&2 <<MSG
error: Spark needs Java 17 or newer, and it could not be installed automatically.
  Debian/Ubuntu:  sudo apt-get install -y openjdk-17-jre-headless
  macOS:          brew install openjdk@17
  or point JAVA_HOME at an existing JDK 17+ and run the command again.
MSG
exit 1
