#!/usr/bin/env bash
# Builds this example as a raylet would link rayaccel: install from the build tree into a
# scratch prefix, build against it with find_package(rayaccel COMPONENTS rpc web), then have the
# installed agent publish a sim node to it, and read it back from the cluster's web view. Usage: examples/raylet-sink/ci-build.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
agent=
trap '[ -n "$agent" ] && kill "$agent" 2>/dev/null; rm -rf "$work"' EXIT
chmod 755 "$work"

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
cmake -S "$here" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log"
cmake --build "$work/build" > "$work/build.log"

# The sink with its cluster view (rayaccel::web) on a free loopback port; it runs until killed.
"$work/build/raylet-sink-example" "unix:$work/sink.sock" 0 tcp://127.0.0.1:0 > "$work/out.txt" &
sink=$!
trap '[ -n "$agent" ] && kill "$agent" 2>/dev/null; kill "$sink" 2>/dev/null; rm -rf "$work"' EXIT
for i in $(seq 100); do grep -q '^web view on' "$work/out.txt" && break; sleep 0.1; done
view=$(sed -n 's|^web view on \(http://[0-9.:]*\)/$|\1|p' "$work/out.txt")
[ -n "$view" ] || { echo "raylet-sink: no web view: $(cat "$work/out.txt")" >&2; exit 1; }
"$work/prefix/bin/rayaccel" serve --listen "unix:$work/agent.sock" --raylet "unix:$work/sink.sock" \
  --node-id "$(printf 'e%.0s' $(seq 56))" --config "sim.spec=$root/examples/dgx-h100.json" \
  --no-host-topology --rescan-interval 0 2> "$work/agent.log" &
agent=$!
for i in $(seq 100); do grep -q '^node ' "$work/out.txt" && break; sleep 0.1; done
update=$(grep '^node ' "$work/out.txt" || true)
case "$update" in
  *" GPU=8 "*) echo "raylet-sink: an out-of-tree program linking rayaccel::rpc applied: $update" ;;
  *) echo "raylet-sink: unexpected output: $(cat "$work/out.txt")" >&2; exit 1 ;;
esac
nodes=$(curl -sf "$view/api/nodes")
metrics=$(curl -sf "$view/metrics")
case "$nodes" in
  *'"node_id": "eeeeeeee'*'"GPU": 8'*) ;;
  *) echo "raylet-sink: the cluster view does not list the node: $nodes" >&2; exit 1 ;;
esac
echo "$metrics" | grep -q '^rayaccel_sink_nodes 1$' ||
  { echo "raylet-sink: unexpected metrics: $metrics" >&2; exit 1; }
curl -sf "$view/" | grep -q '<title>rayaccel: cluster</title>' ||
  { echo "raylet-sink: no cluster page" >&2; exit 1; }
echo "raylet-sink: and serves the cluster's web view (rayaccel::web): the node listed, /metrics, the page"
