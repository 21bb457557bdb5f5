#!/usr/bin/env bash
# deploy/kuberay/raycluster.yaml parses, and its worker command does what it says when run: the
# agent starts, the readiness loop waits for it, and the start line KubeRay generated gets
# rayaccel's resources and labels, and is run with the variables that name the healthy GPUs
# (a DGX with a sick GPU starts Ray on the other seven); the liveness probe holds the node to
# the GPUs Ray was started with; a node without GPUs does not start Ray. Here the sim plugin's
# DGX H100 stands in for the pod's GPUs and a script that prints its CUDA_VISIBLE_DEVICES and
# arguments for `ray start`.
# Usage: kuberay_worker_test.sh SOURCE_DIR BIN_DIR
set -euo pipefail
src=${1:?source dir}
bin=${2:?bin dir}
work=$(mktemp -d)
agent_pids() { pgrep -f "serve --listen unix:$work/" || true; }
trap 'kill $(agent_pids) 2>/dev/null; rm -rf "$work"' EXIT
trap 'exit 1' INT TERM

python3 - "$src/deploy/kuberay/raycluster.yaml" "$work/probe.sh" "$src/requirements.txt" \
  > "$work/worker.sh" <<'PY'
import re, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
cluster = next(d for d in docs if d["kind"] == "RayCluster")
# The Ray the project is built and tested with (requirements.txt), in rayVersion and every image.
tested = re.search(r"^ray==(\S+)$", open(sys.argv[3]).read(), re.M).group(1)
assert cluster["spec"]["rayVersion"] == tested, (cluster["spec"]["rayVersion"], tested)
images = re.findall(r"image: \S+:(\S+)", open(sys.argv[1]).read())
assert images and all(tag == tested for tag in images), (images, tested)
assert cluster["metadata"]["annotations"]["ray.io/overwrite-container-cmd"] == "true"
assert any(d["kind"] == "ConfigMap" for d in docs)
worker = cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
assert worker["command"] == ["/bin/bash", "-lc", "--"], worker["command"]
assert "nvidia.com/gpu" in worker["resources"]["limits"]
probe = worker["livenessProbe"]["exec"]["command"]
assert probe[:2] == ["/bin/sh", "-c"] and "plugins --agent" in probe[2], probe
assert "--require GPU=$(cat /run/rayaccel/ray-gpus)" in probe[2], probe
print(worker["args"][0])
open(sys.argv[2], "w").write(probe[2])
PY
bash -n "$work/worker.sh"

# The pod's paths, here.
sed -i "s|/opt/rayaccel/bin|$bin|g; s|/run/rayaccel|$work|g" "$work/worker.sh" "$work/probe.sh"
export RAYACCEL_CONFIG_FILE=$work/rayaccel.conf
printf '#!/bin/sh\necho "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset} ray $*"\n' > "$work/ray"
chmod +x "$work/ray"
export KUBERAY_GEN_RAY_START_CMD="$work/ray start --address=head:6379 --block"
# The first pod's agent must be gone (it drains for a second; longer on a loaded machine),
# or the next would find its socket in use.
wait_agent_gone() {
  kill $(agent_pids) 2>/dev/null || true
  for i in $(seq 300); do [ -z "$(agent_pids)" ] && [ ! -e "$work/agent.sock" ] && break; sleep 0.1; done
}
# One pod on SPEC: its start line, and whether its liveness probe passes afterwards.
pod() {
  printf 'sim.spec = %s\n' "$1" > "$work/rayaccel.conf"
  # To a file: the agent, left in the background as in the pod, holds the script's output open.
  timeout 60 bash "$work/worker.sh" > "$work/out.txt" 2> "$work/err.txt"
  out=$(cat "$work/out.txt")
  timeout 30 sh -c "$(cat "$work/probe.sh")" > /dev/null 2>&1 || { echo "liveness probe fails: $out" >&2; exit 1; }
  wait_agent_gone
}

pod "$src/examples/dgx-h100.json"
case "$out" in
  "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 ray start --address=head:6379 --block --num-gpus=8 --resources="*"accelerator_type:H100"*"--labels="*"ray.io/accelerator-type=H100"*) ;;
  *) echo "unexpected start line: $out" >&2; exit 1 ;;
esac
[ "$(cat "$work/ray-gpus")" = 8 ] || { echo "ray-gpus: $(cat "$work/ray-gpus")" >&2; exit 1; }

# GPU 3 sick: Ray starts on the other seven and is told which they are.
python3 - "$src/examples/dgx-h100.json" "$work/sick.json" <<'PY'
import json, sys
node = json.load(open(sys.argv[1]))
node["devices"][3]["health"] = "unhealthy"
json.dump(node, open(sys.argv[2], "w"))
PY
pod "$work/sick.json"
case "$out" in
  "CUDA_VISIBLE_DEVICES=0,1,2,4,5,6,7 ray start --address=head:6379 --block --num-gpus=7 "*) ;;
  *) echo "unexpected start line with a sick GPU: $out" >&2; exit 1 ;;
esac

# A node whose driver shows no GPU: Ray must not start.
printf 'sim.spec = %s\n' "$src/examples/tpu-v4-host.json" > "$work/rayaccel.conf"
if timeout 60 bash "$work/worker.sh" > "$work/out.txt" 2>&1; then
  echo "Ray started without its GPUs: $(cat "$work/out.txt")" >&2
  exit 1
fi
out=$(cat "$work/out.txt")
case "$out" in
  *"ray start"*) echo "Ray started without its GPUs: $out" >&2; exit 1 ;;
  *"required GPU=1, the node gives Ray 0"*) ;;
  *) echo "the worker failed, but not for want of GPUs: $out" >&2; exit 1 ;;
esac
echo "kuberay worker command: $(echo "$out" | tail -1)"
echo "kuberay worker command: starts Ray with rayaccel's resources on the healthy GPUs, refuses a node without GPUs"
