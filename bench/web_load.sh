#!/bin/sh
# The web front under idle, slow and streaming clients (bench/web_load.py), against a node agent
# (the sim's 8-GPU DGX H100, its gRPC service timed under the same load) or against a sink that
# 1000 simulated agents publish to while a cluster page follows it (bench/sink_load.cc);
# sink-nvl72: 100 agents, each a 72-GPU NVL72 rack (examples/nvl72.json), every node's page
# fetched through the cluster page's links first, one node's page and data under the load.
#   bench/web_load.sh BUILD_DIR agent|sink|sink-nvl72 [IDLE] [SLOW] [STREAMS] [SECONDS]
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
sink | sink-nvl72)
  agents=1000
  spec=
  if [ "$target" = sink-nvl72 ]; then
    agents=100
    spec=$here/../examples/nvl72.json
  fi
  "$build/bin/rayaccel-agent" --log-level info sink --listen tcp://127.0.0.1:0 \
    --http tcp://127.0.0.1:0 >/dev/null 2>"$dir/server.log" &
  server=$!
  http=$(wait_for_web)
  grpc=$(sed -n 's/.*sink: listening on \([0-9.:]*\).*/\1/p' "$dir/server.log" | head -n 1)
  "$build/bin/rayaccel_bench_sink_load" "$grpc" "$http" "$server" "$agents" \
    "$((seconds + 60))" 5 $spec >"$dir/publishers.log" 2>&1 &
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
  paths="/metrics,/,/api/nodes?limit=50"
  if [ -n "$spec" ]; then
    # Each row's link, as the cluster page draws it, to a page that answers and the node's data.
    node=$(python3 - "$http" "$agents" <<'EOF'
import json, sys, time, urllib.request
http, agents = sys.argv[1], int(sys.argv[2])
get = lambda path: urllib.request.urlopen(f"http://{http}{path}", timeout=10)
ids = [n["node_id"] for n in json.load(get(f"/api/nodes?limit={agents}"))["nodes"]]
took = []
for node in ids:
    start = time.monotonic()
    with get(f"/node/{node}") as page:
        assert page.status == 200 and b"/assets/node.js" in page.read(), node
    devices = len(json.load(get(f"/api/node/{node}/snapshot"))["devices"])
    matrix = json.load(get(f"/api/node/{node}/topology"))["matrix"]
    assert devices == 72 and len(matrix) == 72, (node, devices, len(matrix))
    took.append(time.monotonic() - start)
took.sort()
print(f"{len(ids)} node pages from the cluster's links, each with 72 devices: page, snapshot and "
      f"topology p50 {took[len(took) // 2] * 1000:.1f} ms, max {took[-1] * 1000:.1f} ms",
      file=sys.stderr)
print(ids[0])
EOF
)
    paths="$paths,/node/$node,/api/node/$node/snapshot,/api/node/$node/topology"
  fi
  echo "sink $http, pid $server, $agents agents publishing (5% churn a second), a cluster page following"
  python3 "$here/web_load.py" "http://$http" --idle "$idle" --slow "$slow" --streams "$streams" \
    --seconds "$seconds" --pid "$server" --paths "$paths"
  ;;
*)
  echo "usage: bench/web_load.sh BUILD_DIR agent|sink|sink-nvl72 [IDLE] [SLOW] [STREAMS] [SECONDS]" >&2
  exit 2
  ;;
esac
