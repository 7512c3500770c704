#!/usr/bin/env bash
# Fetch (or reuse) an Apache Kafka broker (KRaft, no ZooKeeper) from Maven Central and print
# the directory of its jars, for the Kafka tier's tests (tests/collector/kafka.py).
#
#   scripts/fetch-kafka.sh                 # prints e.g. ~/.cache/nvrx-otel/kafka/4.1.1/lib
#   java -cp "$(scripts/fetch-kafka.sh)/*" kafka.Kafka server.properties
#
# Maven resolves org.apache.kafka:kafka_2.13 with its runtime dependencies (plus an SLF4J
# binding so the broker logs to stderr) into
#   ${NVRX_OTEL_KAFKA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nvrx-otel/kafka}/<version>/lib
# with Maven's own repository beside it (m2/). A complete directory is reused as is (it
# records the hash of the dependency list it was made from; a changed list fetches again);
# concurrent callers wait for one fetch (flock).
#
# Exit codes: 0 fetched or reused (path on stdout, progress on stderr); 3 Java or Maven is
# missing (one line on stderr naming what to install); anything else: Maven failed (its
# output on stderr). Needs Java >= 17, Maven and Maven Central.
set -euo pipefail

KAFKA_VERSION=4.1.1 # Apache Kafka 4.x: KRaft only, Java >= 17
SLF4J_VERSION=2.0.17 # slf4j-api 2 (compatible with the broker's 1.7 calls) + slf4j-simple
DEPENDENCY_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.8.1
cache_root=${NVRX_OTEL_KAFKA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nvrx-otel/kafka}

for tool in java mvn; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "fetch-kafka: $tool is not installed: install Java >= 17 and Maven (Debian: default-jdk-headless maven) to run the Kafka tests, or deselect them with -m 'not kafka'" >&2
    exit 3
  fi
done

pom=$(cat <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.nvrx-otel</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>$SLF4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId><artifactId>slf4j-simple</artifactId><version>$SLF4J_VERSION</version>
    </dependency>
  </dependencies>
</project>
EOF
)
key=$( { echo "$pom"; echo "$DEPENDENCY_PLUGIN"; } | sha256sum | cut -c1-16)
out="$cache_root/$KAFKA_VERSION"
lib="$out/lib"
if [[ -f "$out/complete" && $(cat "$out/complete") == "$key" ]]; then
  echo "$lib"
  exit 0
fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.fetch.lock"
if ! flock -n 9; then
  echo "fetch-kafka: another fetch is running; waiting for it" >&2
  flock 9
fi
if [[ -f "$out/complete" && $(cat "$out/complete") == "$key" ]]; then # fetched by the one we waited for
  echo "$lib"
  exit 0
fi

mkdir -p "$out"
work=$(mktemp -d "$out/work.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "$pom" >"$work/pom.xml"
echo "fetch-kafka: resolving Apache Kafka $KAFKA_VERSION with Maven into $lib" >&2
start=$(date +%s)
mvn -B -q -f "$work/pom.xml" -Dmaven.repo.local="$cache_root/m2" \
  "$DEPENDENCY_PLUGIN:copy-dependencies" -DincludeScope=runtime \
  -DoutputDirectory="$work/lib" >&2
rm -rf "$lib" "$out/complete"
mv "$work/lib" "$lib"
echo "$key" >"$out/complete"
echo "fetch-kafka: fetched $(find "$lib" -name '*.jar' | wc -l) jars in $(($(date +%s) - start))s" >&2
echo "$lib"
