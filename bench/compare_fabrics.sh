#!/usr/bin/env bash
# The libfabric helper against its floor and against the UCX helper, in one run on this
# machine: `rayaccel transfer --fabric libfabric` against ofi_rma_bw (bench/ofi_rma_bw.c,
# one-sided fi_read/fi_write with one operation in flight, as fabtests' fi_rma_bw measures;
# Debian 12 does not package fabtests) on the same provider, and against `rayaccel transfer
# --fabric ucx`. Prints GB/s per operation and the ratios.
# Usage: bench/compare_fabrics.sh [BUILD_DIR] [PROVIDER (tcp)] [SIZE (64MiB)] [ITERS (20)]
set -euo pipefail
build=${1:-build}
provider=${2:-tcp}
size=${3:-64MiB}
iters=${4:-20}
cli="$build/bin/rayaccel"
floor="$build/bin/rayaccel_bench_ofi_rma_bw"
[ -x "$floor" ] || { echo "needs $floor (cmake --build $build)" >&2; exit 1; }
bytes=$(numfmt --from=iec-i "${size/B/}" 2> /dev/null || numfmt --from=iec "${size%iB}")
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2> /dev/null || true; rm -rf "$tmp"' EXIT

ours() {  # fabric op -> GB/s
  local fabric=$1 op=$2
  rm -f "$tmp/token"
  FI_PROVIDER=$provider "$cli" transfer --serve --fabric "$fabric" --size "$size" \
    --token-file "$tmp/token" > /dev/null 2>&1 &
  local server=$!
  while [ ! -s "$tmp/token" ]; do sleep 0.05; done
  FI_PROVIDER=$provider "$cli" transfer --fabric "$fabric" --token-file "$tmp/token" --op "$op" \
    --size "$size" --iters "$iters" --json |
    sed -E 's/.*"bandwidth_bytes_per_s": ([0-9.]+).*/\1/' | awk '{ printf "%.2f", $1 / 1e9 }'
  kill -INT $server; wait $server 2> /dev/null || true
}

theirs() {  # op -> GB/s
  local op=$1
  rm -f "$tmp/address"
  FI_PROVIDER=$provider "$floor" serve "$tmp/address" "$bytes" &
  local server=$!
  FI_PROVIDER=$provider "$floor" "$op" "$tmp/address" "$bytes" "$iters" | awk '{ print $(NF-1) }'
  wait $server 2> /dev/null || true
}

echo "provider $provider, $size x $iters, one transfer in flight"
printf "%-6s %14s %12s %10s %8s %10s\n" op "libfabric GB/s" "ofi_rma_bw" ratio "ucx GB/s" ratio
for op in read write; do
  lf=$(ours libfabric "$op")
  fl=$(theirs "$op")
  ucx=$(ours ucx "$op")
  printf "%-6s %14s %12s %10s %8s %10s\n" "$op" "$lf" "$fl" \
    "$(awk -v a="$lf" -v b="$fl" 'BEGIN { printf "%.2fx", a / b }')" "$ucx" \
    "$(awk -v a="$lf" -v b="$ucx" 'BEGIN { printf "%.2fx", a / b }')"
done
