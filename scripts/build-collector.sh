#!/usr/bin/env bash
# Build (or reuse) the nvrx-otel collector distribution and print the binary's path.
#
# The binary lands in a cache directory keyed by the manifest's content hash:
#   ${NVRX_OTEL_COLLECTOR_CACHE:-$HOME/.cache/nvrx-otel/collector}/<hash>/otelcol-nvrx
# Go's module and build caches live beside it, so a rebuild after a manifest change
# downloads and compiles only what changed. A cached binary is reused as is.
# Needs Go (>= 1.26) and the Go module proxy; without Go it fails with one line saying so.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILDER_VERSION=v0.161.0
manifest=collector-config/manifest.yaml
cache_root=${NVRX_OTEL_COLLECTOR_CACHE:-$HOME/.cache/nvrx-otel/collector}

if ! command -v go >/dev/null 2>&1; then
  echo "build-collector: Go is not installed; install Go >= 1.26 (https://go.dev/dl, or your distribution's golang package) or deselect collector tests with -m 'not collector'" >&2
  exit 3
fi

hash=$( (cat "$manifest"; echo "builder=$BUILDER_VERSION"; go env GOVERSION) | sha256sum | cut -c1-16)
out="$cache_root/$hash"
bin="$out/otelcol-nvrx"
if [[ -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi

export GOPATH="$cache_root/gopath"
export GOMODCACHE="$cache_root/gomodcache"
export GOCACHE="$cache_root/gocache"
export GOFLAGS="-mod=mod"
export CGO_ENABLED=0
mkdir -p "$out" "$GOPATH" "$GOMODCACHE" "$GOCACHE"

builder="$GOPATH/bin/builder"
if [[ ! -x "$builder" ]] || ! "$builder" version 2>/dev/null | grep -q "${BUILDER_VERSION#v}"; then
  echo "build-collector: installing the collector builder $BUILDER_VERSION" >&2
  go install "go.opentelemetry.io/collector/cmd/builder@$BUILDER_VERSION" >&2
fi

work=$(mktemp -d "$out/work.XXXXXX")
trap 'rm -rf "$work"' EXIT
sed "s|output_path: ./_build|output_path: $work/src|" "$manifest" > "$work/manifest.yaml"
mkdir -p "$work/src"
echo "build-collector: building otelcol-nvrx (cold builds take several minutes)" >&2
start=$(date +%s)
"$builder" --config="$work/manifest.yaml" --skip-strict-versioning=false >&2
cp "$work/src/otelcol-nvrx" "$bin.tmp"
mv "$bin.tmp" "$bin"
echo "build-collector: built in $(( $(date +%s) - start ))s" >&2
echo "$bin"
