#!/usr/bin/env bash
# Times `rayaccel discover --json` (8-GPU sim spec, every installed plugin loaded) against
# hwloc's `lstopo-no-graphics --of xml` on this machine: both are "tell me what this host has"
# commands an operator runs. Also times the floors that bound what rayaccel can reach here:
# an empty program, an empty program linked as `rayaccel` is, and hwloc's I/O discovery
# alone (lstopo with and without it), and what each installed plugin that finds nothing adds.
# Prints mean wall times over N runs and the ratios.
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

spec="sim.spec=$root/examples/dgx-h100.json"
ours=$(mean_ms "$cli" discover --json --config "$spec")
ours_nohost=$(mean_ms "$cli" discover --json --config "$spec" --no-host-topology)
# The sim plugin alone: what every other installed plugin (none finds a device here) adds.
ours_sim=$(mean_ms "$cli" discover --json --plugin sim --config "$spec" --no-host-topology)
others=$(($(find "$build/lib/rayaccel/plugins" -name 'librayaccel-*.so' | wc -l) - 1))
# The same view read back from hwloc's XML of this machine: what discovery would cost if hwloc's
# own discovery (trapped PCI config reads on a VM) were not paid on each run.
lstopo-no-graphics --of xml > "${TMPDIR:-/tmp}/rayaccel-compare-lstopo.xml"
ours_xml=$(HWLOC_XMLFILE="${TMPDIR:-/tmp}/rayaccel-compare-lstopo.xml" mean_ms "$cli" discover \
  --json --config "$spec")
rm -f "${TMPDIR:-/tmp}/rayaccel-compare-lstopo.xml"
theirs=$(mean_ms lstopo-no-graphics --of xml)
theirs_noio=$(mean_ms lstopo-no-graphics --of xml --filter io:none)
empty=$(mean_ms /bin/true)
linked=""
plugged=""
if [ -x "$build/bin/rayaccel_bench_empty" ]; then
  linked=$(mean_ms "$build/bin/rayaccel_bench_empty")
  plugged=$(mean_ms "$build/bin/rayaccel_bench_empty" "$build/lib/rayaccel/plugins")
fi

echo "runs:                                              $runs"
echo "rayaccel discover --json (dgx-h100):               $ours ms"
echo "rayaccel discover --json --no-host-topology:       $ours_nohost ms"
echo "rayaccel discover --json, hwloc from its XML:      $ours_xml ms"
echo "the same, --no-host-topology, the sim plugin alone: $ours_sim ms"
awk -v a="$ours_nohost" -v b="$ours_sim" -v n="$others" 'BEGIN {
  printf "each other installed plugin (%d, finding nothing): %.2f ms\n", n, (n > 0 ? (a - b) / n : 0) }'
echo "lstopo-no-graphics --of xml:                       $theirs ms"
echo "floor: lstopo without I/O (--filter io:none):      $theirs_noio ms"
echo "floor: /bin/true (process start):                   $empty ms"
[ -n "$linked" ] && echo "floor: empty program linked as rayaccel is:        $linked ms"
[ -n "$plugged" ] && echo "floor: the same, loading every installed plugin:   $plugged ms"
awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "ratio rayaccel / lstopo (host view on):            %.2f\n", a / b }'
awk -v a="$ours_nohost" -v b="$theirs" 'BEGIN { printf "ratio rayaccel / lstopo (--no-host-topology):      %.2f\n", a / b }'
awk -v a="$ours_xml" -v b="$theirs" 'BEGIN { printf "ratio rayaccel / lstopo (hwloc from XML):          %.2f\n", a / b }'
[ -n "$linked" ] && awk -v a="$linked" -v b="$theirs" 'BEGIN { printf "ratio floor / lstopo:                              %.2f\n", a / b }'
[ -n "$plugged" ] && awk -v a="$plugged" -v b="$theirs" 'BEGIN { printf "ratio floor with the plugins loaded / lstopo:      %.2f\n", a / b }'
awk -v a="$theirs" -v b="$theirs_noio" 'BEGIN { printf "hwloc I/O discovery alone (lstopo difference):    %.2f ms\n", a - b }'
