"""rayaccel's managers answer as Ray's own manager of each family, method by method.

One table per family: (method, input, environment, Ray's answer), each row naming the file of
Ray's python/ray/_private/accelerators/ it comes from. Each row is asked of Ray's own manager
class, the installed Ray's (requirements.txt), and of rayaccel's on a real plugin on the
project's fixtures (CUDA on the fake NVML, ROCm on a KFD capture, TPU host trees, Gaudi,
Neuron, Ascend and Intel GPU trees) and on a node without the family: both must give the
row's answer. Ray's manager is given the fixture's hardware only where it reads it through a
function of its own (the TPU chip count); rows Ray's manager answers from a vendor's library
or tool that cannot run here (NVML's count and name are asked of it in tests/ray instead;
neuron-ls, acl, dpctl) keep the answer written out from Ray's source: NOT_ASKED lists them.
"""

import os

import pytest

import rayaccel
import rayaccel.ray
import ray._private.accelerators as rays
from conftest import BUILD, plugin, source

# Methods whose answer Ray's manager reads from hardware through a vendor's library or tool.
NOT_ASKED = {"get_current_node_num_accelerators", "get_current_node_accelerator_type"}

UNSET = object()  # an environment row's "not set"

# Every variable a row may set; each row starts from none of them.
VARIABLES = ["CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
             "TPU_VISIBLE_CHIPS", "TPU_CHIPS_PER_HOST_BOUNDS", "TPU_HOST_BOUNDS",
             "HABANA_VISIBLE_MODULES", "RAY_TPU_RESOURCE_PER_CHIP",
             "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES",
             "RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES",
             "RAY_EXPERIMENTAL_NOSET_TPU_VISIBLE_CHIPS",
             "RAY_EXPERIMENTAL_NOSET_HABANA_VISIBLE_MODULES", "NEURON_RT_VISIBLE_CORES",
             "RAY_EXPERIMENTAL_NOSET_NEURON_RT_VISIBLE_CORES", "ASCEND_RT_VISIBLE_DEVICES",
             "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES", "ONEAPI_DEVICE_SELECTOR",
             "RAY_EXPERIMENTAL_NOSET_ONEAPI_DEVICE_SELECTOR", "ZE_AFFINITY_MASK",
             "RAY_EXPERIMENTAL_NOSET_ZE_AFFINITY_MASK"]


@pytest.fixture(autouse=True)
def no_visible_variables(monkeypatch):
    for var in VARIABLES:
        monkeypatch.delenv(var, raising=False)


def registry(plugin_name, config, env=None, monkeypatch=None):
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    return rayaccel.Registry(plugins=[plugin(plugin_name)], host_topology=False, config=config)


@pytest.fixture
def gaudi2():
    with registry("gaudi", {"gaudi.sysfs_root": source("tests", "fixtures", "gaudi", "hls2",
                                                        "sys")}) as r:
        yield r


@pytest.fixture
def trn1():
    host = source("tests", "fixtures", "neuron", "trn1-32xlarge")
    with registry("neuron", {"neuron.sysfs_root": os.path.join(host, "sys"),
                             "neuron.dev_root": os.path.join(host, "dev")}) as r:
        yield r


@pytest.fixture
def atlas800():
    host = source("tests", "fixtures", "ascend", "atlas-800-9000")
    with registry("ascend", {"ascend.sysfs_root": os.path.join(host, "sys"),
                             "ascend.dev_root": os.path.join(host, "dev")}) as r:
        yield r


@pytest.fixture
def max1550():
    sys_root = source("tests", "fixtures", "intel_gpu", "max1550-x4-i915", "sys")
    with registry("intel_gpu", {"intel_gpu.sysfs_root": sys_root,
                                "intel_gpu.hierarchy": "FLAT"}) as r:
        yield r


@pytest.fixture
def tpu_v4(monkeypatch):
    host = source("tests", "fixtures", "tpu", "v4-host")
    with registry("tpu", {"tpu.dev_root": os.path.join(host, "dev"),
                          "tpu.sysfs_root": os.path.join(host, "sys"), "tpu.metadata": "off"},
                  {"TPU_ACCELERATOR_TYPE": "v4-8", "TPU_TOPOLOGY": "2x2x1",
                   "TPU_WORKER_ID": "0", "TPU_NAME": "v4-slice"}, monkeypatch) as r:
        yield r


@pytest.fixture
def tpu_none():
    # A GB200 host: /dev/accel is NVIDIA's folder, no chip is a TPU.
    host = source("tests", "fixtures", "tpu", "gb200-host")
    with registry("tpu", {"tpu.dev_root": os.path.join(host, "dev"),
                          "tpu.sysfs_root": os.path.join(host, "sys"),
                          "tpu.metadata": "off"}) as r:
        assert r.snapshot().resources.get("TPU", 0) == 0
        yield r


def run(manager, method, argument, env, monkeypatch):
    """The answer of one row: what the method returns, or the exception it raises, and the
    variables it leaves."""
    for var in VARIABLES:
        monkeypatch.delenv(var, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    try:
        fn = getattr(manager, method)
        result = fn() if argument is UNSET else fn(argument)
    except (RuntimeError, ValueError, IndexError) as e:
        result = type(e)
    return result, {v: os.environ.get(v, UNSET) for v in VARIABLES}


def check(manager, rows, monkeypatch, theirs=None, chips=None):
    """Each row against rayaccel's manager, and against Ray's own (`theirs`, a class of
    ray._private.accelerators) where Ray can be asked; `chips`: the fixture's chip count, for
    a Ray manager that counts them itself (tpu.py)."""
    for row in rows:
        check_row(manager, row, monkeypatch)
        if theirs is not None and row[0] not in NOT_ASKED:
            with monkeypatch.context() as m:
                if chips is not None:
                    m.setattr(theirs, "get_current_node_num_accelerators",
                              staticmethod(lambda: chips))
                check_row(theirs, row, m)


def check_row(manager, row, monkeypatch):
    method, argument, env, expected = row
    if True:
        with monkeypatch.context() as m:
            result, after = run(manager, method, argument, env, m)
            if method == "set_current_process_visible_accelerator_ids":
                got = {k: v for k, v in after.items() if v is not UNSET and k not in env}
                got.update({k: UNSET for k in env if after[k] is UNSET})
                got.update({k: after[k] for k in env if after[k] is not UNSET
                            and after[k] != env[k]})
                assert got == expected, (manager.__name__, method, argument, env)
            elif method == "validate_resource_request_quantity":
                assert result[0] == expected, (manager.__name__, argument, result)
                assert (result[1] is None) == expected, (manager.__name__, argument, result)
            else:
                assert result == expected, (manager.__name__, method, argument, env)


SET = "set_current_process_visible_accelerator_ids"
GET = "get_current_process_visible_accelerator_ids"
VAR = "get_visible_accelerator_ids_env_var"
VALIDATE = "validate_resource_request_quantity"

# nvidia_gpu.py: any quantity; "" and "NoDevFiles" are no device; env_bool reads NOSET, so
# only "1" and "true" keep the variable as it was.
NVIDIA = [
    (VALIDATE, 0, {}, True), (VALIDATE, 0.0, {}, True), (VALIDATE, 0.5, {}, True),
    (VALIDATE, 3, {}, True), (VALIDATE, 16, {}, True),
    (VAR, UNSET, {}, "CUDA_VISIBLE_DEVICES"),
    (GET, UNSET, {}, None), (GET, UNSET, {"CUDA_VISIBLE_DEVICES": ""}, []),
    (GET, UNSET, {"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, []),
    (GET, UNSET, {"CUDA_VISIBLE_DEVICES": "0,2"}, ["0", "2"]),
    (SET, ["0", "3"], {}, {"CUDA_VISIBLE_DEVICES": "0,3"}),
    (SET, [], {}, {"CUDA_VISIBLE_DEVICES": ""}),
    (SET, [1, 2], {}, {"CUDA_VISIBLE_DEVICES": "1,2"}),
    (SET, ["5"], {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}, {}),
    (SET, ["5"], {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "true"}, {}),
    (SET, ["5"], {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "TRUE"}, {}),
    (SET, ["5"], {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "0"},
     {"CUDA_VISIBLE_DEVICES": "5"}),
    (SET, ["5"], {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "false"},
     {"CUDA_VISIBLE_DEVICES": "5"}),
    (SET, ["5"], {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "yes"},
     {"CUDA_VISIBLE_DEVICES": "5"}),
    (SET, ["5"], {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": ""},
     {"CUDA_VISIBLE_DEVICES": "5"}),
]


def test_nvidia_as_nvidia_gpu_py(cuda_h100, monkeypatch):
    check(rayaccel.ray.accelerator_manager("GPU", cuda_h100), NVIDIA, monkeypatch,
          rays.NvidiaGPUAcceleratorManager)


# amd_gpu.py (Ray 2.60): HIP_VISIBLE_DEVICES whatever CUDA_VISIBLE_DEVICES says (older Ray
# read CUDA_VISIBLE_DEVICES when only it was set), ROCR_VISIBLE_DEVICES alone a RuntimeError;
# NOSET read with env_bool.
AMD = [
    (VALIDATE, 0, {}, True), (VALIDATE, 0.5, {}, True), (VALIDATE, 4, {}, True),
    (VAR, UNSET, {}, "HIP_VISIBLE_DEVICES"),
    (VAR, UNSET, {"CUDA_VISIBLE_DEVICES": "0,1"}, "HIP_VISIBLE_DEVICES"),
    (VAR, UNSET, {"CUDA_VISIBLE_DEVICES": "0,1", "HIP_VISIBLE_DEVICES": "1"},
     "HIP_VISIBLE_DEVICES"),
    (VAR, UNSET, {"ROCR_VISIBLE_DEVICES": "0"}, RuntimeError),
    (VAR, UNSET, {"ROCR_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": "0"},
     "HIP_VISIBLE_DEVICES"),
    (GET, UNSET, {}, None), (GET, UNSET, {"HIP_VISIBLE_DEVICES": "NoDevFiles"}, []),
    (GET, UNSET, {"CUDA_VISIBLE_DEVICES": "3,4"}, None),
    (GET, UNSET, {"HIP_VISIBLE_DEVICES": "3,4"}, ["3", "4"]),
    (GET, UNSET, {"ROCR_VISIBLE_DEVICES": "0"}, RuntimeError),
    (SET, ["1"], {}, {"HIP_VISIBLE_DEVICES": "1"}),
    (SET, [], {}, {"HIP_VISIBLE_DEVICES": ""}),
    (SET, ["2", "3"], {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, {"HIP_VISIBLE_DEVICES": "2,3"}),
    (SET, ["2"], {"RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES": "1"}, {}),
    (SET, ["2"], {"RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES": "0"},
     {"HIP_VISIBLE_DEVICES": "2"}),
    (SET, ["2"], {"RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES": ""},
     {"HIP_VISIBLE_DEVICES": "2"}),
]


def test_amd_as_amd_gpu_py(rocm_mi210, monkeypatch):
    check(rayaccel.ray.accelerator_manager("GPU", rocm_mi210), AMD, monkeypatch,
          rays.AMDGPUAcceleratorManager)


# tpu.py: only 1, 2, 4 or 8 (0 and fractions refused); "NoDevFiles" is an id like any other;
# every chip of the host is the framework's default (nothing set, the bounds removed); one or
# two chips set their bounds; env_bool reads NOSET; RAY_TPU_RESOURCE_PER_CHIP=N makes each
# chip N ids.
TPU_V4 = [
    (VALIDATE, 0, {}, False), (VALIDATE, 0.5, {}, False), (VALIDATE, 1, {}, True),
    (VALIDATE, 4.0, {}, True), (VALIDATE, 8, {}, True), (VALIDATE, 3, {}, False),
    (VALIDATE, 16, {}, False),
    (VAR, UNSET, {}, "TPU_VISIBLE_CHIPS"),
    (GET, UNSET, {}, None), (GET, UNSET, {"TPU_VISIBLE_CHIPS": ""}, []),
    (GET, UNSET, {"TPU_VISIBLE_CHIPS": "NoDevFiles"}, ["NoDevFiles"]),
    (GET, UNSET, {"TPU_VISIBLE_CHIPS": "1,3"}, ["1", "3"]),
    (GET, UNSET, {"TPU_VISIBLE_CHIPS": "0,1", "RAY_TPU_RESOURCE_PER_CHIP": "2"},
     ["0", "1", "2", "3"]),
    (GET, UNSET, {"TPU_VISIBLE_CHIPS": "0", "RAY_TPU_RESOURCE_PER_CHIP": "0"}, ValueError),
    (SET, ["0"], {}, {"TPU_VISIBLE_CHIPS": "0", "TPU_CHIPS_PER_HOST_BOUNDS": "1,1,1",
                      "TPU_HOST_BOUNDS": "1,1,1"}),
    (SET, ["2", "3"], {}, {"TPU_VISIBLE_CHIPS": "2,3", "TPU_CHIPS_PER_HOST_BOUNDS": "1,2,1",
                           "TPU_HOST_BOUNDS": "1,1,1"}),
    (SET, ["0", "1", "2"], {}, {"TPU_VISIBLE_CHIPS": "0,1,2"}),
    (SET, ["0", "1", "2", "3"], {}, {}),
    (SET, ["0", "1", "2", "3"], {"TPU_CHIPS_PER_HOST_BOUNDS": "1,1,1", "TPU_HOST_BOUNDS": "1,1,1"},
     {"TPU_CHIPS_PER_HOST_BOUNDS": UNSET, "TPU_HOST_BOUNDS": UNSET}),
    (SET, [], {}, {"TPU_VISIBLE_CHIPS": ""}),
    (SET, ["1"], {"RAY_EXPERIMENTAL_NOSET_TPU_VISIBLE_CHIPS": "1"}, {}),
    (SET, ["1"], {"RAY_EXPERIMENTAL_NOSET_TPU_VISIBLE_CHIPS": "0"},
     {"TPU_VISIBLE_CHIPS": "1", "TPU_CHIPS_PER_HOST_BOUNDS": "1,1,1",
      "TPU_HOST_BOUNDS": "1,1,1"}),
    (SET, ["1"], {"RAY_EXPERIMENTAL_NOSET_TPU_VISIBLE_CHIPS": "False"},
     {"TPU_VISIBLE_CHIPS": "1", "TPU_CHIPS_PER_HOST_BOUNDS": "1,1,1",
      "TPU_HOST_BOUNDS": "1,1,1"}),
    # Two ids per chip: ids 2 and 3 are chip 1; 0, 2, 4, 6 one id of every chip.
    (SET, ["2", "3"], {"RAY_TPU_RESOURCE_PER_CHIP": "2"},
     {"TPU_VISIBLE_CHIPS": "1", "TPU_CHIPS_PER_HOST_BOUNDS": "1,1,1",
      "TPU_HOST_BOUNDS": "1,1,1"}),
    (SET, ["0", "2", "4", "6"], {"RAY_TPU_RESOURCE_PER_CHIP": "2"}, {}),
    (SET, [str(i) for i in range(8)], {"RAY_TPU_RESOURCE_PER_CHIP": "2"},
     {"TPU_VISIBLE_CHIPS": "0,1,2,3"}),
]


def test_tpu_as_tpu_py(tpu_v4, monkeypatch):
    check(rayaccel.ray.accelerator_manager("TPU", tpu_v4), TPU_V4, monkeypatch,
          rays.TPUAcceleratorManager, chips=4)


def test_half_a_tpu_host_is_not_the_whole_of_it(tpu_v4, monkeypatch):
    """Where rayaccel answers better than Ray on purpose: with two ids per chip, four ids on
    chips 0 and 1 are half the host. Ray's tpu.py compares the count alone (four ids, four
    chips) and would leave the worker every chip; rayaccel masks the two it holds."""
    manager = rayaccel.ray.accelerator_manager("TPU", tpu_v4)
    check(manager, [(SET, ["0", "1", "2", "3"], {"RAY_TPU_RESOURCE_PER_CHIP": "2"},
                     {"TPU_VISIBLE_CHIPS": "0,1", "TPU_CHIPS_PER_HOST_BOUNDS": "1,2,1",
                      "TPU_HOST_BOUNDS": "1,1,1"})], monkeypatch)


# tpu.py on a host without chips: the same quantity rule (0.5 refused) whether or not the
# plugin found any; no chip on the node makes an empty set the whole host (the mask goes,
# bounds stay unless one or two chips left them).
TPU_NONE = [
    (VALIDATE, 0.5, {}, False), (VALIDATE, 0, {}, False), (VALIDATE, 2, {}, True),
    (VAR, UNSET, {}, "TPU_VISIBLE_CHIPS"),
    (SET, [], {"TPU_HOST_BOUNDS": "1,1,1"}, {}),
    (SET, [], {"TPU_VISIBLE_CHIPS": "0"}, {"TPU_VISIBLE_CHIPS": UNSET}),
    (SET, ["0"], {}, {"TPU_VISIBLE_CHIPS": "0", "TPU_CHIPS_PER_HOST_BOUNDS": "1,1,1",
                      "TPU_HOST_BOUNDS": "1,1,1"}),
]


def test_tpu_without_chips_as_tpu_py(tpu_none, monkeypatch):
    check(rayaccel.ray.accelerator_manager("TPU", tpu_none), TPU_NONE, monkeypatch,
          rays.TPUAcceleratorManager, chips=0)


# hpu.py: a float that is not whole is refused, 0 and any int are not; "NoDevFiles" is an id;
# NOSET read with env_bool (Ray 2.60; older Ray took any non-empty value).
HPU = [
    (VALIDATE, 0, {}, True), (VALIDATE, 0.0, {}, True), (VALIDATE, 2, {}, True),
    (VALIDATE, 2.0, {}, True), (VALIDATE, 0.5, {}, False), (VALIDATE, 1.5, {}, False),
    (VALIDATE, 0.25, {}, False), (VALIDATE, 64, {}, True),
    (VAR, UNSET, {}, "HABANA_VISIBLE_MODULES"),
    (GET, UNSET, {}, None), (GET, UNSET, {"HABANA_VISIBLE_MODULES": ""}, []),
    (GET, UNSET, {"HABANA_VISIBLE_MODULES": "NoDevFiles"}, ["NoDevFiles"]),
    (GET, UNSET, {"HABANA_VISIBLE_MODULES": "2,3"}, ["2", "3"]),
    (SET, ["1", "2"], {}, {"HABANA_VISIBLE_MODULES": "1,2"}),
    (SET, [], {}, {"HABANA_VISIBLE_MODULES": ""}),
    (SET, ["1"], {"RAY_EXPERIMENTAL_NOSET_HABANA_VISIBLE_MODULES": "1"}, {}),
    (SET, ["1"], {"RAY_EXPERIMENTAL_NOSET_HABANA_VISIBLE_MODULES": "0"},
     {"HABANA_VISIBLE_MODULES": "1"}),
]


def test_gaudi_as_hpu_py(gaudi2, monkeypatch):
    assert gaudi2.snapshot().resources["HPU"] == 8
    check(rayaccel.ray.accelerator_manager("HPU", gaudi2), HPU, monkeypatch,
          rays.HPUAcceleratorManager)


# neuron.py: the count is the sum of neuron-ls's nc_count (32 on a trn1.32xlarge), the type
# always ray.util.accelerators.AWS_NEURON_CORE; a float that is not whole is refused, ints are
# not; the variable is written as ",".join(ids); env_bool reads NOSET.
NEURON = [
    ("get_current_node_num_accelerators", UNSET, {}, 32),
    ("get_current_node_accelerator_type", UNSET, {}, "aws-neuron-core"),
    (VALIDATE, 0, {}, True), (VALIDATE, 2, {}, True), (VALIDATE, 2.0, {}, True),
    (VALIDATE, 0.5, {}, False), (VALIDATE, 1.5, {}, False),
    (VAR, UNSET, {}, "NEURON_RT_VISIBLE_CORES"),
    (GET, UNSET, {}, None), (GET, UNSET, {"NEURON_RT_VISIBLE_CORES": ""}, []),
    (GET, UNSET, {"NEURON_RT_VISIBLE_CORES": "0,5"}, ["0", "5"]),
    (SET, ["0", "1", "5"], {}, {"NEURON_RT_VISIBLE_CORES": "0,1,5"}),
    (SET, [], {}, {"NEURON_RT_VISIBLE_CORES": ""}),
    (SET, ["1"], {"RAY_EXPERIMENTAL_NOSET_NEURON_RT_VISIBLE_CORES": "1"}, {}),
    (SET, ["1"], {"RAY_EXPERIMENTAL_NOSET_NEURON_RT_VISIBLE_CORES": "0"},
     {"NEURON_RT_VISIBLE_CORES": "1"}),
]


def test_neuron_as_neuron_py(trn1, monkeypatch):
    assert trn1.snapshot().resources["neuron_cores"] == 32
    check(rayaccel.ray.accelerator_manager("neuron_cores", trn1), NEURON, monkeypatch,
          rays.NeuronAcceleratorManager)


# npu.py: the count is acl's (the NPUs this process sees); any quantity, fractions too;
# "" and "NoDevFiles" are no device; the variable is written as ",".join(ids); NOSET read with
# env_bool (Ray 2.60; older Ray took any non-empty value, "0" included).
NPU = [
    ("get_current_node_num_accelerators", UNSET, {}, 8),
    (VALIDATE, 0.5, {}, True), (VALIDATE, 3, {}, True), (VALIDATE, 0, {}, True),
    (VAR, UNSET, {}, "ASCEND_RT_VISIBLE_DEVICES"),
    (GET, UNSET, {}, None), (GET, UNSET, {"ASCEND_RT_VISIBLE_DEVICES": ""}, []),
    (GET, UNSET, {"ASCEND_RT_VISIBLE_DEVICES": "NoDevFiles"}, []),
    (GET, UNSET, {"ASCEND_RT_VISIBLE_DEVICES": "0,2"}, ["0", "2"]),
    (SET, ["0", "1"], {}, {"ASCEND_RT_VISIBLE_DEVICES": "0,1"}),
    (SET, [], {}, {"ASCEND_RT_VISIBLE_DEVICES": ""}),
    (SET, ["1"], {"RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "true"}, {}),
    (SET, ["1"], {"RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "0"},
     {"ASCEND_RT_VISIBLE_DEVICES": "1"}),
]


def test_ascend_as_npu_py(atlas800, monkeypatch):
    assert atlas800.snapshot().resources["NPU"] == 8
    check(rayaccel.ray.accelerator_manager("NPU", atlas800), NPU, monkeypatch,
          rays.NPUAcceleratorManager)


# intel_gpu.py: the count is dpctl's level_zero:gpu devices (each tile of a Max 1550 under the
# default flat hierarchy); the type "Intel-GPU-" and the name's last two words; any quantity.
# The variable is ZE_AFFINITY_MASK, read first ("" is none; "NoDevFiles" is no special word
# there); else ONEAPI_DEVICE_SELECTOR ("" and "NoDevFiles" are none), after "level_zero:" when
# it holds it, else bare. A worker gets ZE_AFFINITY_MASK with the ids, unless its NOSET (read
# with env_bool); Ray 2.60 leaves ONEAPI_DEVICE_SELECTOR to the frameworks.
INTEL = [
    ("get_current_node_num_accelerators", UNSET, {}, 8),
    ("get_current_node_accelerator_type", UNSET, {}, "Intel-GPU-Max-1550"),
    (VALIDATE, 0.5, {}, True), (VALIDATE, 3, {}, True), (VALIDATE, 0, {}, True),
    (VAR, UNSET, {}, "ZE_AFFINITY_MASK"),
    (GET, UNSET, {}, None), (GET, UNSET, {"ZE_AFFINITY_MASK": ""}, []),
    (GET, UNSET, {"ZE_AFFINITY_MASK": "0,2"}, ["0", "2"]),
    (GET, UNSET, {"ZE_AFFINITY_MASK": "NoDevFiles"}, ["NoDevFiles"]),
    (GET, UNSET, {"ZE_AFFINITY_MASK": "3", "ONEAPI_DEVICE_SELECTOR": "level_zero:0"}, ["3"]),
    (GET, UNSET, {"ONEAPI_DEVICE_SELECTOR": ""}, []),
    (GET, UNSET, {"ONEAPI_DEVICE_SELECTOR": "NoDevFiles"}, []),
    (GET, UNSET, {"ONEAPI_DEVICE_SELECTOR": "level_zero:0,2"}, ["0", "2"]),
    (GET, UNSET, {"ONEAPI_DEVICE_SELECTOR": "0,2"}, ["0", "2"]),
    (SET, ["0", "1"], {}, {"ZE_AFFINITY_MASK": "0,1"}),
    (SET, ["5", "2"], {}, {"ZE_AFFINITY_MASK": "5,2"}),
    (SET, [], {}, {"ZE_AFFINITY_MASK": ""}),
    # No such device: Ray's join.
    (SET, ["9"], {}, {"ZE_AFFINITY_MASK": "9"}),
    (SET, ["6"], {"RAY_EXPERIMENTAL_NOSET_ZE_AFFINITY_MASK": "1"}, {}),
    (SET, ["6"], {"RAY_EXPERIMENTAL_NOSET_ZE_AFFINITY_MASK": "0"}, {"ZE_AFFINITY_MASK": "6"}),
    (SET, ["1"], {"ONEAPI_DEVICE_SELECTOR": "level_zero:3"}, {"ZE_AFFINITY_MASK": "1"}),
]


def test_intel_gpu_as_intel_gpu_py(max1550, monkeypatch):
    assert max1550.snapshot().resources["GPU"] == 8
    check(rayaccel.ray.accelerator_manager("GPU", max1550), INTEL, monkeypatch,
          rays.IntelGPUAcceleratorManager)


def test_families_the_node_lacks_as_rays_managers(sim_h100, monkeypatch):
    """No plugin of the family on this node: Ray's manager still names its variable and keeps
    its quantity rule."""
    check(rayaccel.ray.accelerator_manager("HPU", sim_h100),
          [(VAR, UNSET, {}, "HABANA_VISIBLE_MODULES"), (VALIDATE, 0.5, {}, False),
           (VALIDATE, 1, {}, True), (VALIDATE, 0, {}, True),
           (SET, [], {}, {"HABANA_VISIBLE_MODULES": ""})], monkeypatch)
    check(rayaccel.ray.accelerator_manager("TPU", sim_h100),
          [(VAR, UNSET, {}, "TPU_VISIBLE_CHIPS"), (VALIDATE, 0.5, {}, False)], monkeypatch)
