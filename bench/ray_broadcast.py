"""One trainer's weights to N inference actors after every step, as reinforcement learning moves
them (vLLM, veRL, SkyRL, Ray's weight_sync examples): a dict of 64 tensors of mixed shapes and
dtypes, made anew each step, read by every reader. Ray Direct Transport over rayaccel
(tensor_transport="RAYACCEL", each reader reading from the trainer's memory) against Ray's
object store (the dict returned plainly; each reader's ray.get) and Ray's GLOO transport (a
collective group of the trainer and the readers), as ratios in one run.

    build/venv/bin/python bench/ray_broadcast.py [--readers 2,4,8] [--sizes 16MiB,256MiB]
                                                 [--steps 3]

The readers alternate between two raylets of one Ray cluster on this host (the trainer on the
first). Each figure is the median over steps (after a warm-up step) of the wall time from the
trainer's method call until every reader has step k's weights: `ray.get([r.take.remote(ref)
for r in readers])`, where take touches one byte of every tensor."""

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

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.uint8, torch.int32]


def size(text):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(text[:-len(unit)]) * factor
    return int(text)


def shapes(total):
    """64 (shape, dtype) of mixed sizes adding up to about `total` bytes: a model's layers."""
    weights = [1 + (i % 7) * 3 for i in range(64)]  # relative sizes
    out = []
    for i, w in enumerate(weights):
        dtype = DTYPES[i % len(DTYPES)]
        itemsize = torch.empty(0, dtype=dtype).element_size()
        elements = max(1, total * w // sum(weights) // itemsize)
        rows = 1 + (i % 5)
        out.append(((rows, max(1, elements // rows)), dtype))
    return out


def make(layout, step):
    return {f"layer{i}.w": torch.full(shape, step % 100, dtype=dtype)
            for i, (shape, dtype) in enumerate(layout)}


@ray.remote(num_cpus=0, enable_tensor_transport=True)
class Trainer:
    def __init__(self, layout):
        self.layout = layout

    def plain(self, step):
        return make(self.layout, step)

    @ray.method(tensor_transport="RAYACCEL")
    def rayaccel(self, step):
        return make(self.layout, step)

    @ray.method(tensor_transport="GLOO")
    def gloo(self, step):
        return make(self.layout, step)


@ray.remote(num_cpus=0, enable_tensor_transport=True)
class Reader:
    def take(self, weights):
        return sum(int(t.reshape(-1)[-1]) for t in weights.values())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--readers", default="2,4,8")
    parser.add_argument("--sizes", default="16MiB,256MiB")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    counts = [int(n) for n in args.readers.split(",")]
    sizes = [size(s) for s in args.sizes.split(",")]

    from ray.cluster_utils import Cluster
    store = 3 * max(sizes) + (256 << 20)
    c = Cluster(initialize_head=True, head_node_args=dict(num_cpus=1, include_dashboard=False))
    nodes = [c.add_node(num_cpus=1, object_store_memory=store).node_id for _ in range(2)]
    ray.init(address=c.address, logging_level="ERROR")
    on = lambda node: NodeAffinitySchedulingStrategy(node, False)  # noqa: E731
    print(f"Ray {ray.__version__}, torch {torch.__version__}, {os.cpu_count()} CPUs; "
          f"64 tensors, median of {args.steps} steps after a warm-up, seconds until every "
          "reader has the step")
    print(f"{'readers':>7} {'size':>8} {'object store':>13} {'RAYACCEL':>10} {'GLOO':>10} "
          f"{'RAYACCEL/store':>15} {'RAYACCEL/GLOO':>14}")
    for nbytes in sizes:
        layout = shapes(nbytes)
        for n in counts:
            trainer = Trainer.options(scheduling_strategy=on(nodes[0])).remote(layout)
            readers = [Reader.options(scheduling_strategy=on(nodes[i % 2])).remote()
                       for i in range(n)]
            group = None
            try:
                from ray.experimental.collective import create_collective_group
                group = create_collective_group([trainer, *readers], backend="torch_gloo")
            except Exception as e:  # noqa: BLE001 - reported, not fatal
                print(f"  GLOO not available: {type(e).__name__}: {e}", file=sys.stderr)
            figures = {}
            for name in ("plain", "rayaccel") + (("gloo",) if group is not None else ()):
                method = getattr(trainer, name)
                times = []
                try:
                    for step in range(args.steps + 1):
                        start = time.perf_counter()
                        ref = method.remote(step)
                        got = ray.get([r.take.remote(ref) for r in readers], timeout=600)
                        if step:
                            times.append(time.perf_counter() - start)
                        assert got == [64 * (step % 100)] * n, got
                        del ref
                except Exception as e:  # noqa: BLE001 - a column that cannot run says why
                    last = str(e).strip().splitlines()[-1][:300]
                    print(f"  {name} failed, its column is n/a: {last}", file=sys.stderr)
                    continue
                figures[name] = statistics.median(times)
            row = [f"{n:>7}", f"{nbytes / (1 << 20):>5g}MiB"]
            for name, width in (("plain", 13), ("rayaccel", 10), ("gloo", 10)):
                t = figures.get(name)
                row.append(f"{t:{width}.3f}" if t else f"{'n/a':>{width}}")
            ours = figures.get("rayaccel")
            for other, width in (("plain", 14), ("gloo", 13)):
                row.append(f"{figures[other] / ours:{width}.2f}x" if ours and other in figures
                           else f"{'n/a':>{width + 1}}")
            print(" ".join(row), flush=True)
            if group is not None:
                from ray.experimental.collective import destroy_collective_group
                destroy_collective_group(group)
            for actor in (trainer, *readers):
                ray.kill(actor)
    ray.shutdown()
    c.shutdown()


if __name__ == "__main__":
    main()
