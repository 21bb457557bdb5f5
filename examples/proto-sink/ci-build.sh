#!/usr/bin/env bash
# Builds this example as a raylet with its own gRPC would: install rayaccel into a scratch
# prefix, generate code from the installed .proto files (pkg-config's protodir), build against
# rayaccel's C host API alone, then have the installed agent publish a sim node to it.
# Usage: examples/proto-sink/ci-build.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$work"' EXIT
chmod 755 "$work"

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" \
  cmake -S "$here" -B "$work/build" -G Ninja > "$work/configure.log"
cmake --build "$work/build" > "$work/build.log"
bin="$work/build/proto-sink-example"

# What it takes from librayaccel: C functions of host.h, nothing of its C++ API.
taken=$(nm -D --undefined-only "$bin" | awk '{ print $2 }' | grep -i rayaccel || true)
if [ -z "$taken" ] || echo "$taken" | grep -qv '^rayaccel_'; then
  echo "proto-sink: expected only rayaccel_* C functions from librayaccel, got: $taken" >&2
  exit 1
fi

node=$(printf 'f%.0s' $(seq 56))
LD_LIBRARY_PATH="$work/prefix/lib" "$bin" "unix:$work/sink.sock" "$node" > "$work/out.txt" \
  2> "$work/err.txt" &
pids+=($!)
for i in $(seq 100); do grep -q '^listening' "$work/out.txt" && break; sleep 0.1; done
# No --node-id: the agent asks, and this one-node sink names the node.
"$work/prefix/bin/rayaccel" serve --listen "unix:$work/agent.sock" --raylet "unix:$work/sink.sock" \
  --config "sim.spec=$root/examples/dgx-h100.json" --no-host-topology --rescan-interval 0 --log-level info \
  2> "$work/agent.log" &
pids+=($!)
for i in $(seq 100); do grep -q '^node ' "$work/out.txt" && break; sleep 0.1; done
update=$(grep -m1 '^node ' "$work/out.txt" || true)
case "$update" in
  "node $node generation "*" GPU=8 "*) ;;
  *) echo "proto-sink: unexpected output: $(cat "$work/out.txt" "$work/err.txt")" >&2
     tail -5 "$work/agent.log" >&2; exit 1 ;;
esac
grep -q "the sink names this node $node" "$work/agent.log" ||
  { echo "proto-sink: the agent was not told its node" >&2; tail -5 "$work/agent.log" >&2; exit 1; }
echo "proto-sink: a sink generated from the installed .proto files, checking through host.h" \
  "($(echo $taken | tr ' ' ',')), applied: $update"
