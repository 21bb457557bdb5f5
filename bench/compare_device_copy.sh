#!/usr/bin/env bash
# Device memory through the transport against the same copy in one process, on a real NVIDIA
# host: `rayaccel transfer --memory device:0` (a READ of GPU 0's memory in another process into
# GPU 0's memory of this one: mapped through CUDA IPC, or staged) beside cuMemcpyDtoD of the
# same size within one process (rayaccel_hw_cuda_memory, best of 20). Prints bandwidth per
# size, the path each transfer took, and the ratio (goal on an H200: 0.9x or better). Without
# a CUDA driver it says so and exits 0.
# Usage: bench/compare_device_copy.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
cli="$build/bin/rayaccel"
plugins="$build/lib/rayaccel/plugins"
if ! ldconfig -p | grep -q 'libcuda\.so\.1'; then
  echo "skip: no CUDA driver (libcuda.so.1) on this host"
  exit 0
fi
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2> /dev/null || true; rm -rf "$tmp"' EXIT

"$build/bin/rayaccel_hw_cuda_memory" "$plugins" > "$tmp/baseline.txt"
baseline() {  # size -> bytes/s of cuMemcpyDtoD
  awk -v s="$1" '$1 == "cuMemcpyDtoD" && $2 == s { printf "%.0f\n", $4 * 1e9 }' "$tmp/baseline.txt"
}

"$cli" transfer --plugin-path "$plugins" --plugin cuda --serve --memory device:0 --size 1GiB \
  --token-file "$tmp/token" > /dev/null 2>&1 &
for _ in $(seq 200); do [ -s "$tmp/token" ] && break; sleep 0.1; done

echo "one run each; cuMemcpyDtoD within one process, best of 20"
printf "%-12s %14s %14s %-11s %7s\n" size rayaccel cuMemcpyDtoD path ratio
for size in 8 512 32768 2097152 134217728 1073741824; do
  iters=20
  [ "$size" -ge 134217728 ] && iters=5
  line=$("$cli" transfer --plugin-path "$plugins" --plugin cuda --token-file "$tmp/token" \
    --memory device:0 --size "$size" --iters "$iters" --json)
  ours=$(echo "$line" | sed -E 's/.*"bandwidth_bytes_per_s": ([0-9.]+).*/\1/')
  path=$(echo "$line" | sed -E 's/.*"path": "([a-z-]+)".*/\1/')
  theirs=$(baseline "$size")
  awk -v s="$size" -v a="$ours" -v b="$theirs" -v p="$path" 'BEGIN {
    printf "%-12s %11.2f GB/s %11.2f GB/s %-11s %6.2fx\n", s, a / 1e9, b / 1e9, p, b > 0 ? a / b : 0 }'
done
