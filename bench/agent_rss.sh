#!/bin/sh
# Peak resident memory of the agent (`rayaccel serve`) serving the 72-device NVL72 sim node to
# 100 concurrent WatchSnapshots clients while 20 rescans each send a new snapshot to all of
# them. Reads VmHWM (peak RSS) and VmRSS from /proc/PID/status.
#   bench/agent_rss.sh BUILD_DIR [WATCHERS]
set -eu
build=${1:-build}
watchers=${2:-100}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d /tmp/rayaccel-rss-XXXXXX)
trap 'kill "$agent" 2>/dev/null || true; rm -rf "$dir"' EXIT

"$build/bin/rayaccel" serve --listen "unix:$dir/agent.sock" \
  --plugin "$build/lib/rayaccel/plugins/librayaccel-sim.so" \
  --config "sim.spec=$root/examples/nvl72.json" --rescan-interval 0 &
agent=$!
i=0
while [ ! -S "$dir/agent.sock" ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done
kb() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$agent/status"; }
idle_hwm=$(kb VmHWM)

"$build/bin/rayaccel_bench_watchers" "unix:$dir/agent.sock" "$watchers" 6 >"$dir/load.txt" &
load=$!
sleep 2
n=0
while [ $n -lt 20 ]; do kill -HUP "$agent"; sleep 0.1; n=$((n + 1)); done
wait "$load"
hwm=$(kb VmHWM)
rss=$(kb VmRSS)
echo "agent, NVL72 sim node (72 devices), idle after start: peak RSS ${idle_hwm} KiB"
echo "agent with $watchers watchers and 20 rescans: peak RSS ${hwm} KiB ($((hwm / 1024)) MiB), RSS now ${rss} KiB"
echo "watchers: $(tail -n 1 "$dir/load.txt")"
kill "$agent"
wait "$agent" || true
