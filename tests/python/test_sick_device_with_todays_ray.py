"""A GPU that fell off the bus (XID 79) is one today's Ray never assigns, when Ray is started
with `rayaccel ray-start-args --env`.

Ray learns a node's GPU ids at `ray start` (resource_and_label_spec.py): its NVIDIA manager
counts NVML's devices, reads CUDA_VISIBLE_DEVICES as the ids (nvidia_gpu.py), and the node
gets min(count, number of ids) GPUs, those ids. Ray cannot be installed here: the test runs
those rules, as written in Ray's source, against the same fake NVML the agent's CUDA plugin
reads, in the environment the agent prints.
"""

import ctypes
import os
import shlex
import signal
import subprocess
import time

from conftest import BUILD, source

FIXTURE = source("tests", "fixtures", "fake-nvml", "dgx-h100-xid-79.json")
NVML = os.path.join(BUILD, "tests", "fake-nvml-current", "libnvidia-ml.so.1")
RAYACCEL = os.path.join(BUILD, "bin", "rayaccel")


def rays_nvidia_node(env):
    """What Ray's node start makes of the GPUs in `env`: (count, ids)."""
    nvml = ctypes.CDLL(NVML)
    assert nvml.nvmlInit_v2() == 0
    count = ctypes.c_uint(0)
    assert nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0
    nvml.nvmlShutdown()
    value = env.get("CUDA_VISIBLE_DEVICES")
    ids = None if value is None else [] if value in ("", "NoDevFiles") else value.split(",")
    if ids is None:
        return count.value, [str(i) for i in range(count.value)]
    n = min(count.value, len(ids))
    return n, ids[:n]


def test_ray_started_with_the_agents_environment_skips_the_sick_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NVML_FIXTURE", FIXTURE)
    sock = f"unix:{tmp_path}/agent.sock"
    log = tmp_path / "agent.err"
    agent = subprocess.Popen(
        [RAYACCEL, "--log-level", "info", "serve", "--plugin", "cuda", "--config",
         f"cuda.nvml_library={NVML}", "--no-host-topology", "--rescan-interval", "0",
         "--listen", sock],
        stdout=subprocess.DEVNULL, stderr=open(log, "w"), start_new_session=True)
    try:
        # Without the environment, today's Ray counts all 8 and may give any one out.
        assert rays_nvidia_node({}) == (8, [str(i) for i in range(8)])
        deadline = time.time() + 30
        while True:
            args = subprocess.run([RAYACCEL, "ray-start-args", "--agent", sock],
                                  capture_output=True, text=True, timeout=30)
            if "--num-gpus=7" in args.stdout:
                break
            assert agent.poll() is None and time.time() < deadline, (args, log.read_text())
            time.sleep(0.1)
        out = subprocess.run([RAYACCEL, "ray-start-args", "--agent", sock, "--env"],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        # The CUDA plugin also orders CUDA's devices as NVML does, so that index 3 is one GPU.
        assert out.stdout == \
            "CUDA_DEVICE_ORDER='PCI_BUS_ID' CUDA_VISIBLE_DEVICES='0,1,2,4,5,6,7'\n", out.stdout
        env = dict(pair.split("=", 1) for pair in shlex.split(out.stdout))
        count, ids = rays_nvidia_node(env)
        assert count == 7 and "3" not in ids, (count, ids)
        # And the count matches the arguments printed next to it.
        assert "--num-gpus=7" in args.stdout
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=15)
