#!/usr/bin/env bash
# deploy/kuberay/raycluster.yaml parses, and its worker command does what it says when run: the
# agent starts, the readiness loop waits for it, and the start line KubeRay generated gets
# rayaccel's resources and labels; a node short of the GPUs required does not start Ray.
# Here the sim plugin's DGX H100 stands in for the pod's GPUs and `echo` for `ray start`.
# Usage: kuberay_worker_test.sh SOURCE_DIR BIN_DIR
set -euo pipefail
src=${1:?source dir}
bin=${2:?bin dir}
work=$(mktemp -d)
agent_pids() { pgrep -f "serve --listen unix:$work/" || true; }
trap 'kill $(agent_pids) 2>/dev/null; rm -rf "$work"' EXIT
trap 'exit 1' INT TERM

python3 - "$src/deploy/kuberay/raycluster.yaml" > "$work/worker.sh" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
cluster = next(d for d in docs if d["kind"] == "RayCluster")
assert cluster["metadata"]["annotations"]["ray.io/overwrite-container-cmd"] == "true"
assert any(d["kind"] == "ConfigMap" for d in docs)
worker = cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
assert worker["command"] == ["/bin/bash", "-lc", "--"], worker["command"]
assert "nvidia.com/gpu" in worker["resources"]["limits"]
probe = worker["livenessProbe"]["exec"]["command"]
assert probe[1:3] == ["plugins", "--agent"] and "--require" in probe, probe
print(worker["args"][0])
PY
bash -n "$work/worker.sh"

# The pod's paths, here.
sed -i "s|/opt/rayaccel/bin|$bin|g; s|/run/rayaccel|$work|g" "$work/worker.sh"
printf 'sim.spec = %s\n' "$src/examples/dgx-h100.json" > "$work/rayaccel.conf"
export RAYACCEL_CONFIG_FILE=$work/rayaccel.conf
export KUBERAY_GEN_RAY_START_CMD="echo ray start --address=head:6379 --block"
# To a file: the agent, left in the background as in the pod, holds the script's output open.
timeout 60 bash "$work/worker.sh" > "$work/out.txt" 2> "$work/err.txt"
out=$(cat "$work/out.txt")
kill $(agent_pids) 2>/dev/null || true
case "$out" in
  "ray start --address=head:6379 --block --num-gpus=8 --resources="*"accelerator_type:H100"*"--labels="*"ray.io/accelerator-type=H100"*) ;;
  *) echo "unexpected start line: $out" >&2; exit 1 ;;
esac

# A node whose driver shows fewer GPUs than the pod asked for: Ray must not start.
printf 'sim.spec = %s\n' "$src/examples/tpu-v4-host.json" > "$work/rayaccel.conf"
# The first pod's agent must be gone (it drains for a second; longer on a loaded machine),
# or the second would find its socket in use.
for i in $(seq 300); do [ -z "$(agent_pids)" ] && [ ! -e "$work/agent.sock" ] && break; sleep 0.1; done
if timeout 60 bash "$work/worker.sh" > "$work/out.txt" 2>&1; then
  echo "Ray started without its GPUs: $(cat "$work/out.txt")" >&2
  exit 1
fi
out=$(cat "$work/out.txt")
case "$out" in
  *"ray start"*) echo "Ray started without its GPUs: $out" >&2; exit 1 ;;
  *"required GPU=8, the node gives Ray 0"*) ;;
  *) echo "the worker failed, but not for want of GPUs: $out" >&2; exit 1 ;;
esac
echo "kuberay worker command: $(echo "$out" | tail -1)"
echo "kuberay worker command: starts Ray with rayaccel's resources, refuses a node short of GPUs"
