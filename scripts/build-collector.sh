#!/usr/bin/env bash
# Build (or reuse) the nvrx-otel collector distribution and print the binary's path.
#
#   scripts/build-collector.sh            # prints e.g. ~/.cache/nvrx-otel/collector/<key>/otelcol-nvrx
#   bin=$(scripts/build-collector.sh) && "$bin" validate --config=file:collector-config/agent.yaml
#
# The binary lands in a cache directory keyed by everything that changes it: the manifest's
# content, the builder version, the Go version and platform, and the build recipe below:
#   ${NVRX_OTEL_COLLECTOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nvrx-otel/collector}/<key>/otelcol-nvrx
# Go's module and build caches (and the builder) live beside it, so a rebuild after a
# manifest change downloads and compiles only what changed. A cached binary is reused as
# is (the check takes a few milliseconds); concurrent callers wait for one build (flock).
#
# Exit codes: 0 built or reused (path on stdout, progress on stderr); 3 Go is missing or
# older than 1.26 (one line on stderr naming what to install); anything else: the build
# failed (builder output on stderr). Needs Go >= 1.26 and a Go module proxy; see collector-config/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILDER_VERSION=v0.161.0 # keep equal to the components' release in the manifest
RECIPE="cgo=0 -mod=mod -buildvcs=false builder-defaults" # in the cache key: change it with the flags
manifest=collector-config/manifest.yaml
cache_root=${NVRX_OTEL_COLLECTOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nvrx-otel/collector}

if ! command -v go >/dev/null 2>&1; then
  echo "build-collector: Go is not installed: install Go >= 1.26 (https://go.dev/dl or the distribution's golang package) to build the collector, or run Python-only tests with -m 'not collector'" >&2
  exit 3
fi

go_id=$(go env GOVERSION GOOS GOARCH | tr '\n' ' ') # e.g. "go1.26.8 linux amd64 "
go_version=${go_id%% *}
if [[ $go_version =~ ^go([0-9]+)\.([0-9]+) ]] && ((BASH_REMATCH[1] == 1 && BASH_REMATCH[2] < 26)); then
  echo "build-collector: Go >= 1.26 is needed, found $go_version: install Go >= 1.26 (https://go.dev/dl) to build the collector, or run Python-only tests with -m 'not collector'" >&2
  exit 3
fi
key=$( { cat "$manifest"; echo "builder=$BUILDER_VERSION go=$go_id recipe=$RECIPE"; } | sha256sum | cut -c1-16)
out="$cache_root/$key"
bin="$out/otelcol-nvrx"
if [[ -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.build.lock"
if ! flock -n 9; then
  echo "build-collector: another build is running; waiting for it" >&2
  flock 9
fi
if [[ -x "$bin" ]]; then # built by the caller we waited for
  echo "$bin"
  exit 0
fi

export GOPATH="$cache_root/gopath"
export GOMODCACHE="$cache_root/gomodcache"
export GOCACHE="$cache_root/gocache"
export GOFLAGS="-mod=mod -buildvcs=false"
export CGO_ENABLED=0
mkdir -p "$out" "$GOPATH" "$GOMODCACHE" "$GOCACHE"

tools="$cache_root/tools/builder-$BUILDER_VERSION"
builder="$tools/builder"
if [[ ! -x "$builder" ]]; then
  echo "build-collector: installing the collector builder $BUILDER_VERSION" >&2
  GOBIN="$tools" nice -n 19 go install "go.opentelemetry.io/collector/cmd/builder@$BUILDER_VERSION" >&2
fi

work=$(mktemp -d "$out/work.XXXXXX")
trap 'rm -rf "$work"' EXIT
sed "s|^\(  output_path:\).*|\1 $work/src|" "$manifest" >"$work/manifest.yaml"
mkdir -p "$work/src"
echo "build-collector: building otelcol-nvrx into $out (a cold build takes several minutes)" >&2
start=$(date +%s)
nice -n 19 "$builder" --config="$work/manifest.yaml" --skip-strict-versioning=false >&2
cp "$work/src/otelcol-nvrx" "$bin.tmp"
mv "$bin.tmp" "$bin"
echo "build-collector: built in $(($(date +%s) - start))s" >&2
echo "$bin"
