"""Ray's own rules, family by family, as its accelerator managers apply them.

Each rule here restates what a file of Ray's `python/ray/_private/accelerators/` does (Ray
2.60, the version requirements.txt pins; tests/python/test_ray_parity.py asks Ray's own
classes the same questions, row by row), so that rayaccel's managers answer exactly as the manager they stand in for: how the
visible-devices variable is chosen and read, how `RAY_EXPERIMENTAL_NOSET_<VAR>` is read, which
request quantities are refused, and (TPU) what a worker's chips set. rayaccel.ray applies them;
nothing here reads a snapshot.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

Answer = Tuple[bool, Optional[str]]


def env_bool(name: str) -> bool:
    """ray_constants.env_bool(name, False): set only by "1" or "true" in any case."""
    value = os.environ.get(name)
    return value is not None and (value.lower() == "true" or value == "1")


def _any_quantity(resource: str, quantity: float) -> Answer:
    return (True, None)


def _whole_quantity(resource: str, quantity: float) -> Answer:
    # hpu.py, neuron.py: a float that is not whole is refused; ints (0 too) are not.
    if isinstance(quantity, float) and not quantity.is_integer():
        return (False, f"{resource} resource quantity must be whole numbers. "
                       f"The specified quantity {quantity} is invalid.")
    return (True, None)


TPU_VALID_CHIP_OPTIONS = (1, 2, 4, 8)


def _tpu_quantity(resource: str, quantity: float) -> Answer:
    # tpu.py: one of the chip configurations, 0 and fractions refused.
    if quantity not in TPU_VALID_CHIP_OPTIONS:
        return (False, f"The number of requested 'TPU' was set to {quantity} which is not a "
                       f"supported chip configuration. Supported configs: "
                       f"{TPU_VALID_CHIP_OPTIONS}")
    return (True, None)


# Ray's validate_resource_request_quantity per resource name: whichever vendor's manager Ray
# picks for the name, this is what it answers.
QUANTITY_RULES: Dict[str, Callable[[str, float], Answer]] = {
    "GPU": _any_quantity,            # nvidia_gpu.py, amd_gpu.py, intel_gpu.py
    "TPU": _tpu_quantity,            # tpu.py
    "HPU": _whole_quantity,          # hpu.py
    "neuron_cores": _whole_quantity,  # neuron.py
    "NPU": _any_quantity,            # npu.py
}


@dataclass(frozen=True)
class Family:
    """How one of Ray's managers treats its visible-devices variable."""
    manager: str                    # Ray's class: the one whose EC2 answers are passed on
    variable: str                   # the variable it names
    noset: Callable[[str], bool]    # how it reads RAY_EXPERIMENTAL_NOSET_<...>
    noset_variable: str             # which NOSET variable it reads
    no_dev_files_is_none: bool      # reads the value "NoDevFiles" as no device


def _family(manager, variable, noset, no_dev_files_is_none, noset_variable=None):
    return Family(manager, variable, noset, noset_variable or "RAY_EXPERIMENTAL_NOSET_" + variable,
                  no_dev_files_is_none)


# Keyed by (resource, the variable the plugin names): that pair says which of Ray's managers a
# plugin stands in for.
FAMILIES: Dict[Tuple[str, str], Family] = {
    ("GPU", "CUDA_VISIBLE_DEVICES"):
        _family("NvidiaGPUAcceleratorManager", "CUDA_VISIBLE_DEVICES", env_bool, True),
    ("GPU", "HIP_VISIBLE_DEVICES"):
        _family("AMDGPUAcceleratorManager", "HIP_VISIBLE_DEVICES", env_bool, True),
    ("TPU", "TPU_VISIBLE_CHIPS"):
        _family("TPUAcceleratorManager", "TPU_VISIBLE_CHIPS", env_bool, False),
    ("HPU", "HABANA_VISIBLE_MODULES"):
        _family("HPUAcceleratorManager", "HABANA_VISIBLE_MODULES", env_bool, False),
    ("neuron_cores", "NEURON_RT_VISIBLE_CORES"):
        _family("NeuronAcceleratorManager", "NEURON_RT_VISIBLE_CORES", env_bool, False),
    ("NPU", "ASCEND_RT_VISIBLE_DEVICES"):
        _family("NPUAcceleratorManager", "ASCEND_RT_VISIBLE_DEVICES", env_bool, True),
    # intel_gpu.py names ZE_AFFINITY_MASK and reads ONEAPI_DEVICE_SELECTOR after it (below); a
    # plugin naming the selector, as older Ray did, stands in for the same manager.
    ("GPU", "ZE_AFFINITY_MASK"):
        _family("IntelGPUAcceleratorManager", "ZE_AFFINITY_MASK", env_bool, False),
    ("GPU", "ONEAPI_DEVICE_SELECTOR"):
        _family("IntelGPUAcceleratorManager", "ZE_AFFINITY_MASK", env_bool, False),
}

# intel_gpu.py's second variable, and the backend written before its ids.
ONEAPI_SELECTOR = "ONEAPI_DEVICE_SELECTOR"
ONEAPI_PREFIX = "level_zero:"


def intel_visible_ids() -> Optional[List[str]]:
    """intel_gpu.py's get_current_process_visible_accelerator_ids: ZE_AFFINITY_MASK when set
    ("" is none); else ONEAPI_DEVICE_SELECTOR ("" and "NoDevFiles" are none), its ids after
    "level_zero:" when that is in it, else the bare list; None when neither is set."""
    mask = os.environ.get("ZE_AFFINITY_MASK")
    if mask is not None:
        return [] if mask == "" else mask.split(",")
    selector = os.environ.get(ONEAPI_SELECTOR)
    if selector is None:
        return None
    if selector in ("", "NoDevFiles"):
        return []
    if ONEAPI_PREFIX in selector:
        return selector.split(ONEAPI_PREFIX)[1].split(",")
    return selector.split(",")


def intel_environment(ids: List[str], env: Dict[str, str]) -> Dict[str, str]:
    """intel_gpu.py's set_current_process_visible_accelerator_ids over `env` (the plugin's
    answer for `ids`): ZE_AFFINITY_MASK alone, unless RAY_EXPERIMENTAL_NOSET_ZE_AFFINITY_MASK
    (env_bool). Ray leaves ONEAPI_DEVICE_SELECTOR to frameworks that manage it themselves."""
    if env_bool("RAY_EXPERIMENTAL_NOSET_ZE_AFFINITY_MASK"):
        return {}
    return {"ZE_AFFINITY_MASK": env.get("ZE_AFFINITY_MASK", ",".join(ids))}


# The variable Ray's manager of a resource names when no plugin of this node says (GPU: the
# NVIDIA manager, Ray's choice on a node without AMD or Intel GPUs).
DEFAULT_VARIABLES = {"GPU": "CUDA_VISIBLE_DEVICES", "TPU": "TPU_VISIBLE_CHIPS",
                     "HPU": "HABANA_VISIBLE_MODULES", "neuron_cores": "NEURON_RT_VISIBLE_CORES",
                     "NPU": "ASCEND_RT_VISIBLE_DEVICES"}


def family_of(resource: str, variable: str) -> Family:
    """Ray's manager for a plugin of `resource` naming `variable`; a family Ray has no manager
    for follows the newest managers' common rules."""
    known = FAMILIES.get((resource, variable))
    return known or _family(None, variable, env_bool, False)


def amd_variable() -> str:
    """amd_gpu.py's get_visible_accelerator_ids_env_var: HIP_VISIBLE_DEVICES, whatever
    CUDA_VISIBLE_DEVICES says; ROCR_VISIBLE_DEVICES without it raises as Ray raises."""
    if "HIP_VISIBLE_DEVICES" not in os.environ and "ROCR_VISIBLE_DEVICES" in os.environ:
        raise RuntimeError("Please use HIP_VISIBLE_DEVICES instead of ROCR_VISIBLE_DEVICES")
    return "HIP_VISIBLE_DEVICES"


def tpu_resource_per_chip() -> int:
    """tpu.py's get_tpu_resource_per_chip: RAY_TPU_RESOURCE_PER_CHIP, a positive integer
    (default 1) of Ray TPU resources per physical chip."""
    value = os.environ.get("RAY_TPU_RESOURCE_PER_CHIP")
    if value is None:
        return 1
    if not value.isdecimal() or int(value) < 1:
        raise ValueError(f"RAY_TPU_RESOURCE_PER_CHIP must be a positive integer, got: {value!r}")
    return int(value)


def tpu_visible_ids(value: str) -> List[str]:
    """tpu.py: TPU_VISIBLE_CHIPS names chips; with several resources per chip, Ray's ids are
    the chips' logical devices."""
    per_chip = tpu_resource_per_chip()
    if per_chip == 1:
        return value.split(",")
    return [str(int(chip) * per_chip + device)
            for chip in value.split(",") if chip.strip() for device in range(per_chip)]


def tpu_environment(ids: List[str], chips_on_node: List[int]) -> Tuple[Dict[str, str], List[str]]:
    """tpu.py's set_current_process_visible_accelerator_ids, as (variables to set, variables to
    remove). The ids name chips (or, with several resources per chip, their logical devices:
    the chips are what is masked). As many ids as the host has chips is the whole host: the
    framework's defaults, so the mask goes; with several resources per chip that also needs
    the ids to cover every chip (Ray compares the count alone, and would give half a host the
    whole of it). One or two chips take their bounds with them; bounds one or two chips left
    behind go when a worker is given more."""
    per_chip = tpu_resource_per_chip()
    chips = sorted({int(i) // per_chip for i in ids})
    bounds, host = "TPU_CHIPS_PER_HOST_BOUNDS", "TPU_HOST_BOUNDS"
    stale = len(chips) not in (1, 2) and os.environ.get(bounds) in ("1,1,1", "1,2,1")
    stale_bounds = [bounds, host] if stale else []
    if len(ids) == len(chips_on_node) and (per_chip == 1 or set(chips) == set(chips_on_node)):
        return {}, ["TPU_VISIBLE_CHIPS"] + stale_bounds
    env = {"TPU_VISIBLE_CHIPS": ",".join(str(c) for c in chips)}
    if len(chips) in (1, 2):
        wanted = "1,1,1" if len(chips) == 1 else "1,2,1"
        if os.environ.get(bounds) != wanted:
            env.update({bounds: wanted, host: "1,1,1"})
        elif host not in os.environ:
            env[host] = "1,1,1"
    return env, stale_bounds


# Which resources Ray's raylet counts by device (gives a task instance ids): GPU, and the list
# of its `custom_unit_instance_resources` setting (src/ray/common/ray_config_def.h), which a
# process reads from this variable, the list replaced whole. Any other resource is one pool:
# every task of it is told instance 0. (src/ray/unit_instances.h is the same rule in C++.)
UNIT_INSTANCE_VARIABLE = "RAY_custom_unit_instance_resources"
PREDEFINED_UNIT_INSTANCES = ("GPU",)
TESTED_RAY_VERSION = "2.60.0"
TESTED_CUSTOM_UNIT_INSTANCES = "neuron_cores,TPU,NPU,HPU,RBLN,FURIOSA,TTNPU,MBLT"


def _entries(value: str) -> List[str]:
    return [e.strip() for e in value.split(",") if e.strip()]


def raylet_unit_instance_default(raylet_so: str) -> Optional[str]:
    """The default list compiled into Ray's _raylet.so: the one NUL-terminated string there
    that is a comma-separated list of names holding neuron_cores and TPU. None when the file
    cannot be read or holds no such string, or several."""
    import mmap
    import re
    name = re.compile(rb"[A-Za-z0-9_,]")
    found = set()
    try:
        with open(raylet_so, "rb") as f, \
                mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            at = data.find(b"neuron_cores")
            while at >= 0:
                begin, end = at, at + len(b"neuron_cores")
                while begin > 0 and name.match(data[begin - 1:begin]):
                    begin -= 1
                while end < len(data) and name.match(data[end:end + 1]):
                    end += 1
                if (begin == 0 or data[begin - 1] == 0) and end < len(data) and data[end] == 0:
                    found.add(data[begin:end].decode())
                at = data.find(b"neuron_cores", end)
    except (OSError, ValueError):
        return None
    lists = {s for s in found if re.fullmatch(r"\w+(,\w+)*", s) and
             {"neuron_cores", "TPU"} <= set(s.split(","))}
    return lists.pop() if len(lists) == 1 else None


def rays_unit_instances() -> Tuple[str, str]:
    """What Ray started from this process would use, and where that came from: the variable
    when set, else the default of the imported Ray's _raylet.so, else that of the Ray version
    rayaccel is tested with."""
    if UNIT_INSTANCE_VARIABLE in os.environ:
        return os.environ[UNIT_INSTANCE_VARIABLE], f"this process's {UNIT_INSTANCE_VARIABLE}"
    try:
        import importlib.util
        spec = importlib.util.find_spec("ray")
        where = os.path.join(list(spec.submodule_search_locations)[0], "_raylet.so")
    except Exception:  # no Ray here
        where = None
    listed = raylet_unit_instance_default(where) if where else None
    if listed is not None:
        return listed, f"the default in {where}"
    return TESTED_CUSTOM_UNIT_INSTANCES, f"Ray {TESTED_RAY_VERSION}'s default"


def unit_instance_setting(resources: List[str], rays_list: str) -> Optional[str]:
    """rays_list with those of `resources` Ray does not count by device appended (nothing
    dropped or reordered); None when it counts each of them already."""
    entries = _entries(rays_list)
    counted = set(entries) | set(PREDEFINED_UNIT_INSTANCES)
    added = [r for r in dict.fromkeys(resources) if r and r not in counted]
    return ",".join(entries + added) if added else None
