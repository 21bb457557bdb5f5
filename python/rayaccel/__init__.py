"""rayaccel from Python: the node's accelerators through rayaccel's plugins.

    import rayaccel
    with rayaccel.Registry(config={"sim.spec": "examples/dgx-h100.json"}) as r:
        snap = r.snapshot()
        print(snap.resources)              # {'GPU': 8.0, 'accelerator_type:H100': 1.0}
        best = r.preferred_allocation(2, resource="GPU")
        print(r.prepare_allocation(best.device_ids))

rayaccel.ray has Ray's AcceleratorManager for any family (docs/python.md).
"""

from .errors import (Error, FailedPreconditionError, InvalidArgumentError, NotFoundError,
                     UnauthenticatedError, UnavailableError)
from .registry import Registry
from .types import (Allocation, Device, DeviceSample, Domain, Link, NodeSnapshot, PluginStatus,
                    PluginTelemetry, Telemetry)


def __getattr__(name):
    # AgentClient needs grpcio: imported when first asked for, so that the local Registry
    # works without it.
    if name == "AgentClient":
        from .agent import AgentClient
        return AgentClient
    raise AttributeError(f"module 'rayaccel' has no attribute {name!r}")

__all__ = [
    "AgentClient", "Allocation", "Device", "DeviceSample", "Domain", "Error",
    "FailedPreconditionError", "InvalidArgumentError", "Link", "NodeSnapshot", "NotFoundError",
    "PluginStatus", "PluginTelemetry", "Registry", "Telemetry", "UnauthenticatedError",
    "UnavailableError",
]
