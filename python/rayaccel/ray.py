"""rayaccel for Ray's accelerator extension point: one AcceleratorManager for any family.

Ray knows each accelerator family through a class under `ray._private.accelerators` (the
interface is `AcceleratorManager` in `accelerator.py`: static methods only). This module makes
such a class for any resource a rayaccel plugin provides, answered from a rayaccel snapshot
(local discovery, or a registry or agent client you pass), with Ray's own semantics where Ray
defines them: the visible-devices variable read as Ray reads it (unset: None; "" and
"NoDevFiles": no device), `RAY_EXPERIMENTAL_NOSET_<VAR>` respected when setting it, node
totals and the accelerator type as Ray would report them on the same devices.

    import rayaccel.ray
    rayaccel.ray.install()   # before ray.init() / ray start, in the process that starts Ray

Ray itself is not a dependency: the classes subclass Ray's AcceleratorManager when Ray is
importable, and are plain classes with the same static methods otherwise.
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Dict, List, Optional, Tuple

from .types import NodeSnapshot

try:  # Ray's interface, when Ray is installed
    from ray._private.accelerators.accelerator import AcceleratorManager as _Base
except ImportError:  # pragma: no cover - Ray is optional
    _Base = object

# A source of snapshots: a callable returning the node's current NodeSnapshot.
SnapshotSource = Callable[[], NodeSnapshot]

_local_lock = threading.Lock()
_local_registry = None


def _local_snapshot() -> NodeSnapshot:
    """This node, discovered once per process with every plugin found, each isolated."""
    global _local_registry
    with _local_lock:
        if _local_registry is None:
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
    return sorted({p.resource for p in snap.plugins if p.resource and p.device_count > 0})


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

    def env_var() -> Optional[str]:
        _, p = plugin()
        return p.visible_devices_env if p is not None and p.visible_devices_env else None

    class Manager(_Base):
        """rayaccel's AcceleratorManager for one resource (see rayaccel.ray)."""

        @staticmethod
        def get_resource_name() -> str:
            return resource

        @staticmethod
        def get_visible_accelerator_ids_env_var() -> Optional[str]:
            return env_var()

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
            var = env_var()
            if var is None:
                return None
            value = os.environ.get(var)
            if value is None:
                return None
            if value == "" or value == "NoDevFiles":
                return []
            return value.split(",")

        @staticmethod
        def set_current_process_visible_accelerator_ids(ids: List[str]) -> None:
            var = env_var()
            if var is None or os.environ.get("RAY_EXPERIMENTAL_NOSET_" + var):
                return
            os.environ.update(_environment_for(snapshot, resource, var, [str(i) for i in ids],
                                               source))

        # rayaccel knows the node it runs on, not EC2's catalogue: Ray's defaults.
        @staticmethod
        def get_ec2_instance_num_accelerators(instance_type: str,
                                              instances: dict) -> Optional[int]:
            return None

        @staticmethod
        def get_ec2_instance_accelerator_type(instance_type: str,
                                              instances: dict) -> Optional[str]:
            return None

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
    """Whole quantities go to the plugin's validate_quantity (TPU: 1, 2, 4, 8). A fraction is
    valid when the family accepts every whole count up to its devices (it does not restrict
    shapes: Ray then shares a device), and refused when it restricts them, as Ray's TPU
    manager refuses 0.5. A plugin that cannot be asked (not on this node, not answering)
    restricts nothing: Ray's default, (True, None)."""
    from .errors import InvalidArgumentError

    if not isinstance(quantity, (int, float)) or quantity != quantity or quantity <= 0 \
            or quantity > 2**32 - 1:
        return (False, f"The number of requested {resource!r} must be a number above 0 and "
                       f"below 2**32, not {quantity!r}.")
    registry = source if hasattr(source, "validate_quantity") else _registry_for_validation()
    whole = float(quantity).is_integer()
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


def _registry_for_validation():
    """Questions for the plugins themselves go to the local registry (created on first use)
    when the source cannot answer them."""
    _local_snapshot()
    return _local_registry


def _environment_for(snapshot: SnapshotSource, resource: str, var: str, ids: List[str],
                     source) -> Dict[str, str]:
    """What a worker given `ids` (values of the visible-devices variable, as Ray holds them)
    needs: the plugin's own answer (prepare_allocation: TPU adds its chip bounds, MIG names
    instances) when each id is one of the family's devices, else Ray's plain join."""
    plain = {var: ",".join(ids)}
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


def install(source=None) -> List[type]:
    """Puts rayaccel's managers in Ray's place, in this process, for every family on this
    node: Ray's get_all_accelerator_managers() and get_accelerator_manager_for_resource() then
    answer with them (Ray's own stay for families rayaccel does not find). Returns the
    managers. Ray's workers are processes of their own: install there too, with
    ray.init(runtime_env={"worker_process_setup_hook": "rayaccel.ray.install"}), so that a
    worker's visible devices are set the plugin's way."""
    import ray._private.accelerators as accelerators

    snap = _source_of(source)()
    managers = [accelerator_manager(r, source) for r in _families(snap)]
    ours = {m.get_resource_name(): m for m in managers}
    theirs = accelerators.get_all_accelerator_managers
    lookup = accelerators.get_accelerator_manager_for_resource
    # Ray's own table first (its choice among the GPU vendors on this node), then ours over it.
    lookup("GPU")
    table = dict(getattr(lookup, "_resource_name_to_accelerator_manager", {}))
    table.update(ours)

    def get_all_accelerator_managers():
        kept = {m for m in theirs() if m.get_resource_name() not in ours}
        return kept | set(managers)

    accelerators.get_all_accelerator_managers = get_all_accelerator_managers
    lookup._resource_name_to_accelerator_manager = table
    return managers
