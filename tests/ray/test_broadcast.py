"""One trainer's weights to many readers over rayaccel (bench/ray_broadcast.py measures it):
every reader sees exactly step k's bytes, in every one of 64 tensors of mixed shapes and dtypes,
never a mix of two steps, while the trainer has already made step k+1 in new tensors."""

import pytest
import ray
import torch
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rayaccel.transport import TensorTransport
from conftest import cluster

ray.experimental.register_tensor_transport("RAYACCEL", ["cpu", "cuda"], TensorTransport,
                                           torch.Tensor)

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.uint8, torch.int32,
          torch.bool]


def layout():
    """64 tensors, about 16 MiB in all, of every shape from a scalar up."""
    out = []
    for i in range(64):
        rows = 1 + i % 5
        cols = 1 + (i * 7919) % 20000
        out.append(((rows, cols) if i % 9 else (), DTYPES[i % len(DTYPES)]))
    return out


def fill(step, i, shape, dtype):
    value = (step * 64 + i) % 127  # differs between steps and between tensors
    return torch.full(shape, bool(value % 2) if dtype == torch.bool else value, dtype=dtype)


@ray.remote(num_cpus=0, enable_tensor_transport=True)
class Trainer:
    @ray.method(tensor_transport="RAYACCEL")
    def weights(self, step):
        return {f"layer{i}": fill(step, i, s, d) for i, (s, d) in enumerate(layout())}


@ray.remote(num_cpus=0, enable_tensor_transport=True)
class Reader:
    def check(self, weights, step):
        """The tensors that are not wholly step `step`'s, by name."""
        wrong = []
        for i, (shape, dtype) in enumerate(layout()):
            got = weights[f"layer{i}"]
            if got.dtype != dtype or tuple(got.shape) != tuple(shape) or \
                    not torch.equal(got, fill(step, i, shape, dtype)):
                wrong.append(f"layer{i}")
        return wrong


@pytest.fixture(scope="module")
def nodes():
    with cluster([("a", {}), ("b", {})]) as (_, ids):
        yield ids


def test_every_reader_sees_exactly_its_step(nodes):
    on = lambda node: NodeAffinitySchedulingStrategy(node, False)  # noqa: E731
    trainer = Trainer.options(scheduling_strategy=on(nodes["a"])).remote()
    readers = [Reader.options(scheduling_strategy=on(nodes["ab"[i % 2]])).remote()
               for i in range(4)]
    current = trainer.weights.remote(0)
    for step in range(4):
        following = trainer.weights.remote(step + 1)  # made while the readers read this step
        assert ray.get([r.check.remote(current, step) for r in readers]) == [[]] * 4
        current = following
    for actor in (trainer, *readers):
        ray.kill(actor)
