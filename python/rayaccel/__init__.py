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
                     UnavailableError)
from .registry import Registry
from .types import Allocation, Device, Domain, Link, NodeSnapshot, PluginStatus

__all__ = [
    "Allocation", "Device", "Domain", "Error", "FailedPreconditionError",
    "InvalidArgumentError", "Link", "NodeSnapshot", "NotFoundError", "PluginStatus", "Registry",
    "UnavailableError",
]
