#!/bin/sh
# The web front under idle, slow and streaming clients (bench/web_load.py), against a node agent
# (the sim's 8-GPU DGX H100, its gRPC service timed under the same load) or against a sink that
# 1000 simulated agents publish to while a cluster page follows it (bench/sink_load.cc).
#   bench/web_load.sh BUILD_DIR agent|sink [IDLE] [SLOW] [STREAMS] [SECONDS]
# Defaults: 1000 idle connections, 100 slow clients, 32 event streams, 10 s of scrapes.
set -eu
build=${1:-build}
target=${2:-agent}
idle=${3:-1000}
slow=${4:-100}
streams=${5:-32}
seconds=${6:-10}
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/rayaccel-web-load-XXXXXX)
server=
publishers=
trap '[ -n "$publishers" ] && kill "$publishers" 2>/dev/null; [ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$dir"' EXIT

# Descriptors for the load's connections on this side, and a thousand agents' streams.
ulimit -n 65536 2>/dev/null || ulimit -n 8192 2>/dev/null || true
wait_for_web() {
  i=0
  until grep -q "web view on" "$dir/server.log" 2>/dev/null; do
    i=$((i + 1))
    [ $i -lt 1000 ] || { cat "$dir/server.log"; exit 1; }
    sleep 0.02
  done
  sed -n 's|.*web view on http://\([0-9.:]*\)/.*|\1|p' "$dir/server.log" | head -n 1
}

case "$target" in
agent)
  "$build/bin/rayaccel-agent" --log-level info serve --listen "unix:$dir/agent.sock" \
    --plugin "$build/lib/rayaccel/plugins/librayaccel-sim.so" --no-host-topology \
    --http tcp://127.0.0.1:0 >/dev/null 2>"$dir/server.log" &
  server=$!
  http=$(wait_for_web)
  echo "agent $http, pid $server"
  python3 "$here/web_load.py" "http://$http" --idle "$idle" --slow "$slow" --streams "$streams" \
    --seconds "$seconds" --pid "$server" \
    --grpc "$build/bin/rayaccel resources --agent unix:$dir/agent.sock"
  ;;
sink)
  agents=1000
  "$build/bin/rayaccel-agent" --log-level info sink --listen tcp://127.0.0.1:0 \
    --http tcp://127.0.0.1:0 >/dev/null 2>"$dir/server.log" &
  server=$!
  http=$(wait_for_web)
  grpc=$(sed -n 's/.*sink: listening on \([0-9.:]*\).*/\1/p' "$dir/server.log" | head -n 1)
  "$build/bin/rayaccel_bench_sink_load" "$grpc" "$http" "$server" "$agents" \
    "$((seconds + 60))" 5 >"$dir/publishers.log" 2>&1 &
  publishers=$!
  python3 - "$http" "$agents" <<'EOF'
import json, sys, time, urllib.request
deadline = time.time() + 120
while time.time() < deadline:
    try:
        with urllib.request.urlopen(f"http://{sys.argv[1]}/api/nodes?limit=1", timeout=10) as r:
            if json.load(r)["total"] >= int(sys.argv[2]):
                sys.exit(0)
    except OSError:
        pass
    time.sleep(0.5)
sys.exit("the agents never all reached the sink")
EOF
  echo "sink $http, pid $server, $agents agents publishing (5% churn a second), a cluster page following"
  python3 "$here/web_load.py" "http://$http" --idle "$idle" --slow "$slow" --streams "$streams" \
    --seconds "$seconds" --pid "$server" --paths "/metrics,/,/api/nodes?limit=50"
  ;;
*)
  echo "usage: bench/web_load.sh BUILD_DIR agent|sink [IDLE] [SLOW] [STREAMS] [SECONDS]" >&2
  exit 2
  ;;
esac
