"""A two-node Ray cluster started from `rayaccel ray-start-args` (docs/ray-integration.md):
schedule by the labels rayaccel found, then move a tensor between the two nodes over
rayaccel's transport with tensor_transport="RAYACCEL".

    python label_and_move.py      # with a cluster running (ray start), in its environment
"""

import sys

import ray
import torch

from rayaccel.transport import TensorTransport

# Before any actor class names the transport; Ray ships the class to each actor.
ray.experimental.register_tensor_transport("RAYACCEL", ["cpu", "cuda"], TensorTransport,
                                           torch.Tensor)


@ray.remote(num_cpus=0, enable_tensor_transport=True)
class Trainer:
    def node(self):
        me = ray.get_runtime_context().get_node_id()  # the labels of this actor's node
        return next(n["Labels"] for n in ray.nodes() if n["NodeID"] == me)

    @ray.method(tensor_transport="RAYACCEL")
    def weights(self):
        return torch.arange(1 << 20, dtype=torch.float32)

    def receive(self, weights):
        stats = ray.experimental.rdt.util.get_tensor_transport_manager("RAYACCEL").stats()
        moved = sum(p["bytes"] for p in stats["transfers"]["read"].values())
        return float(weights.sum()), moved


ray.init(address="auto", logging_level="ERROR")
# Both nodes must be there: a missing one is said at once, not waited for.
types = {n["Labels"].get("ray.io/accelerator-type") for n in ray.nodes() if n["Alive"]}
for wanted in ("H100", "GB200"):
    if wanted not in types:
        sys.exit(f"no node with ray.io/accelerator-type={wanted} in the cluster (it has "
                 f"{sorted(t for t in types if t)}): did its `ray start` fail?")
# One actor on the DGX H100, one on a GB200 tray, chosen by the labels rayaccel printed.
h100 = Trainer.options(label_selector={"ray.io/accelerator-type": "H100"}).remote()
gb200 = Trainer.options(label_selector={"ray.io/accelerator-type": "GB200"}).remote()
for name, actor in (("h100", h100), ("gb200", gb200)):
    try:
        labels = ray.get(actor.node.remote(), timeout=60)
    except ray.exceptions.GetTimeoutError:
        sys.exit(f"Ray could not place the {name} actor within 60 s (no free CPU or no node "
                 "with its label?): see `ray status`")
    print(name, "on a node with", labels["rayaccel.io/gpu-count"], "x",
          labels["ray.io/accelerator-type"], "domain", labels.get("ray.io/gpu-domain", "-"))
total, moved = ray.get(gb200.receive.remote(h100.weights.remote()))
print(f"sum {total:.0f}, {moved} bytes over rayaccel's transport")
