#!/usr/bin/env bash
# Builds this example as a raylet would link rayaccel: install from the build tree into a
# scratch prefix, build against it with find_package(rayaccel COMPONENTS rpc), then have the
# installed agent publish a sim node to it. Usage: examples/raylet-sink/ci-build.sh BUILD_DIR
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

timeout 30 "$work/build/raylet-sink-example" "unix:$work/sink.sock" 1 > "$work/out.txt" &
sink=$!
"$work/prefix/bin/rayaccel" serve --listen "unix:$work/agent.sock" --raylet "unix:$work/sink.sock" \
  --node-id "$(printf 'e%.0s' $(seq 56))" --config "sim.spec=$root/examples/dgx-h100.json" \
  --no-host-topology --rescan-interval 0 2> "$work/agent.log" &
agent=$!
wait "$sink" || { echo "raylet-sink: no update arrived" >&2; cat "$work/out.txt" >&2; exit 1; }
update=$(grep '^node ' "$work/out.txt" || true)
case "$update" in
  *" GPU=8 "*) echo "raylet-sink: an out-of-tree program linking rayaccel::rpc applied: $update" ;;
  *) echo "raylet-sink: unexpected output: $(cat "$work/out.txt")" >&2; exit 1 ;;
esac
