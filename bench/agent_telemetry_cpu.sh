#!/bin/sh
# The CPU the agent (`rayaccel serve --http`) spends on telemetry: the 72-GPU NVL72 sim node,
# run for SECONDS with telemetry sampled every INTERVAL seconds and again with it off, the
# agent's and its plugin host's user+system time read from /proc/PID/stat (clock ticks), and
# the difference as a share of one core. The sim's samples cost what its arithmetic costs; a
# real driver's reads add theirs. With PUBLISH=1 the agent also publishes to a sink (`rayaccel
# sink`, started here), each sample following its snapshot on the stream.
#   [PUBLISH=1] bench/agent_telemetry_cpu.sh BUILD_DIR [SECONDS] [INTERVAL]
set -eu
build=${1:-build}
seconds=${2:-60}
interval=${3:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d /tmp/rayaccel-telemetry-cpu-XXXXXX)
agent=
sink=
trap 'kill $agent $sink 2>/dev/null || true; rm -rf "$dir"' EXIT
publish=
if [ "${PUBLISH:-0}" = 1 ]; then
  "$build/bin/rayaccel" sink --listen "unix:$dir/sink.sock" >/dev/null 2>&1 &
  sink=$!
  publish="--raylet unix:$dir/sink.sock --node-id $(printf 'a%.0s' $(seq 56))"
fi
hz=$(getconf CLK_TCK)

# Ticks (utime + stime) of a process and its children that are alive.
ticks() {
  total=0
  for pid in "$@"; do
    t=$(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || echo 0)
    total=$((total + t))
  done
  echo "$total"
}

run() {  # $1: telemetry interval; prints the ticks spent over $seconds
  "$build/bin/rayaccel" serve --listen "unix:$dir/agent-$1.sock" \
    --plugin "$build/lib/rayaccel/plugins/librayaccel-sim.so" \
    --config "sim.spec=$root/examples/nvl72.json" --no-host-topology --rescan-interval 0 \
    --http tcp://127.0.0.1:0 --telemetry-interval "$1" $publish 2>"$dir/agent-$1.err" &
  agent=$!
  i=0
  while [ ! -S "$dir/agent-$1.sock" ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done
  sleep 2  # past start-up
  host=$(cat /proc/$agent/task/*/children | tr ' ' '\n' | grep -m1 . || true)
  before=$(ticks "$agent" $host)
  sleep "$seconds"
  after=$(ticks "$agent" $host)
  kill "$agent"
  wait "$agent" 2>/dev/null || true
  echo $((after - before))
}

[ -n "$publish" ] && echo "publishing to a sink"
on=$(run "$interval")
off=$(run 0)
awk -v on="$on" -v off="$off" -v hz="$hz" -v s="$seconds" -v i="$interval" 'BEGIN {
  fmt = "agent, 72 devices, %d s: telemetry every %d s %.2f%% of a core, off %.2f%%, "
  fmt = fmt "the sampling %.2f%% (ticks at %d Hz: %d and %d)\n"
  printf fmt, s, i, 100 * on / hz / s, 100 * off / hz / s, 100 * (on - off) / hz / s, hz, on, off
}'
