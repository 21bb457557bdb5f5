#!/usr/bin/env bash
# Records what rayaccel sees on a real NVIDIA host, beside what NVIDIA's own tools say, into
# one folder (docs/hardware/ keeps such records). Each step runs on its own: a failing step
# is recorded with its exit status and the rest go on.
#
# usage: tests/hardware/record_nvidia.sh OUTDIR
#   RAYACCEL_BIN   folder holding rayaccel, rayaccel-conformance, rayaccel_hw_cuda_memory
#                  (default: the folder of `rayaccel` on PATH)
#   PLUGIN_DIR     folder holding librayaccel-cuda.so (default: $RAYACCEL_BIN/../lib/rayaccel/plugins)
set -u
out=${1:?usage: record_nvidia.sh OUTDIR}
mkdir -p "$out"
bin=${RAYACCEL_BIN:-$(dirname "$(command -v rayaccel)")}
plugins=${PLUGIN_DIR:-$bin/../lib/rayaccel/plugins}
ra=("$bin/rayaccel" --plugin-path "$plugins" --plugin cuda)
transfer=("$bin/rayaccel" transfer --plugin-path "$plugins" --plugin cuda)
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT

# step NAME COMMAND...: runs COMMAND (60 s at most) into $out/NAME.txt and shows its end.
step() {
  local name=$1
  shift
  echo "== $name: $*"
  timeout 60 "$@" >"$out/$name.txt" 2>&1
  echo "[exit status $?]" >>"$out/$name.txt"
  tail -n 25 "$out/$name.txt"
}

# times N COMMAND...: the median wall time of N runs, in milliseconds.
times() {
  local n=$1
  shift
  for _ in $(seq "$n"); do
    local t0 t1
    t0=$(date +%s%N)
    "$@" >/dev/null 2>&1
    t1=$(date +%s%N)
    echo $(((t1 - t0) / 1000))
  done | sort -n | awk '{v[NR]=$1} END {printf "%.2f ms (median of %d)\n", v[int((NR+1)/2)]/1000, NR}'
}

# What NVIDIA's tools and the kernel say.
step host sh -c 'uname -a; cat /etc/os-release | head -2; nproc; ldconfig -p | grep -E "libnvidia-ml|libcuda\.so"'
step nvidia-smi nvidia-smi
step nvidia-smi-query nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,memory.total,compute_cap,driver_version,mig.mode.current,ecc.mode.current --format=csv
step nvidia-smi-topo nvidia-smi topo -m
step nvidia-smi-nvlink nvidia-smi nvlink -s
nvidia-smi -q -x >"$out/nvidia-smi-q.xml" 2>&1
step pci-sysfs sh -c 'for d in /sys/bus/pci/devices/*; do [ "$(cat $d/vendor)" = 0x10de ] || continue;
  echo "$(basename $d) -> $(readlink -f $d)"; for f in vendor device class numa_node local_cpulist \
  current_link_speed current_link_width max_link_speed max_link_width; do
  printf "  %s=%s\n" $f "$(cat $d/$f 2>/dev/null)"; done; done'
lstopo=$bin/lstopo-no-graphics
[ -x "$lstopo" ] || lstopo=lstopo-no-graphics
step lstopo "$lstopo" --of xml "$out/hwloc.xml"

# What rayaccel sees.
step version "$bin/rayaccel" version
step plugins "${ra[@]}" plugins
step discover "${ra[@]}" discover
step discover-json "${ra[@]}" discover --json
step discover-isolated "${ra[@]}" discover --isolation process
step discover-plugin-only "${ra[@]}" discover --no-host-topology --json
step topo "${ra[@]}" topo
step topo-json "${ra[@]}" topo --json
step resources "${ra[@]}" resources
step ray-start-args "${ra[@]}" ray-start-args
step allocate "${ra[@]}" allocate --size 1
step replay-hwloc-xml "${ra[@]}" discover --hwloc-xml "$out/hwloc.xml"
step conformance "$bin/rayaccel-conformance" "$plugins/librayaccel-cuda.so" --junit "$out/conformance.xml"
step conformance-json "$bin/rayaccel-conformance" "$plugins/librayaccel-cuda.so" --json

# The allocation lands on the GPU it names: CUDA, given the set `allocate` chose (by UUID
# where allocate prints no environment), sees that GPU's UUID.
if command -v python3 >/dev/null; then
  "${ra[@]}" allocate --size 1 --json >"$tmp/allocation.json" 2>&1
  step allocation-env python3 - "$tmp/allocation.json" <<'PY'
import json, os, subprocess, sys
a = json.load(open(sys.argv[1]))
env = a.get("env") or {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(a["ids"])}
print("allocation:", json.dumps(a))
print("env:", env)
code = "import torch; p = torch.cuda.get_device_properties(0); print(torch.cuda.device_count(), p.name, 'GPU-' + str(p.uuid))"
clean = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}  # the GPU stack's own libraries
print(subprocess.run([sys.executable, "-c", code], env={**clean, **env},
                     capture_output=True, text=True).stdout.strip())
PY
fi

# The agent with the health watch on, publishing to a sink that stands in for the raylet;
# SIGHUP asks for a rescan.
node=$(printf 'ab%.0s' $(seq 28))
"$bin/rayaccel" sink --listen "unix:$tmp/sink.sock" --json >"$out/sink.txt" 2>&1 &
sink=$!
sleep 0.5
"${ra[@]}" serve --listen "unix:$tmp/agent.sock" --raylet "unix:$tmp/sink.sock" --node-id "$node" \
  --rescan-interval 0 --log-level info >"$out/serve.txt" 2>&1 &
agent=$!
sleep 3
step agent-discover "$bin/rayaccel" discover --agent "unix:$tmp/agent.sock"
kill -HUP $agent
sleep 2
kill -TERM $agent
wait $agent
echo "[serve exit status $?]" >>"$out/serve.txt"
kill -TERM $sink
wait $sink
echo "== serve"; tail -n 20 "$out/serve.txt"
echo "== sink"; tail -c 3000 "$out/sink.txt"

# The transport: host memory between two processes, then GPU memory.
"${transfer[@]}" --serve --token-file "$tmp/token" --size 64MiB >"$out/transfer-server.txt" 2>&1 &
server=$!
for _ in $(seq 50); do [ -s "$tmp/token" ] && break; sleep 0.1; done
step transfer-read-64MiB "${transfer[@]}" --connect "$(cat "$tmp/token")" --size 64MiB --iters 50
step transfer-write-64MiB "${transfer[@]}" --connect "$(cat "$tmp/token")" --size 64MiB --op write --iters 50
step transfer-read-8B "${transfer[@]}" --connect "$(cat "$tmp/token")" --size 8 --iters 2000
kill -TERM $server
wait $server
step transfer-device-memory "$bin/rayaccel_hw_cuda_memory" "$plugins"

# GPU memory between two processes through the transport (staged through host memory where
# UCX has no CUDA support), 8 B to 1 GiB, against cuMemcpyDtoD in one process (above); then
# host to device and device to host at 64 MiB.
"${transfer[@]}" --serve --memory device:0 --token-file "$tmp/dtoken" --size 1GiB \
  >"$out/transfer-device-server.txt" 2>&1 &
server=$!
for _ in $(seq 100); do [ -s "$tmp/dtoken" ] && break; sleep 0.1; done
for size in 8 512 32KiB 2MiB 64MiB 1GiB; do
  iters=20
  [ "$size" = 1GiB ] && iters=5
  step "transfer-device-read-$size" "${transfer[@]}" --token-file "$tmp/dtoken" \
    --memory device:0 --size "$size" --iters "$iters" --json
  step "transfer-device-write-$size" "${transfer[@]}" --token-file "$tmp/dtoken" \
    --memory device:0 --size "$size" --iters "$iters" --op write --json
done
step transfer-host-from-device-64MiB "${transfer[@]}" --token-file "$tmp/dtoken" \
  --memory host --size 64MiB --iters 20 --json
kill -TERM $server
wait $server

# Device to device between processes against cuMemcpyDtoD in one process, with the ratio.
step device-copy-ratio bash "$(dirname "$0")/../../bench/compare_device_copy.sh" "$bin/.."

# PyTorch CUDA tensors through TensorTransport between two processes (Ray's RDT path).
PYTHONPATH="$bin/../python:${PYTHONPATH:-}" step torch-cuda-tensors \
  python3 "$(dirname "$0")/torch_cuda_tensors.py"

# Side by side with NVIDIA's tools: the median wall time of 11 runs, the first included.
{
  echo "nvidia-smi -L:                       $(times 11 nvidia-smi -L)"
  echo "rayaccel discover --no-host-topology: $(times 11 "${ra[@]}" discover --no-host-topology)"
  echo "nvidia-smi topo -m:                  $(times 11 nvidia-smi topo -m)"
  echo "rayaccel topo:                       $(times 11 "${ra[@]}" topo)"
  echo "rayaccel discover --json:            $(times 11 "${ra[@]}" discover --json)"
  echo "rayaccel discover --isolation process: $(times 11 "${ra[@]}" discover --isolation process)"
} >"$out/timings.txt" 2>&1
echo "== timings"; cat "$out/timings.txt"
