#!/usr/bin/env bash
# The cost of isolating plugins, as ratios in one run: the registry's rescan of the sim's 8-GPU
# and 72-GPU nodes with the plugin in a child process (the agent's default) against the same
# rescan in-process, and one isolated call that does nothing (the floor of any isolated call).
# Medians of REPETITIONS runs of rayaccel_bench_discovery (Google Benchmark).
# Usage: bench/compare_isolation.sh [BUILD_DIR] [REPETITIONS]
set -euo pipefail
build=${1:-build}
reps=${2:-5}
"$build/bin/rayaccel_bench_discovery" --benchmark_filter='Rescan|RoundTrip' \
  --benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true \
  --benchmark_format=json 2> /dev/null |
  python3 -c '
import json, sys
reps = sys.argv[1]
t = {b["run_name"]: b["real_time"] for b in json.load(sys.stdin)["benchmarks"]
     if b.get("aggregate_name") == "median"}
call = t["BM_IsolatedRoundTrip"]
print(f"medians of {reps} runs, wall time in us")
print(f"one isolated call that does nothing: {call:8.1f}")
for node in ("dgx_h100_8gpu", "nvl72_72gpu"):
    iso, own = t["BM_RescanIsolated/" + node], t["BM_Rescan/" + node]
    print(f"rescan {node:14} in-process {own:8.1f}, isolated {iso:8.1f}: {iso / own:.2f}x;"
          f" {iso / (own + call):.2f} x (in-process + one call)")
' "$reps"
