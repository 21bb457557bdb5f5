#!/bin/sh
# Peak resident memory of the agent (`rayaccel serve`) serving the 72-device NVL72 sim node to
# 100 concurrent WatchSnapshots clients while 20 rescans each send a new snapshot to all of
# them. Reads VmHWM (peak RSS) and VmRSS from /proc/PID/status, for the agent and for the
# plugin host it runs the sim plugin in (the agent's default isolation), and their sum.
#   bench/agent_rss.sh BUILD_DIR [WATCHERS] [ISOLATION]   ISOLATION: none (default) or process
set -eu
build=${1:-build}
watchers=${2:-100}
isolation=${3:-none}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d /tmp/rayaccel-rss-XXXXXX)
trap 'kill "$agent" 2>/dev/null || true; rm -rf "$dir"' EXIT

"$build/bin/rayaccel" serve --listen "unix:$dir/agent.sock" \
  --plugin "$build/lib/rayaccel/plugins/librayaccel-sim.so" \
  --config "sim.spec=$root/examples/nvl72.json" --rescan-interval 0 --isolation "$isolation" &
agent=$!
i=0
while [ ! -S "$dir/agent.sock" ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done
kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
host=$(cat /proc/$agent/task/*/children | tr ' ' '\n' | grep -m1 . || true)
idle_hwm=$(kb "$agent" VmHWM)

"$build/bin/rayaccel_bench_watchers" "unix:$dir/agent.sock" "$watchers" 6 >"$dir/load.txt" &
load=$!
sleep 2
n=0
while [ $n -lt 20 ]; do kill -HUP "$agent"; sleep 0.1; n=$((n + 1)); done
wait "$load"
hwm=$(kb "$agent" VmHWM)
rss=$(kb "$agent" VmRSS)
host_hwm=0
[ -n "$host" ] && host_hwm=$(kb "$host" VmHWM)
echo "agent, NVL72 sim node (72 devices), idle after start: peak RSS ${idle_hwm} KiB"
echo "agent with $watchers watchers and 20 rescans: peak RSS ${hwm} KiB ($((hwm / 1024)) MiB), RSS now ${rss} KiB"
[ -n "$host" ] &&
  echo "its plugin host (sim): peak RSS ${host_hwm} KiB; agent + host: $(((hwm + host_hwm) / 1024)) MiB"
echo "watchers: $(tail -n 1 "$dir/load.txt")"
kill "$agent"
wait "$agent" || true
