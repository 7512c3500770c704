#!/usr/bin/env bash
# Installs the real programs the tests run, from Debian packages: Slurm with munge, Open
# MPI and MPICH (and iproute2 for the test cluster's network namespace), lnav (the
# shipped lnav formats are tested with it), and Java with Maven (scripts/fetch-kafka.sh
# resolves the Kafka tests' broker with them, and it runs on that Java). Does nothing for
# a package already installed.
# Needs root and apt-get; without them it prints one line and the tests that need a
# missing program fail naming it.
set -euo pipefail

declare -A wanted=(
  [slurmctld]=slurm-wlm [slurmd]=slurm-wlm [srun]=slurm-client [munged]=munge
  [mpirun.openmpi]=openmpi-bin [mpiexec.mpich]=mpich [ip]=iproute2 [nsenter]=util-linux
  [lnav]=lnav [java]=default-jre-headless [mvn]=maven
)
missing=()
for cmd in "${!wanted[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${wanted[$cmd]}")
done
((${#missing[@]})) || exit 0
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)

if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-test-packages: needs root and apt-get to install ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
install() { apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
install || { apt-get update -q >/dev/null && install; }
echo "install-test-packages: installed ${missing[*]}" >&2
