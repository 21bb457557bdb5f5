"""rayaccel's AcceleratorManager in Ray's own processes: the process that starts a node, and
every worker, which reads its visible devices when it connects and sets them before a task.

Each case is a driver of its own, starting a one-node Ray with ray.init() (a subprocess: the fake NVML is found through
LD_LIBRARY_PATH, which a process reads when it starts), on the CUDA plugin over the fake NVML
of a DGX H100: rayaccel.ray.install() before the cluster starts, or no rayaccel in Ray at all
and only `rayaccel ray-start-args --env` in the environment Ray starts with."""

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time

from conftest import BUILD, FAKE_NVML, PLUGINS, RAYACCEL, source

FIXTURES = source("tests", "fixtures", "fake-nvml")

# The driver: ray.init() starts a node here and resolves its resources (no count given: the
# managers detect them), then what Ray's workers see. Prints one JSON line.
DRIVER = """
import json, os, sys
import ray
if INSTALL:  # "local" discovery in each process, or the agent at that address
    import rayaccel, rayaccel.ray
    rayaccel.ray.install(None if INSTALL == "local" else rayaccel.AgentClient(INSTALL))
ray.init(address="local", num_cpus=2, include_dashboard=False)

@ray.remote
def seen():
    import ray._private.accelerators as acc
    return {"visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "gpu_ids": sorted(str(i) for i in ray.get_gpu_ids()),
            "manager": acc.get_accelerator_manager_for_resource("GPU").__name__}

out = {"gpus": ray.cluster_resources().get("GPU", 0),
       "types": sorted(k for k in ray.cluster_resources() if k.startswith("accelerator_type:")),
       "two": ray.get(seen.options(num_gpus=2).remote()),
       "none": ray.get(seen.options(num_gpus=0).remote()),
       "all": ray.get(seen.options(num_gpus=ray.cluster_resources().get("GPU", 0)).remote()),
       "ones": [ray.get(seen.options(num_gpus=1).remote()) for _ in range(3)]}
print("RESULT " + json.dumps(out), flush=True)
ray.shutdown()
"""


def run_driver(fixture, install, extra_env=None):
    """install: False (Ray's own managers), "local" or an agent's address."""
    env = dict(os.environ, FAKE_NVML_FIXTURE=os.path.join(FIXTURES, fixture),
               RAYACCEL_CUDA_NVML_LIBRARY=FAKE_NVML, RAYACCEL_PLUGIN_PATH=PLUGINS,
               LD_LIBRARY_PATH=os.path.dirname(FAKE_NVML), **(extra_env or {}))
    for name in ("CUDA_VISIBLE_DEVICES", "RAYACCEL_RAY_MANAGERS", "CUDA_DEVICE_ORDER"):
        if extra_env is None or name not in extra_env:
            env.pop(name, None)
    script = f"INSTALL = {install!r}\n" + textwrap.dedent(DRIVER)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=240)
    lines = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
    assert out.returncode == 0 and lines, out.stdout + out.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT "):])


@contextlib.contextmanager
def agent(fixture, tmp_path):
    """`rayaccel serve` on the fake NVML; yields its address once it counts 7 GPUs (the XID 79
    fixture loses GPU 3 50 ms after NVML starts, as a live node would)."""
    sock = f"unix:{tmp_path}/agent.sock"
    env = dict(os.environ, FAKE_NVML_FIXTURE=os.path.join(FIXTURES, fixture))
    proc = subprocess.Popen([RAYACCEL, "serve", "--plugin", "cuda", "--plugin-path", PLUGINS,
                             "--config", "cuda.nvml_library=" + FAKE_NVML,
                             "--no-host-topology", "--rescan-interval", "0", "--listen", sock],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.time() + 30
        while True:
            args = subprocess.run([RAYACCEL, "ray-start-args", "--agent", sock],
                                  capture_output=True, text=True, timeout=30)
            if "--num-gpus=7" in args.stdout:
                break
            assert proc.poll() is None and time.time() < deadline, args
            time.sleep(0.1)
        yield sock
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)


def test_install_reaches_the_node_and_every_worker():
    got = run_driver("dgx-h100.json", install="local")
    assert got["gpus"] == 8 and got["types"] == ["accelerator_type:H100"]
    # The worker that ran the task has rayaccel's manager: installed by rayaccel.pth there.
    assert got["two"]["manager"] == "RayaccelGPUAcceleratorManager"
    two = got["two"]["visible"].split(",")
    assert len(two) == 2 and sorted(two) == got["two"]["gpu_ids"]
    assert got["none"]["gpu_ids"] == [] and got["none"]["manager"] == \
        "RayaccelGPUAcceleratorManager"
    assert sorted(got["all"]["visible"].split(","), key=int) == [str(i) for i in range(8)]


def test_the_sick_gpu_is_never_given_out_with_install(tmp_path):
    """XID 79: GPU 3 fell off the bus, seen by the node's agent. The node counts 7, and Ray
    maps its slots onto the healthy GPUs (rayaccel's manager names them as the node's ids);
    every worker asks the same agent (RAYACCEL_RAY_MANAGERS names it)."""
    with agent("dgx-h100-xid-79.json", tmp_path) as address:
        got = run_driver("dgx-h100-xid-79.json", install=address)
    assert got["gpus"] == 7
    every = got["all"]["visible"].split(",")
    assert sorted(every, key=int) == ["0", "1", "2", "4", "5", "6", "7"]
    for seen in [got["two"], *got["ones"]]:
        assert "3" not in seen["visible"].split(","), seen
        assert sorted(seen["visible"].split(",")) == seen["gpu_ids"], seen


def test_the_sick_gpu_is_never_given_out_with_the_environment_alone(tmp_path):
    """Today's Ray with its own NVIDIA manager (over the fake NVML, through Ray's vendored
    pynvml) and only what `rayaccel ray-start-args --env` printed in its environment."""
    with agent("dgx-h100-xid-79.json", tmp_path) as address:
        out = subprocess.run([RAYACCEL, "ray-start-args", "--env", "--agent", address],
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    env = dict(pair.split("=", 1) for pair in shlex.split(out.stdout))
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,4,5,6,7"
    got = run_driver("dgx-h100-xid-79.json", install=False, extra_env=env)
    assert got["two"]["manager"] == "NvidiaGPUAcceleratorManager"  # Ray's own
    assert got["gpus"] == 7
    assert sorted(got["all"]["visible"].split(","), key=int) == \
        ["0", "1", "2", "4", "5", "6", "7"]
    for seen in [got["two"], *got["ones"]]:
        assert "3" not in seen["visible"].split(","), seen


# Ray's NVIDIA manager and rayaccel's on the same fake NVML, method by method: the count and
# type Ray's own manager reads through its vendored pynvml (what test_ray_parity.py cannot ask
# in a process without the fake NVML on its library path).
ASK_BOTH = """
import json, sys
import rayaccel, rayaccel.ray
from ray._private.accelerators import NvidiaGPUAcceleratorManager as theirs
with rayaccel.Registry(plugins=[sys.argv[1]], host_topology=False,
                       config={"cuda.nvml_library": sys.argv[2]}) as r:
    ours = rayaccel.ray.accelerator_manager("GPU", r)
    methods = ["get_current_node_num_accelerators", "get_current_node_accelerator_type",
               "get_current_node_additional_resources",
               "get_current_process_visible_accelerator_ids"]
    print(json.dumps({m: [getattr(theirs, m)(), getattr(ours, m)()] for m in methods}))
"""


def test_nvidias_count_and_type_are_rays_own():
    for fixture in ("dgx-h100.json", "gb200-tray.json", "h200-vm.json", "workstation-pcie.json",
                    "dgx1-v100.json", "mig-a100.json"):
        out = subprocess.run(
            [sys.executable, "-c", ASK_BOTH, os.path.join(PLUGINS, "librayaccel-cuda.so"),
             FAKE_NVML],
            env=dict(os.environ, FAKE_NVML_FIXTURE=os.path.join(FIXTURES, fixture),
                     LD_LIBRARY_PATH=os.path.dirname(FAKE_NVML)),
            capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        answers = json.loads(out.stdout)
        for method, (theirs, ours) in answers.items():
            if fixture == "mig-a100.json" and method == "get_current_node_num_accelerators":
                # Where rayaccel answers differently on purpose: MIG instances, not their GPU
                # (docs/ray-integration.md). Ray counts the physical GPUs.
                assert ours > theirs, (fixture, theirs, ours)
                continue
            assert ours == theirs, (fixture, method, theirs, ours)
