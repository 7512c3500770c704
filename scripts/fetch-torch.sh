#!/usr/bin/env bash
# Fetch (or reuse) PyTorch from PyPI and print the directory to put on PYTHONPATH, for the
# real-torch tier's tests (tests/torch/): torchrun, gloo on CPU, DataLoader workers.
#
#   scripts/fetch-torch.sh        # prints e.g. ~/.cache/nvrx-otel/torch/2.15.0-cp311/site
#   PYTHONPATH="$(scripts/fetch-torch.sh)" python -m torch.distributed.run ...
#
# pip installs torch==$TORCH_VERSION with its dependencies (about 1.1 GB downloaded, 5.3 GB
# on disk) with --target into
#   ${NVRX_OTEL_TORCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nvrx-otel/torch}/<version>-<python tag>/site
# beside the test environment (not into it: the project's own dependencies stay what its
# extras say). A complete directory (marked by .complete) is reused as is; a partial one
# is made again; concurrent callers wait for one fetch (flock).
#
# Exit codes: 0 fetched or reused (path on stdout, progress on stderr); anything else: pip
# failed (its output on stderr).
set -euo pipefail

TORCH_VERSION=2.15.0
python=${PYTHON:-python}
tag=$("$python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
cache_root=${NVRX_OTEL_TORCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nvrx-otel/torch}
dir=$cache_root/$TORCH_VERSION-$tag
mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
flock 9
if [[ ! -f $dir/.complete ]]; then
  echo "fetch-torch: installing torch $TORCH_VERSION into $dir (about 1.1 GB from PyPI)" >&2
  rm -rf "$dir.partial"
  "$python" -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --target "$dir.partial/site" "torch==$TORCH_VERSION" >&2
  rm -rf "$dir"
  mv "$dir.partial" "$dir"
  touch "$dir/.complete"
fi
echo "$dir/site"
