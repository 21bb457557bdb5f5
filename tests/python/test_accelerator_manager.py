"""rayaccel.ray.accelerator_manager against Ray's own managers on the same facts.

The expected values are what Ray's managers (python/ray/_private/accelerators/: nvidia_gpu.py,
amd_gpu.py, tpu.py) return on the node each fixture describes: NVML's device count and device
0's name through Ray's type pattern; the AMD PCI device-id table; the TPU environment and its
extra resources and labels, written out from Ray's source and checked against the installed
Ray (requirements.txt) where it can be asked (test_ray_parity.py, tests/ray). install() runs
against the installed Ray's own accelerators package.
"""

import inspect
import os
import subprocess
import sys
import textwrap

import pytest

import rayaccel.ray

# Every static method of Ray's AcceleratorManager (accelerator.py, newest Ray).
RAY_INTERFACE = [
    "get_resource_name", "get_visible_accelerator_ids_env_var",
    "get_current_node_num_accelerators", "get_current_node_accelerator_type",
    "get_current_node_additional_resources", "validate_resource_request_quantity",
    "get_current_process_visible_accelerator_ids", "set_current_process_visible_accelerator_ids",
    "get_ec2_instance_num_accelerators", "get_ec2_instance_accelerator_type",
    "get_current_node_accelerator_labels",
]


def answers(manager):
    return {
        "resource": manager.get_resource_name(),
        "env": manager.get_visible_accelerator_ids_env_var(),
        "count": manager.get_current_node_num_accelerators(),
        "type": manager.get_current_node_accelerator_type(),
        "additional": manager.get_current_node_additional_resources(),
    }


def test_the_interface_is_rays(sim_h100):
    from ray._private.accelerators.accelerator import AcceleratorManager
    # The installed Ray's interface is the list above, and rayaccel's class is one of it.
    theirs = sorted(n for n, v in vars(AcceleratorManager).items() if isinstance(v, staticmethod))
    assert theirs == sorted(RAY_INTERFACE)
    manager = rayaccel.ray.accelerator_manager("GPU", sim_h100)
    assert issubclass(manager, AcceleratorManager)
    for name in RAY_INTERFACE:
        assert isinstance(inspect.getattr_static(manager, name), staticmethod), name
        assert callable(getattr(manager, name)), name
    assert manager.get_ec2_instance_num_accelerators("p5.48xlarge", {}) is None
    assert manager.get_ec2_instance_accelerator_type("p5.48xlarge", {}) is None


def test_nvidia_on_the_fake_nvml_as_ray_says(cuda_h100):
    # nvmlDeviceGetCount = 8; "NVIDIA H100 80GB HBM3" through Ray's pattern is "H100".
    manager = rayaccel.ray.accelerator_manager("GPU", cuda_h100)
    assert answers(manager) == {"resource": "GPU", "env": "CUDA_VISIBLE_DEVICES", "count": 8,
                                "type": "H100", "additional": None}
    assert manager.validate_resource_request_quantity(3) == (True, None)
    assert manager.validate_resource_request_quantity(0.5) == (True, None)


def test_the_sim_h100_as_ray_says(sim_h100):
    manager = rayaccel.ray.accelerator_manager("GPU", sim_h100)
    assert answers(manager) == {"resource": "GPU", "env": "CUDA_VISIBLE_DEVICES", "count": 8,
                                "type": "H100", "additional": None}


def test_amd_from_the_kfd_capture_as_ray_says(rocm_mi210):
    # Eight MI210s (PCI 0x740f): Ray's table says AMD-Instinct-MI210; HIP_VISIBLE_DEVICES.
    manager = rayaccel.ray.accelerator_manager("GPU", rocm_mi210)
    assert answers(manager) == {"resource": "GPU", "env": "HIP_VISIBLE_DEVICES", "count": 8,
                                "type": "AMD-Instinct-MI210", "additional": None}


def test_tpu_from_the_host_tree_as_ray_says(tpu_v5e, monkeypatch):
    manager = rayaccel.ray.accelerator_manager("TPU", tpu_v5e)
    # Ray's tpu.py: the slice name and, on worker 0, the pod type's head resource.
    assert answers(manager) == {
        "resource": "TPU", "env": "TPU_VISIBLE_CHIPS", "count": 8, "type": "TPU-V5LITEPOD",
        "additional": {"ci-slice": 1.0, "TPU-v5litepod-8-head": 1.0}}
    labels = manager.get_current_node_accelerator_labels()
    assert labels["ray.io/tpu-slice-name"] == "ci-slice", labels
    assert labels["ray.io/tpu-worker-id"] == "0" and labels["ray.io/tpu-topology"] == "2x4"
    assert labels["ray.io/tpu-pod-type"] == "v5litepod-8", labels
    # Ray's TPU_VALID_CHIP_OPTIONS: 1, 2, 4, 8, and never a fraction.
    for n in (1, 2, 4, 8):
        assert manager.validate_resource_request_quantity(n) == (True, None), n
    for n in (3, 0.5, 16):
        valid, message = manager.validate_resource_request_quantity(n)
        assert not valid and message, (n, message)
    # One chip: Ray sets the chip and host bounds with it.
    manager.set_current_process_visible_accelerator_ids(["0"])
    assert os.environ["TPU_VISIBLE_CHIPS"] == "0"
    assert os.environ["TPU_CHIPS_PER_HOST_BOUNDS"] == "1,1,1"
    assert os.environ["TPU_HOST_BOUNDS"] == "1,1,1"
    for var in ("TPU_CHIPS_PER_HOST_BOUNDS", "TPU_HOST_BOUNDS"):
        monkeypatch.delenv(var)


def test_visible_ids_read_and_written_as_ray_does(sim_h100, monkeypatch):
    manager = rayaccel.ray.accelerator_manager("GPU", sim_h100)
    assert manager.get_current_process_visible_accelerator_ids() is None  # unset: all
    for value, ids in [("", []), ("NoDevFiles", []), ("0,2", ["0", "2"]),
                       ("GPU-5d1c8c3e", ["GPU-5d1c8c3e"])]:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
        assert manager.get_current_process_visible_accelerator_ids() == ids, value
    manager.set_current_process_visible_accelerator_ids(["0", "3"])
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,3"
    manager.set_current_process_visible_accelerator_ids([])
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    monkeypatch.setenv("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES", "1")
    manager.set_current_process_visible_accelerator_ids(["5"])
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "", "NOSET keeps the variable as it was"


def test_unhealthy_devices_are_not_given_to_ray(tmp_path):
    import json
    from conftest import plugin, source
    data = json.load(open(source("examples", "dgx-h100.json")))
    data["devices"][2]["health"] = "unhealthy"
    spec = tmp_path / "node.json"
    spec.write_text(json.dumps(data))
    with rayaccel.Registry(plugins=[plugin("sim")], host_topology=False,
                           config={"sim.spec": str(spec)}) as r:
        # Ray would count 8 (it asks NVML); rayaccel withholds the broken one.
        assert rayaccel.ray.accelerator_manager("GPU", r).get_current_node_num_accelerators() == 7


def test_a_family_the_node_lacks_answers_as_ray_does_without_devices(sim_h100):
    manager = rayaccel.ray.accelerator_manager("HPU", sim_h100)
    assert manager.get_current_node_num_accelerators() == 0
    assert manager.get_current_node_accelerator_type() is None
    # Ray's HPU manager names its variable on any node.
    assert manager.get_visible_accelerator_ids_env_var() == "HABANA_VISIBLE_MODULES"
    # No plugin to ask: only Ray's own rule for the family refuses (hpu.py: whole numbers).
    assert manager.validate_resource_request_quantity(1) == (True, None)
    assert not manager.validate_resource_request_quantity(0.5)[0]
    # A family Ray has no manager for: no variable, nothing refused.
    other = rayaccel.ray.accelerator_manager("ACME", sim_h100)
    assert other.get_visible_accelerator_ids_env_var() is None
    assert other.get_current_process_visible_accelerator_ids() is None
    assert other.validate_resource_request_quantity(0.5) == (True, None)


def test_quantities_that_are_not_quantities(sim_h100):
    # Ray refuses negatives before it asks a manager, and cannot scale nan or infinity: no
    # request reaches the manager with them, and a direct caller is told.
    manager = rayaccel.ray.accelerator_manager("GPU", sim_h100)
    for bad in (float("nan"), float("inf"), -1, -0.5, "2", None):
        valid, message = manager.validate_resource_request_quantity(bad)
        assert not valid and message, bad
    # As Ray's NVIDIA manager: num_gpus=0 (Ray's documentation uses it) and any count.
    for good in (0, 0.0, 2 ** 40):
        assert manager.validate_resource_request_quantity(good) == (True, None), good


def run_with_ray(tmp_path, script):
    """`script` in a fresh interpreter with the installed Ray (install() changes Ray's
    module-level functions for the whole process)."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_install_replaces_only_the_families_a_plugin_serves(tmp_path):
    """After install(), Ray's lookups answer with rayaccel's GPU manager (the sim plugin
    serves GPU, in place of all of Ray's GPU managers: NVIDIA, AMD, Intel, Apple, MetaX); TPU,
    whose plugin runs but found no chip, and every family no plugin serves keep Ray's own
    manager, the very class, unchanged."""
    from conftest import plugin, source
    gb200 = source("tests", "fixtures", "tpu", "gb200-host")
    lines = run_with_ray(tmp_path, f"""
        import rayaccel, rayaccel.ray
        import ray._private.accelerators as acc
        before = {{m: dict(vars(m)) for m in acc.get_all_accelerator_managers()}}
        r = rayaccel.Registry(plugins=[{plugin("sim")!r}, {plugin("tpu")!r}],
                              host_topology=False,
                              config={{"sim.spec": {source("examples", "dgx-h100.json")!r},
                                      "tpu.dev_root": {gb200 + "/dev"!r},
                                      "tpu.sysfs_root": {gb200 + "/sys"!r},
                                      "tpu.metadata": "off"}})
        installed = rayaccel.ray.install(r)
        assert rayaccel.ray.install(r) and len(installed) == 1  # again: the same answer
        gpu = acc.get_accelerator_manager_for_resource("GPU")
        print(gpu.__name__, issubclass(gpu, acc.AcceleratorManager))
        print(sorted(m.__name__ for m in acc.get_all_accelerator_managers()))
        for name in ("TPU", "HPU", "NPU", "RBLN", "neuron_cores"):
            m = acc.get_accelerator_manager_for_resource(name)
            assert m is getattr(acc, m.__name__) and dict(vars(m)) == before[m], name
        print(gpu.get_current_node_num_accelerators(), gpu.get_current_node_accelerator_type())
        r.close()
    """)
    assert lines == [
        "RayaccelGPUAcceleratorManager True",
        "['FuriosaAcceleratorManager', 'HPUAcceleratorManager', 'MBLTAcceleratorManager', "
        "'NPUAcceleratorManager', 'NeuronAcceleratorManager', 'RBLNAcceleratorManager', "
        "'RayaccelGPUAcceleratorManager', 'TPUAcceleratorManager', 'TTNPUAcceleratorManager']",
        "8 H100"], lines


def test_ec2_answers_are_rays_own(tmp_path):
    """Ray's autoscaler sizes AWS node types with get_ec2_instance_*: rayaccel's managers pass
    on what Ray's own managers of the family say (nvidia_gpu.py reads GpuInfo; neuron.py its
    instance table); without an answer, None."""
    from conftest import plugin, source
    lines = run_with_ray(tmp_path, f"""
        import rayaccel, rayaccel.ray
        import ray._private.accelerators as acc
        r = rayaccel.Registry(plugins=[{plugin("sim")!r}], host_topology=False,
                              config={{"sim.spec": {source("examples", "dgx-h100.json")!r}}})
        rayaccel.ray.install(r)
        instances = {{"p4d.24xlarge": {{"GpuInfo": {{"Gpus": [
            {{"Name": "A100", "Manufacturer": "NVIDIA", "Count": 8}}]}}}},
            "m5.large": {{}}}}
        gpu = acc.get_accelerator_manager_for_resource("GPU")
        print(gpu.get_ec2_instance_num_accelerators("p4d.24xlarge", instances),
              gpu.get_ec2_instance_accelerator_type("p4d.24xlarge", instances))
        print(gpu.get_ec2_instance_num_accelerators("m5.large", instances),
              gpu.get_ec2_instance_accelerator_type("x1.unknown", instances))
        neuron = rayaccel.ray.accelerator_manager("neuron_cores", r)
        print(neuron.get_ec2_instance_num_accelerators("trn1.32xlarge", {{}}))
        r.close()
    """)
    assert lines == ["8 A100", "None None", "32"], lines


def test_the_start_up_hook_installs_in_a_new_process_and_fails_safe(tmp_path):
    """rayaccel.pth's hook, as Ray's workers meet it: with RAYACCEL_RAY_MANAGERS set, importing
    Ray's accelerator package installs rayaccel's managers (here from the sim node named in a
    config file); an agent that is not there leaves Ray's own managers, with a warning."""
    from conftest import source
    config = tmp_path / "rayaccel.conf"
    config.write_text(f"sim.spec = {source('examples', 'dgx-h100.json')}\n")
    script = textwrap.dedent("""
        import ray._private.accelerators as acc
        gpu = acc.get_accelerator_manager_for_resource("GPU")
        print(gpu.__name__, gpu.get_current_node_num_accelerators())
    """)
    env = dict(os.environ, RAYACCEL_RAY_MANAGERS="1", RAYACCEL_CONFIG_FILE=str(config))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == "RayaccelGPUAcceleratorManager 8\n", out
    env["RAYACCEL_RAY_MANAGERS"] = "0"  # off: Ray's own, silently
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.startswith("NvidiaGPUAcceleratorManager") and not out.stderr, out
    env["RAYACCEL_RAY_MANAGERS"] = f"unix:{tmp_path}/no-agent.sock"
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("NvidiaGPUAcceleratorManager"), out
    assert "rayaccel's accelerator managers are not installed" in out.stderr, out.stderr


UNIT = "RAY_custom_unit_instance_resources"


def test_rays_unit_instance_list_is_read_from_the_installed_ray(monkeypatch):
    from rayaccel import _ray_rules as rules
    monkeypatch.delenv(UNIT, raising=False)
    listed, where = rules.rays_unit_instances()
    assert listed == rules.TESTED_CUSTOM_UNIT_INSTANCES  # requirements.txt's Ray
    assert where.endswith("_raylet.so")
    monkeypatch.setenv(UNIT, "TPU,FPGA")
    assert rules.rays_unit_instances()[0] == "TPU,FPGA"
    assert rules.unit_instance_setting(["GPU", "FPGA", "zeta_z1", "zeta_z1"], "TPU,FPGA") == \
        "TPU,FPGA,zeta_z1"
    assert rules.unit_instance_setting(["GPU", "TPU"], "TPU") is None


def test_a_new_family_is_counted_by_device_in_what_this_process_starts(monkeypatch, caplog):
    from rayaccel import _ray_rules as rules
    monkeypatch.delenv(UNIT, raising=False)
    monkeypatch.delenv("RAY_RAYLET_PID", raising=False)
    expected = rules.TESTED_CUSTOM_UNIT_INSTANCES + ",zeta_z1"
    assert rayaccel.ray._count_by_device(["GPU", "zeta_z1"]) == expected
    assert os.environ[UNIT] == expected
    assert rayaccel.ray._count_by_device(["zeta_z1", "TPU"]) is None  # already there
    # In a worker, the raylet runs with what it had: a warning naming the variable, no change.
    monkeypatch.setenv(UNIT, "TPU")
    monkeypatch.setenv("RAY_RAYLET_PID", "1")
    with caplog.at_level("WARNING", logger="rayaccel"):
        assert rayaccel.ray._count_by_device(["zeta_z1"]) is None
    assert f"{UNIT}=TPU,zeta_z1" in caplog.text and "device 0" in caplog.text
    assert os.environ[UNIT] == "TPU"
