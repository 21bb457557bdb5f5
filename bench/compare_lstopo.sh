#!/usr/bin/env bash
# Times `rayaccel discover --json` (8-GPU sim spec) against hwloc's `lstopo-no-graphics --of
# xml` on this machine: both are "tell me what this host has" commands an operator runs.
# Prints the mean wall time of each over N runs and their ratio.
# Usage: bench/compare_lstopo.sh [BUILD_DIR] [RUNS]
set -euo pipefail
build=${1:-build}
runs=${2:-50}
root=$(cd "$(dirname "$0")/.." && pwd)
cli="$build/bin/rayaccel"
command -v lstopo-no-graphics > /dev/null || { echo "needs lstopo-no-graphics (hwloc-nox)" >&2; exit 1; }

mean_ms() {  # mean wall time in ms of "$@" over $runs runs, output discarded
  local start end
  "$@" > /dev/null 2>&1  # warm the page cache
  start=$(date +%s%N)
  for ((i = 0; i < runs; i++)); do "$@" > /dev/null 2>&1; done
  end=$(date +%s%N)
  awk -v ns=$((end - start)) -v n="$runs" 'BEGIN { printf "%.2f", ns / n / 1e6 }'
}

ours=$(mean_ms "$cli" discover --json --config "sim.spec=$root/examples/dgx-h100.json")
theirs=$(mean_ms lstopo-no-graphics --of xml)
echo "runs:                                   $runs"
echo "rayaccel discover --json (dgx-h100):    $ours ms"
echo "lstopo-no-graphics --of xml:            $theirs ms"
awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "ratio rayaccel / lstopo:               %.2f\n", a / b }'
