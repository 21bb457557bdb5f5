"""Ray Direct Transport over rayaccel, whole: a local Ray of its own (ray.init() starts one; no
cluster needs to run), a producer and a consumer actor, a tensor read by the consumer from the
producer's memory, and the transport's own count of the bytes it moved (docs/python.md).

    python3 rdt_stats.py
"""

import ray
import torch

from rayaccel.transport import TensorTransport

# In the driver, before any actor class names it; Ray ships the class to each actor.
ray.experimental.register_tensor_transport("RAYACCEL", ["cpu", "cuda"], TensorTransport,
                                           torch.Tensor)


@ray.remote(num_cpus=0, enable_tensor_transport=True)
class Producer:
    @ray.method(tensor_transport="RAYACCEL")
    def weights(self):
        return torch.arange(1 << 20, dtype=torch.float32)


@ray.remote(num_cpus=0, enable_tensor_transport=True)  # the consumer needs it too
class Consumer:
    def receive(self, weights):
        # This process's transport: what it read, by path (docs/python.md, stats()).
        stats = ray.experimental.rdt.util.get_tensor_transport_manager("RAYACCEL").stats()
        read = sum(p["bytes"] for p in stats["transfers"]["read"].values())
        return weights.numel(), float(weights[-1]), read


ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR")
producer, consumer = Producer.remote(), Consumer.remote()
count, last, read = ray.get(consumer.receive.remote(producer.weights.remote()), timeout=120)
print(f"received {count} float32 values (the last {last:.0f}); "
      f"{read} bytes read over rayaccel's transport")
ray.shutdown()
