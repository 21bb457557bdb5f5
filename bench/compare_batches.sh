#!/usr/bin/env bash
# Batched transfers (`rayaccel transfer --batch N`) against `ucx_perftest` with the same message
# size and the same number of operations in flight (-O N): ucp_get for READ, ucp_put_bw for
# WRITE, between two processes on this machine on the same UCX_TLS (without CMA, as rayaccel).
# ucx_perftest repeats one buffer, which stays in the cache; so does rayaccel with
# --same-range, and that pair gives the ratio. A batch of N different ranges, back to back
# (rayaccel's default), moves N times the memory: it is set against the same copies made alone
# (rayaccel_bench_copy), its floor where the bytes are a memcpy (shared host memory on one host).
# Each run lasts about half a second (iterations scaled from a first, shorter run). Prints
# bandwidth for each size and batch, and the two ratios. A batch whose bytes exceed
# 256 MiB is left out (the server's buffer holds one batch).
# UCX_TLS=tcp is the fabric between hosts: rayaccel's same-host paths are off then too
# (bench/ucx_tls.sh).
# Usage: bench/compare_batches.sh [BUILD_DIR] [UCX_TLS]
set -euo pipefail
build=${1:-build}
export UCX_TLS=${2:-${UCX_TLS:-tcp}}
cli="$build/bin/rayaccel"
command -v ucx_perftest > /dev/null || { echo "needs ucx_perftest (ucx-utils)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2> /dev/null || true; rm -rf "$tmp"' EXIT

# shellcheck source=bench/ucx_tls.sh
source "$(dirname "$0")/ucx_tls.sh"

# Iterations for a first run: about 256 MiB or 20 000 transfers, whichever is fewer.
iters_for() {  # size batch
  local by_bytes=$(((256 << 20) / ($1 * $2))) by_count=$((20000 / $2))
  local n=$((by_bytes < by_count ? by_bytes : by_count))
  echo $((n < 5 ? 5 : n))
}

# Iterations (of `batch` transfers) for about half a second at the speed a first run showed
# (whose bytes on one host are too few to be more than noise), never fewer than it made.
scaled() {  # bytes/s size batch first
  awk -v bw="$1" -v s="$2" -v b="$3" -v n0="$4" 'BEGIN {
    n = int(0.5 * bw / (s * b)); if (n < n0) n = n0; if (n > 1000000) n = 1000000; print n }'
}

rm -f "$tmp/token"
"$cli" transfer --serve --size 256MiB --token-file "$tmp/token" > /dev/null 2>&1 &
while [ ! -f "$tmp/token" ]; do sleep 0.05; done

ours() {  # op size batch iters [--same-range] -> bytes/s
  "$cli" transfer --token-file "$tmp/token" --op "$1" --size "$2" --batch "$3" --iters "$4" \
    --warmup 2 --json "${@:5}" |
    sed -E 's/.*"bandwidth_bytes_per_s": ([0-9.]+).*/\1/'
}

theirs() {  # test size outstanding count -> bytes/s
  local port=$((20000 + RANDOM % 20000))
  UCX_TLS="$theirs_tls" ucx_perftest -p $port > /dev/null 2>&1 &
  local server=$!
  sleep 0.5
  UCX_TLS="$theirs_tls" ucx_perftest 127.0.0.1 -p $port -t "$1" -s "$2" -n "$4" -O "$3" \
    2> /dev/null | awk '/^Final:/ { printf "%.0f\n", $7 * 1048576 }'
  wait $server 2> /dev/null || true
}

echo "UCX_TLS=$UCX_TLS (ucx_perftest: $theirs_tls), one run each, two processes on this machine"
printf "%-8s %-6s %6s %12s %13s %7s %13s %13s %7s\n" size op batch "same range" ucx_perftest \
  ratio "back to back" "copies alone" ratio
for size in 8 4096 65536 1048576; do
  for batch in 1 64 1024; do
    (( size * batch > 256 << 20 )) && continue
    n=$(iters_for $size $batch)
    # The copies' floor where they are memcpys: not over a fabric.
    floor=0
    [ "${RAYACCEL_TRANSPORT_SAME_HOST:-1}" = 0 ] ||
      floor=$("$build/bin/rayaccel_bench_copy" $size $batch each | cut -d' ' -f1)
    for op in read write; do
      test=$([ $op = read ] && echo ucp_get || echo ucp_put_bw)
      ns=$(scaled "$(ours $op $size $batch $n --same-range)" $size $batch $n)
      same=$(ours $op $size $batch $ns --same-range)
      nb=$(scaled "$(theirs $test $size $batch $((n * batch)))" $size 1 $((n * batch)))
      b=$(theirs $test $size $batch $nb)
      na=$(scaled "$(ours $op $size $batch $n)" $size $batch $n)
      a=$(ours $op $size $batch $na)
      awk -v s=$size -v op=$op -v B=$batch -v a="$a" -v same="$same" -v b="$b" -v f="$floor" '
        BEGIN { printf "%-8d %-6s %6d %7.3f GB/s %8.3f GB/s %7.2f %8.3f GB/s", s, op, B, same / 1e9,
                       b / 1e9, same / b, a / 1e9
                if (f > 0) printf " %8.3f GB/s %7.2f\n", f / 1e9, a / f; else printf " %13s %7s\n", "-", "-" }'
    done
  done
done
