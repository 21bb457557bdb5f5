"""Shared by the Python package's tests: where the build and the fixtures are, and registries
over the real plugins (sim, CUDA on the fake NVML, ROCm on KFD captures, TPU on a host tree)."""

import base64
import contextlib
import os
import pickle
import subprocess
import sys

import pytest

BUILD = os.environ["RAYACCEL_BUILD_DIR"]
SOURCE = os.environ["RAYACCEL_SOURCE_DIR"]
PLUGINS = os.path.join(BUILD, "lib", "rayaccel", "plugins")


def plugin(name):
    return os.path.join(PLUGINS, f"librayaccel-{name}.so")


def source(*parts):
    return os.path.join(SOURCE, *parts)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    """No visible-devices variable or configuration leaks in from the caller."""
    for var in ["CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "TPU_VISIBLE_CHIPS",
                "HABANA_VISIBLE_MODULES", "RAYACCEL_CONFIG_FILE", "RAYACCEL_SIM_SPEC",
                "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]:
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def sim_h100():
    import rayaccel
    with rayaccel.Registry(plugins=[plugin("sim")], host_topology=False,
                           config={"sim.spec": source("examples", "dgx-h100.json")}) as r:
        yield r


@pytest.fixture
def cuda_h100(monkeypatch):
    import rayaccel
    monkeypatch.setenv("FAKE_NVML_FIXTURE", source("tests", "fixtures", "fake-nvml",
                                                   "dgx-h100.json"))
    lib = os.path.join(BUILD, "tests", "fake-nvml-current", "libnvidia-ml.so.1")
    with rayaccel.Registry(plugins=[plugin("cuda")], host_topology=False,
                           config={"cuda.nvml_library": lib}) as r:
        yield r


@pytest.fixture
def rocm_mi210():
    import rayaccel
    kfd = source("tests", "fixtures", "rocm-kfd", "topo-mi210-xgmi-pcie")
    with rayaccel.Registry(plugins=[plugin("rocm")], host_topology=False,
                           config={"rocm.kfd_topology_dir": kfd}) as r:
        yield r


@pytest.fixture
def tpu_v5e(monkeypatch):
    import rayaccel
    for k, v in {"TPU_ACCELERATOR_TYPE": "v5litepod-8", "TPU_TOPOLOGY": "2x4",
                 "TPU_WORKER_ID": "0", "TPU_NAME": "ci-slice"}.items():
        monkeypatch.setenv(k, v)
    host = source("tests", "fixtures", "tpu", "v5e-8-host")
    with rayaccel.Registry(plugins=[plugin("tpu")], host_topology=False,
                           config={"tpu.dev_root": os.path.join(host, "dev"),
                                   "tpu.sysfs_root": os.path.join(host, "sys"),
                                   "tpu.metadata": "off"}) as r:
        yield r


@contextlib.contextmanager
def source_process(script):
    """The source side of a transport test in a process of its own: runs `script` (next to
    this file), which prints base64 of its pickled metadata and serves until told "exit";
    yields the metadata."""
    proc = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), script)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        yield pickle.loads(base64.b64decode(proc.stdout.readline()))
    finally:
        proc.stdin.write("exit\n")
        proc.stdin.flush()
        proc.wait(timeout=20)
