#!/usr/bin/env bash
# `rayaccel transfer` against `ucx_perftest` between two processes on this machine, on the same
# UCX_TLS, and against memcpy of the same size (rayaccel_bench_transport's BM_Memcpy). Prints
# bandwidth per size for READ (ucp_get) and WRITE (ucp_put_bw), 8-byte latency (against
# ucp_get's per-operation time and ucp_put_lat's ping-pong), and the ratios. ucx_perftest runs
# with one operation outstanding (-O 1), as `rayaccel transfer` waits for each transfer before
# the next, and without error handling (-e off): rayaccel's data path has none either (its
# control path detects a lost peer). Both move bytes over the same transports: rayaccel leaves
# CMA out (docs/transport.md), so ucx_perftest runs without it too (UCX_TLS=all is ^cma).
# UCX_TLS=tcp is the fabric between hosts: rayaccel's same-host paths are off then too
# (bench/ucx_tls.sh).
# Usage: bench/compare_ucx_perftest.sh [BUILD_DIR] [UCX_TLS]
set -euo pipefail
build=${1:-build}
export UCX_TLS=${2:-${UCX_TLS:-all}}
cli="$build/bin/rayaccel"
command -v ucx_perftest > /dev/null || { echo "needs ucx_perftest (ucx-utils)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2> /dev/null || true; rm -rf "$tmp"' EXIT

iters_for() { local s=$1; if ((s >= 64 << 20)); then echo 20; elif ((s >= 1 << 20)); then echo 200; else echo 2000; fi; }

ours() {  # op size iters -> bytes/s (and latency p50 in us on stderr-free second field)
  local op=$1 size=$2 iters=$3
  rm -f "$tmp/token"
  "$cli" transfer --serve --size "$size" --token-file "$tmp/token" > /dev/null 2>&1 &
  local server=$!
  while [ ! -f "$tmp/token" ]; do sleep 0.05; done
  "$cli" transfer --token-file "$tmp/token" --op "$op" --size "$size" --iters "$iters" --json |
    sed -E 's/.*"bandwidth_bytes_per_s": ([0-9.]+).*"latency_us_p50": ([0-9.]+).*/\1 \2/'
  kill $server; wait $server 2> /dev/null || true
}

# shellcheck source=bench/ucx_tls.sh
source "$(dirname "$0")/ucx_tls.sh"

theirs() {  # test size iters -> bytes/s and average latency in us
  local test=$1 size=$2 iters=$3 port=$((20000 + RANDOM % 20000))
  UCX_TLS="$theirs_tls" ucx_perftest -p $port > /dev/null 2>&1 &
  local server=$!
  sleep 0.5
  UCX_TLS="$theirs_tls" ucx_perftest 127.0.0.1 -p $port -t "$test" -s "$size" -n "$iters" -O 1 \
    2> /dev/null | awk '/^Final:/ { printf "%.0f %s\n", $7 * 1048576, $4 }'
  wait $server 2> /dev/null || true
}

memcpy_bw() {  # size -> bytes/s
  "$build/bin/rayaccel_bench_transport" --benchmark_filter="BM_Memcpy/$1/" \
    --benchmark_format=csv 2> /dev/null | awk -F, '/BM_Memcpy/ { printf "%.0f\n", $6 }'
}

echo "UCX_TLS=$UCX_TLS (ucx_perftest: $theirs_tls), one run each, two processes on this machine"
printf "%-10s %-6s %12s %12s %12s %9s %9s\n" size op rayaccel ucx_perftest memcpy "vs ucx" "vs memcpy"
for size in 8192 1048576 67108864 268435456; do
  n=$(iters_for $size)
  mc=$(memcpy_bw $size)
  for op in read write; do
    test=$([ $op = read ] && echo ucp_get || echo ucp_put_bw)
    read -r a _ < <(ours $op $size $n)
    read -r b _ < <(theirs $test $size $n)
    awk -v s=$size -v op=$op -v a="$a" -v b="$b" -v m="$mc" 'BEGIN {
      printf "%-10d %-6s %9.2f GB/s %9.2f GB/s %9.2f GB/s %9.2f %9.2f\n", s, op, a / 1e9, b / 1e9,
             m / 1e9, a / b, a / m }'
  done
done
read -r _ lat_ours < <(ours read 8 20000)
read -r _ lat_get < <(theirs ucp_get 8 20000)
port=$((20000 + RANDOM % 20000))
UCX_TLS="$theirs_tls" ucx_perftest -p $port > /dev/null 2>&1 &
sleep 0.5
lat_put=$(UCX_TLS="$theirs_tls" ucx_perftest 127.0.0.1 -p $port -t ucp_put_lat -s 8 -n 20000 2> /dev/null |
  awk '/^Final:/ { print $3 }')
wait
awk -v a="$lat_ours" -v g="$lat_get" -v p="$lat_put" 'BEGIN {
  printf "8-byte latency: rayaccel READ p50 %.2f us; ucx_perftest ucp_get %.3f us per operation, ucp_put_lat p50 %.2f us (half a round trip); ratios %.1f and %.2f\n", a, g, p, a / g, a / p }'
