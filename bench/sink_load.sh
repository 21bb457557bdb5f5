#!/bin/sh
# The cluster page at scale: AGENTS simulated agents (default 1000, each an 8-GPU DGX H100, one
# process, loopback TCP) publish to one `rayaccel sink --http`, CHURN percent of them (default
# 5) flip a GPU's health once a second for SECONDS (default 30), and a page follows the sink
# as the cluster page does. Prints the sink's CPU and peak RSS, update-to-page latency, and how
# long the first page of nodes takes (bench/sink_load.cc says how each is measured).
#   bench/sink_load.sh BUILD_DIR [AGENTS] [SECONDS] [CHURN]
set -eu
build=${1:-build}
agents=${2:-1000}
seconds=${3:-30}
churn=${4:-5}
dir=$(mktemp -d /tmp/rayaccel-sink-load-XXXXXX)
sink=
trap '[ -n "$sink" ] && kill "$sink" 2>/dev/null; rm -rf "$dir"' EXIT

# Enough descriptors for a thousand streams on either side.
ulimit -n 65536 2>/dev/null || ulimit -n 8192 2>/dev/null || true
"$build/bin/rayaccel-agent" --log-level info sink --listen tcp://127.0.0.1:0 \
  --http tcp://127.0.0.1:0 >/dev/null 2>"$dir/sink.log" &
sink=$!
i=0
until grep -q "web view on" "$dir/sink.log" 2>/dev/null; do
  i=$((i + 1))
  [ $i -lt 500 ] || { cat "$dir/sink.log"; exit 1; }
  sleep 0.02
done
grpc=$(sed -n 's/.*sink: listening on \([0-9.:]*\).*/\1/p' "$dir/sink.log" | head -n 1)
http=$(sed -n 's|.*web view on http://\([0-9.:]*\)/.*|\1|p' "$dir/sink.log" | head -n 1)
echo "sink $grpc (web view $http), pid $sink; idle peak RSS $(awk '$1 == "VmHWM:" { print $2 }' /proc/$sink/status) KiB"
"$build/bin/rayaccel_bench_sink_load" "$grpc" "$http" "$sink" "$agents" "$seconds" "$churn" ||
  { echo "the load run failed; the sink's log:"; cat "$dir/sink.log"; exit 1; }
