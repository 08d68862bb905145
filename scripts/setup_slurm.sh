#!/usr/bin/env bash
# Install Debian's SLURM (slurm-wlm: slurmctld, slurmd, the client commands) and munge for the tests'
# cluster (scripts/slurm_cluster.sh), when they are missing and this is root with apt; otherwise say in one
# line why not and succeed: tests/distributed/test_slurm.py then skips with the same reason.
# Idempotent: once installed this is a few `command -v` checks.
set -euo pipefail
missing=()
for tool in slurmctld slurmd sbatch munged; do command -v "$tool" >/dev/null || missing+=("$tool"); done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "setup: ${missing[*]} missing and no root apt-get to install slurm-wlm and munge: the SLURM tests will skip"
    exit 0
fi
log=$(mktemp -t gpulab-setup-slurm.XXXXXX)
start=$SECONDS
install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >>"$log" 2>&1; }
# Package lists may be absent (a fresh container): update once, then retry.
if ! install && ! { apt-get update -q >>"$log" 2>&1 && install; }; then
    echo "setup: apt-get could not install slurm-wlm and munge (log: $log): the SLURM tests will skip"
    exit 0
fi
rm -f "$log"
echo "setup: installed slurm-wlm and munge in $((SECONDS - start)) s"
