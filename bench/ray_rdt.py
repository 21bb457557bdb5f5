"""CPU tensors between two actors on two raylets of one Ray cluster on this host: Ray Direct
Transport over rayaccel (tensor_transport="RAYACCEL") against Ray's object store (a plain
actor method) and Ray's built-in GLOO transport, as ratios in one run.

    build/venv/bin/python bench/ray_rdt.py [--sizes 1MiB,64MiB,256MiB] [--iters 5]

Each figure is the median wall time of `ray.get(sink.consume.remote(source.make.remote()))`
after one warm-up: the producer's method, the move, and a consumer that touches one byte.
The tensor is made once per actor and returned again (no allocation in the loop)."""

import argparse
import os
import statistics
import sys
import time

import ray
import torch
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rayaccel.transport import TensorTransport

ray.experimental.register_tensor_transport("RAYACCEL", ["cpu", "cuda"], TensorTransport,
                                           torch.Tensor)


def size(text):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(text[:-len(unit)]) * factor
    return int(text)


@ray.remote(num_cpus=0, enable_tensor_transport=True)
class Source:
    def __init__(self, nbytes):
        self.t = torch.ones(nbytes, dtype=torch.uint8)

    def plain(self):
        return self.t

    @ray.method(tensor_transport="RAYACCEL")
    def rayaccel(self):
        return self.t

    @ray.method(tensor_transport="GLOO")
    def gloo(self):
        return self.t


@ray.remote(num_cpus=0, enable_tensor_transport=True)
class Sink:
    def consume(self, t):
        return int(t[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1MiB,64MiB,256MiB")
    parser.add_argument("--iters", type=int, default=5)
    args = parser.parse_args()
    sizes = [size(s) for s in args.sizes.split(",")]

    from ray.cluster_utils import Cluster
    store = 2 * max(sizes) + (256 << 20)
    c = Cluster(initialize_head=True, head_node_args=dict(num_cpus=1, include_dashboard=False))
    a = c.add_node(num_cpus=1, object_store_memory=store).node_id
    b = c.add_node(num_cpus=1, object_store_memory=store).node_id
    ray.init(address=c.address, logging_level="ERROR")
    on = lambda node: NodeAffinitySchedulingStrategy(node, False)  # noqa: E731
    print(f"Ray {ray.__version__}, torch {torch.__version__}, {os.cpu_count()} CPUs; "
          f"median of {args.iters} after a warm-up, seconds and GB/s")
    print(f"{'size':>8} {'object store':>14} {'RAYACCEL':>14} {'GLOO':>14} "
          f"{'RAYACCEL/store':>15} {'RAYACCEL/GLOO':>14}")
    for nbytes in sizes:
        source = Source.options(scheduling_strategy=on(a)).remote(nbytes)
        sink = Sink.options(scheduling_strategy=on(b)).remote()
        gloo_ok = True
        try:
            from ray.experimental.collective import create_collective_group
            group = create_collective_group([source, sink], backend="torch_gloo")
        except Exception as e:  # noqa: BLE001 - reported, not fatal
            gloo_ok, group = False, None
            print(f"  GLOO not available: {type(e).__name__}: {e}", file=sys.stderr)
        figures = {}
        for name in ("plain", "rayaccel") + (("gloo",) if gloo_ok else ()):
            method = getattr(source, name)
            times = []
            for i in range(args.iters + 1):
                start = time.perf_counter()
                assert ray.get(sink.consume.remote(method.remote())) == 1
                if i:
                    times.append(time.perf_counter() - start)
            figures[name] = statistics.median(times)
        row = [f"{nbytes / (1 << 20):>5g}MiB"]
        for name in ("plain", "rayaccel", "gloo"):
            t = figures.get(name)
            row.append(f"{t:7.4f} {nbytes / t / 1e9:5.2f}" if t else f"{'n/a':>13}")
        row.append(f"{figures['plain'] / figures['rayaccel']:14.2f}x")
        row.append(f"{figures['gloo'] / figures['rayaccel']:13.2f}x" if gloo_ok else
                   f"{'n/a':>14}")
        print(" ".join(row), flush=True)
        if group is not None:
            from ray.experimental.collective import destroy_collective_group
            destroy_collective_group(group)
        ray.kill(source), ray.kill(sink)
    ray.shutdown()
    c.shutdown()


if __name__ == "__main__":
    main()
