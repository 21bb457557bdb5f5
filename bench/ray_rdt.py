"""CPU tensors between two actors on two raylets of one Ray cluster on this host: Ray Direct
Transport over rayaccel (tensor_transport="RAYACCEL") against Ray's object store (a plain
actor method), Ray's built-in GLOO transport and, where the `nixl` package is installed,
Ray's NIXL transport (its UCX backend), as ratios in one run.

    build/venv/bin/python bench/ray_rdt.py [--sizes 1MiB,64MiB,256MiB] [--iters 5]

Ray's NIXL transport needs torch 2 and the `nixl` package, which the build's environment lacks:
docs/performance.md ("Ray Direct Transport in Ray") has the environment that runs its column.

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

    @ray.method(tensor_transport="NIXL")
    def nixl(self):
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
    try:
        import nixl  # noqa: F401 - Ray's NIXL transport imports it in the actors
        has_nixl = True
    except ImportError:
        has_nixl = False
        print("  NIXL not installed: its column is n/a", file=sys.stderr)
    print(f"{'size':>8} {'object store':>14} {'RAYACCEL':>14} {'GLOO':>14} {'NIXL':>14} "
          f"{'RAYACCEL/store':>15} {'RAYACCEL/GLOO':>14} {'RAYACCEL/NIXL':>14}")
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
        for name in ("plain", "rayaccel") + (("gloo",) if gloo_ok else ()) + \
                (("nixl",) if has_nixl else ()):
            method = getattr(source, name)
            times = []
            try:
                for i in range(args.iters + 1):
                    start = time.perf_counter()
                    assert ray.get(sink.consume.remote(method.remote())) == 1
                    if i:
                        times.append(time.perf_counter() - start)
            except Exception as e:  # noqa: BLE001 - a column that cannot run says why
                last = str(e).strip().splitlines()[-1][:300]
                print(f"  {name} failed, its column is n/a: {last}", file=sys.stderr)
                continue
            figures[name] = statistics.median(times)
        row = [f"{nbytes / (1 << 20):>5g}MiB"]
        for name in ("plain", "rayaccel", "gloo", "nixl"):
            t = figures.get(name)
            row.append(f"{t:7.4f} {nbytes / t / 1e9:5.2f}" if t else f"{'n/a':>14}")
        row.append(f"{figures['plain'] / figures['rayaccel']:14.2f}x")
        for other in ("gloo", "nixl"):
            row.append(f"{figures[other] / figures['rayaccel']:13.2f}x" if other in figures
                       else f"{'n/a':>14}")
        print(" ".join(row), flush=True)
        if group is not None:
            from ray.experimental.collective import destroy_collective_group
            destroy_collective_group(group)
        ray.kill(source), ray.kill(sink)
    ray.shutdown()
    c.shutdown()


if __name__ == "__main__":
    main()
