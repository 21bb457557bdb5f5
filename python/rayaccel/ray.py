"""rayaccel for Ray's accelerator extension point: one AcceleratorManager for any family.

Ray knows each accelerator family through a class under `ray._private.accelerators` (the
interface is `AcceleratorManager` in `accelerator.py`: static methods only). This module makes
such a class for any resource a rayaccel plugin provides, answered from a rayaccel snapshot
(local discovery, or a registry or agent client you pass), with the rules of Ray's own manager
of the family wherever Ray defines them (rayaccel._ray_rules): the visible-devices variable
chosen, read and set as that manager does (NoDevFiles, RAY_EXPERIMENTAL_NOSET_<VAR>, TPU's
whole host and RAY_TPU_RESOURCE_PER_CHIP, ROCm's CUDA/HIP/ROCR rules), request quantities
refused as it refuses them, EC2 answers passed on from it, and node totals and the accelerator
type as Ray would report them on the same devices. Where rayaccel answers differently on
purpose (unhealthy devices are not counted, MIG instances are), docs/ray-integration.md says
why.

    import rayaccel.ray
    rayaccel.ray.install()   # before ray.init() / ray start, in the process that starts Ray;
                             # Ray's raylets and workers then install through rayaccel.pth

Ray itself is not a dependency: the classes subclass Ray's AcceleratorManager when Ray is
importable, and are plain classes with the same static methods otherwise.
"""

from __future__ import annotations

import math
import os
import threading
from typing import Callable, Dict, List, Optional, Tuple

from . import _ray_rules as rules
from .types import NodeSnapshot

try:  # Ray's interface, when Ray is installed
    from ray._private.accelerators.accelerator import AcceleratorManager as _Base
except ImportError:  # pragma: no cover - Ray is optional
    _Base = object

# A source of snapshots: a callable returning the node's current NodeSnapshot.
SnapshotSource = Callable[[], NodeSnapshot]

_local_lock = threading.Lock()
_local_registry = None


# Set for the processes a node starts (Ray's raylet and workers), and read by _rayaccel_hook
# there: "1" (discover locally) or the agent whose snapshot the managers answer from.
MANAGERS_VARIABLE = "RAYACCEL_RAY_MANAGERS"


def _local_snapshot() -> NodeSnapshot:
    """This node, once per process: from the agent RAYACCEL_RAY_MANAGERS names, else
    discovered with every plugin found, each isolated."""
    global _local_registry
    with _local_lock:
        if _local_registry is None:
            where = os.environ.get(MANAGERS_VARIABLE, "")
            if where.startswith(("unix:", "tcp://", "/")):
                from .agent import AgentClient
                _local_registry = AgentClient(where)
            else:
                from .registry import Registry
                _local_registry = Registry()
        return _local_registry.snapshot()


def _source_of(source) -> SnapshotSource:
    if source is None:
        return _local_snapshot
    if hasattr(source, "snapshot"):  # a Registry or an AgentClient
        return source.snapshot
    if callable(source):
        return source
    raise TypeError("source is a Registry, an AgentClient, a callable or None")


def _family_devices(snap: NodeSnapshot, resource: str):
    """The devices Ray counts for `resource`: not unhealthy, not the parent of a partition."""
    parents = {d.parent_id for d in snap.devices if d.parent_id}
    return [d for d in snap.devices
            if d.resource == resource and d.health != "unhealthy" and d.id not in parents]


def _families(snap: NodeSnapshot) -> List[str]:
    """The families a loaded plugin serves: it runs and found devices."""
    return sorted({p.resource for p in snap.plugins if p.resource and p.device_count > 0
                   and p.state in ("active", "degraded")})


def _healthy_ids(snap: NodeSnapshot, resource: str) -> Optional[List[str]]:
    """With no visible-devices variable set: None (every device, as Ray's managers say) while
    every device of the family is healthy; else the indices of the healthy ones. Ray reads
    these as the node's device ids at start and maps each worker's slots onto them, as it does
    for a CUDA_VISIBLE_DEVICES the user set, so that no task is given a device rayaccel found
    unhealthy (the node's count already leaves it out)."""
    healthy = _family_devices(snap, resource)
    if len(healthy) == len(_chips(snap, resource)):
        return None
    return [str(d.index) for d in healthy]


def _chips(snap: NodeSnapshot, resource: str) -> List[int]:
    """Every device of the family the host has, healthy or not (as Ray counts /dev/accel*),
    by index."""
    parents = {d.parent_id for d in snap.devices if d.parent_id}
    return [d.index for d in snap.devices if d.resource == resource and d.id not in parents]


def _owns_extras(snap: NodeSnapshot, resource: str) -> bool:
    """Whether the node's extra resources and labels (a TPU slice's, say) are this family's:
    they are when it is the node's only family. With several, Ray defines extras for TPU
    alone, so they go to the family named TPU."""
    families = [f for f in _families(snap) if _family_devices(snap, f)]
    return families == [resource] or (resource == "TPU" and "TPU" in families)


def accelerator_manager(resource: str, source=None) -> type:
    """An AcceleratorManager class for `resource` ("GPU", "TPU", "HPU", ...).

    source: where snapshots come from: None (this node, discovered by librayaccel on first
    use), a rayaccel.Registry, a rayaccel.AgentClient, or a callable returning a NodeSnapshot.
    """
    snapshot = _source_of(source)

    def plugin():
        snap = snapshot()
        owner = next((p for p in snap.plugins
                      if p.resource == resource and p.state in ("active", "degraded")
                      and p.device_count > 0), None)
        return snap, owner or next((p for p in snap.plugins if p.resource == resource), None)

    def variable() -> Tuple[str, rules.Family]:
        """The variable Ray's manager of this family would name now, and that manager."""
        _, p = plugin()
        var = p.visible_devices_env if p is not None and p.visible_devices_env else \
            rules.DEFAULT_VARIABLES.get(resource)
        family = rules.family_of(resource, var) if var else None
        if family is not None and family.manager == "AMDGPUAcceleratorManager":
            return rules.amd_variable(), family
        if family is not None and family.manager == "IntelGPUAcceleratorManager":
            return family.variable, family
        return var, family

    class Manager(_Base):
        """rayaccel's AcceleratorManager for one resource (see rayaccel.ray)."""

        _rayaccel = True  # not one of Ray's own

        @staticmethod
        def get_resource_name() -> str:
            return resource

        @staticmethod
        def get_visible_accelerator_ids_env_var() -> Optional[str]:
            return variable()[0]

        @staticmethod
        def get_current_node_num_accelerators() -> int:
            return int(snapshot().resources.get(resource, 0))

        @staticmethod
        def get_current_node_accelerator_type() -> Optional[str]:
            snap = snapshot()
            for d in _family_devices(snap, resource):
                if d.accelerator_type and \
                        snap.resources.get("accelerator_type:" + d.accelerator_type):
                    return d.accelerator_type
            return None

        @staticmethod
        def get_current_node_additional_resources() -> Optional[Dict[str, float]]:
            snap = snapshot()
            if not _owns_extras(snap, resource):
                return None
            counts = {p.resource for p in snap.plugins if p.resource}
            extras = {k: v for k, v in snap.resources.items()
                      if k not in counts and not k.startswith("accelerator_type:")}
            return extras or None

        @staticmethod
        def validate_resource_request_quantity(quantity: float) -> Tuple[bool, Optional[str]]:
            return _validate(snapshot, resource, quantity, source)

        @staticmethod
        def get_current_process_visible_accelerator_ids() -> Optional[List[str]]:
            var, family = variable()
            if family is not None and family.manager == "IntelGPUAcceleratorManager":
                return rules.intel_visible_ids()
            value = os.environ.get(var) if var else None
            if value is None:
                return _healthy_ids(snapshot(), resource)
            if value == "" or (value == "NoDevFiles" and family.no_dev_files_is_none):
                return []
            if family.manager == "TPUAcceleratorManager":
                return rules.tpu_visible_ids(value)
            return value.split(",")

        @staticmethod
        def set_current_process_visible_accelerator_ids(ids: List[str]) -> None:
            var, family = variable()
            ids = [str(i) for i in ids]
            if family is not None and family.manager == "IntelGPUAcceleratorManager":
                # Two variables, each with its own NOSET.
                os.environ.update(rules.intel_environment(
                    ids, _environment_for(snapshot, resource, var, ids, source, ",".join(ids))))
                return
            if var is None or family.noset(family.noset_variable):
                return
            if family.manager == "TPUAcceleratorManager":
                env, remove = rules.tpu_environment(ids, _chips(snapshot(), resource))
            else:
                env = _environment_for(snapshot, resource, var, ids, source, ",".join(ids))
                remove = []
            for name in remove:
                os.environ.pop(name, None)
            os.environ.update(env)

        # What EC2's catalogue says is Ray's knowledge: its own managers of this resource answer.
        @staticmethod
        def get_ec2_instance_num_accelerators(instance_type: str,
                                              instances: dict) -> Optional[int]:
            return _rays_ec2_answer(resource, variable, "get_ec2_instance_num_accelerators",
                                    instance_type, instances)

        @staticmethod
        def get_ec2_instance_accelerator_type(instance_type: str,
                                              instances: dict) -> Optional[str]:
            return _rays_ec2_answer(resource, variable, "get_ec2_instance_accelerator_type",
                                    instance_type, instances)

        @staticmethod
        def get_current_node_accelerator_labels() -> Optional[Dict[str, str]]:
            snap = snapshot()
            if not _owns_extras(snap, resource):
                return None
            # ray.io/accelerator-type Ray sets itself from get_current_node_accelerator_type().
            labels = {k: v for k, v in snap.labels.items() if k != "ray.io/accelerator-type"}
            return labels or None

    Manager.__name__ = Manager.__qualname__ = f"Rayaccel{resource}AcceleratorManager"
    return Manager


def _validate(snapshot: SnapshotSource, resource: str, quantity: float,
              source) -> Tuple[bool, Optional[str]]:
    """Ray's rule for the resource first (rayaccel._ray_rules.QUANTITY_RULES: TPU 1, 2, 4 or
    8; HPU and neuron_cores whole; GPU anything), then the plugin's validate_quantity for a
    whole count. A family Ray has no rule for takes a fraction when the plugin accepts every
    whole count up to its devices (it does not restrict shapes: Ray then shares a device), and
    refuses it when the plugin restricts them. A plugin that cannot be asked (not on this node,
    not answering) restricts nothing. 0 is what Ray's rule says of it (it asks for every
    explicit quantity, num_gpus=0 included)."""
    from .errors import InvalidArgumentError

    if isinstance(quantity, bool) or not isinstance(quantity, (int, float)) or \
            not math.isfinite(quantity) or quantity < 0:
        return (False, f"The quantity of resource {resource!r} must be a finite number, 0 or "
                       f"above, not {quantity!r}.")
    rule = rules.QUANTITY_RULES.get(resource)
    if rule is not None:
        answer = rule(resource, quantity)
        if not answer[0]:
            return answer
    whole = float(quantity).is_integer()
    if quantity == 0 or quantity > 2**32 - 1 or (not whole and rule is not None):
        return (True, None)  # no plugin counts that many, or Ray's rule decides fractions
    registry = source if hasattr(source, "validate_quantity") else _registry_for_validation()
    counts = [int(quantity)] if whole else \
        range(1, max(1, len(_family_devices(snapshot(), resource))) + 1)
    for n in counts:
        try:
            registry.validate_quantity(resource, n)
        except InvalidArgumentError as e:  # the plugin's refusal
            if whole:
                return (False, str(e))
            return (False, f"The number of requested {resource!r} was set to {quantity}; "
                           f"this family takes whole counts only, and not every one ({e}).")
        except Exception:  # cannot ask: no refusal
            return (True, None)
    return (True, None)


# Ray's own get_all_accelerator_managers and lookup table, kept when install() replaces them.
_rays_get_all_accelerator_managers = None
_rays_table: Dict[str, type] = {}


def _rays_managers(resource: str, first: Optional[str]) -> list:
    """Ray's own managers of `resource`, the one named `first` before the others."""
    try:
        import ray._private.accelerators as accelerators
    except ImportError:
        return []
    everything = (_rays_get_all_accelerator_managers or
                  accelerators.get_all_accelerator_managers)()
    theirs = [m for m in everything
              if not getattr(m, "_rayaccel", False) and m.get_resource_name() == resource]
    return sorted(theirs, key=lambda m: (m.__name__ != first, m.__name__))


def _rays_ec2_answer(resource: str, current_variable, method: str, instance_type: str,
                     instances: dict):
    """The first answer of Ray's own managers of the family (None without Ray), the manager
    this node's plugin stands in for asked first."""
    family = rules.FAMILIES.get((resource, rules.DEFAULT_VARIABLES.get(resource, "")))
    try:
        family = current_variable()[1] or family
    except Exception:  # the node's variables say nothing about EC2's catalogue
        pass
    for manager in _rays_managers(resource, family.manager if family else None):
        answer = getattr(manager, method)(instance_type, instances)
        if answer is not None:
            return answer
    return None


def _registry_for_validation():
    """Questions for the plugins themselves go to the local registry (created on first use)
    when the source cannot answer them."""
    _local_snapshot()
    return _local_registry


def _environment_for(snapshot: SnapshotSource, resource: str, var: str, ids: List[str],
                     source, value: str) -> Dict[str, str]:
    """What a worker given `ids` (values of the visible-devices variable, as Ray holds them)
    needs: the plugin's own answer (prepare_allocation: MIG names instances) when each id is
    one of the family's devices and the plugin sets `var`, else `value`, what Ray's manager
    writes (its plain join, "" for no ids: the worker sees no device)."""
    plain = {var: value}
    if not ids:
        return plain
    snap = snapshot()
    family = [d for d in snap.devices if d.resource == resource]
    chosen = []
    for i in ids:
        match = next((d for d in family if str(d.index) == i or d.id == i), None)
        if match is None:
            return plain
        chosen.append(match.id)
    registry = source if hasattr(source, "prepare_allocation") else _registry_for_validation()
    try:
        env = registry.prepare_allocation(chosen, snap.generation)
    except Exception:  # a plugin that cannot say: Ray's own behaviour
        return plain
    return env if var in env else plain


def _count_by_device(resources: List[str]) -> Optional[str]:
    """Makes the Ray this process starts count each of `resources` by device: Ray's raylet
    gives a task instance ids (device 1, device 2, ...) only for GPU and the resources its
    RAY_custom_unit_instance_resources lists; any other is one pool whose every task is told
    device 0. Sets the variable, Ray's own list with the missing resources appended, for the
    processes started after this one (a raylet that ray.init(), `ray start` or
    Cluster.add_node starts). In a process a raylet started (a worker), the raylet already runs
    with what it had: a warning naming the variable, once. Returns the value set, if any."""
    if rules.UNIT_INSTANCE_VARIABLE not in os.environ and \
            rules.unit_instance_setting(resources, rules.TESTED_CUSTOM_UNIT_INSTANCES) is None:
        return None  # families every Ray since 2.7 counts by device: no need to read Ray's list
    rays_list, where = rules.rays_unit_instances()
    setting = rules.unit_instance_setting(resources, rays_list)
    if setting is None:
        return None
    missing = [r for r in resources if rules.unit_instance_setting([r], rays_list)]
    if os.environ.get("RAY_RAYLET_PID"):
        import logging
        logging.getLogger("rayaccel").warning(
            "Ray counts %s as one pool, not by device: every task of it is told device 0. "
            "Start Ray with %s=%s (what `rayaccel ray-start-args --env` prints; Ray's list "
            "from %s)", ", ".join(missing), rules.UNIT_INSTANCE_VARIABLE, setting, where)
        return None
    os.environ[rules.UNIT_INSTANCE_VARIABLE] = setting
    return setting


def install(source=None) -> List[type]:
    """Puts rayaccel's managers in Ray's place, in this process, for each family a loaded
    plugin of this node serves (it runs and found devices): Ray's
    get_all_accelerator_managers() and get_accelerator_manager_for_resource() then answer with
    them. Every other family (Neuron, NPU, Intel GPU, RBLN, ...) stays with Ray's own manager,
    untouched. Returns the managers.

    Ray asks managers in processes of its own too (a node's raylet starts workers that read
    and set their visible devices before any user code runs, so a worker_process_setup_hook
    comes too late): install() sets RAYACCEL_RAY_MANAGERS for the processes started after it,
    and rayaccel.pth installs in each of them as soon as Ray's accelerator package is imported
    (_rayaccel_hook, docs/ray-integration.md). Call it before ray.init() or Cluster()."""
    global _rays_get_all_accelerator_managers, _rays_table
    import ray._private.accelerators as accelerators

    if not os.environ.get(MANAGERS_VARIABLE):
        # The processes this one starts (a node's raylet, and the workers it starts) install
        # too, through _rayaccel_hook; they ask the same agent, or discover as this one does.
        os.environ[MANAGERS_VARIABLE] = getattr(source, "address", None) or "1"
    snap = _source_of(source)()
    _count_by_device(_families(snap))
    managers = [accelerator_manager(r, source) for r in _families(snap)]
    ours = {m.get_resource_name(): m for m in managers}
    lookup = accelerators.get_accelerator_manager_for_resource
    if _rays_get_all_accelerator_managers is None:  # the first install: Ray's, as Ray made them
        _rays_get_all_accelerator_managers = accelerators.get_all_accelerator_managers
        lookup("GPU")  # Ray's table, with its choice among the GPU vendors on this node
        _rays_table = dict(getattr(lookup, "_resource_name_to_accelerator_manager", {}))
    theirs = _rays_get_all_accelerator_managers
    table = dict(_rays_table)
    table.update(ours)

    def get_all_accelerator_managers():
        kept = {m for m in theirs() if m.get_resource_name() not in ours}
        return kept | set(managers)

    accelerators.get_all_accelerator_managers = get_all_accelerator_managers
    lookup._resource_name_to_accelerator_manager = table
    return managers
