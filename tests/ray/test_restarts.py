"""Actors Ray restarts keep using RDT through rayaccel. Ray 2.60 registers a custom tensor
transport on an actor only when the actor is created: a restarted one raised "Unsupported
tensor transport protocol: RAYACCEL" on its first RAYACCEL method. rayaccel's hook registers
its names (RAYACCEL, RAYACCEL_NUMPY) in every process of the environment, as Ray registers its
own; the driver below registers RAYACCEL itself too, as the docs show, which stays no error.

Each restart is a real crash: the actor's process ends with os._exit(1) in a method, and Ray
(max_restarts) starts a new process for it. Timings are printed for the record."""

import os
import time

import pytest
import ray
import torch
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rayaccel.transport import TensorTransport
from conftest import cluster

ray.experimental.register_tensor_transport("RAYACCEL", ["cpu", "cuda"], TensorTransport,
                                           torch.Tensor)


@pytest.fixture(scope="module")
def nodes():
    with cluster([("a", {}), ("b", {})]) as (_, ids):
        yield ids


def on(node_id, **options):
    return dict(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, False),
                **options)


@ray.remote(max_restarts=2, max_task_retries=0)
class Source:
    def pid(self):
        return os.getpid()

    @ray.method(tensor_transport="RAYACCEL")
    def weights(self, step):
        return torch.full((1 << 18,), float(step))  # 1 MiB

    def crash(self):
        os._exit(1)

    def registered(self):
        from ray.experimental.rdt.util import get_tensor_transport_manager
        return get_tensor_transport_manager("RAYACCEL").stats()["registered_bytes"]


# A consumer needs enable_tensor_transport=True (Ray reads on its "_ray_system" group).
@ray.remote(max_restarts=1, max_task_retries=0, enable_tensor_transport=True)
class Reader:
    def pid(self):
        return os.getpid()

    def take(self, weights):
        return float(weights[0]), int(weights.numel())

    def crash(self):
        os._exit(1)


def restart(actor, pid, deadline_s=60):
    """Crashes `actor` (process `pid`) and waits until Ray answers from a new process."""
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.crash.remote())
    deadline = time.time() + deadline_s
    while True:
        try:
            new = ray.get(actor.pid.remote(), timeout=10)
            if new != pid:
                return new
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            pass
        assert time.time() < deadline, "Ray did not restart the actor"
        time.sleep(0.2)


def test_a_source_restarted_twice_serves_again_and_its_dead_objects_fail_fast(nodes):
    source = Source.options(**on(nodes["a"])).remote()
    reader = Reader.options(**on(nodes["b"])).remote()
    assert ray.get(reader.take.remote(source.weights.remote(0))) == (0.0, 1 << 18)
    pid = ray.get(source.pid.remote())
    for step in (1, 2):
        held = source.weights.remote(100 + step)  # an object of the incarnation about to die
        ray.wait([held], fetch_local=False)
        pid_before = pid
        pid = restart(source, pid)
        start = time.time()
        with pytest.raises(Exception) as dead:
            ray.get(reader.take.remote(held), timeout=60)
        failed_after = time.time() - start
        # The error names the dead incarnation's process.
        assert f"pid {pid_before}," in str(dead.value) or str(pid_before) in str(dead.value), \
            dead.value
        start = time.time()
        assert ray.get(reader.take.remote(source.weights.remote(step)), timeout=60) == \
            (float(step), 1 << 18)
        first = time.time() - start
        print(f"restart {step}: the dead incarnation's object failed in {failed_after:.2f} s, "
              f"the new one's first object arrived in {first:.2f} s")
    # What the restarted source registered is let go when Ray collects it.
    deadline = time.time() + 20
    while ray.get(source.registered.remote()) != 0:
        assert time.time() < deadline, "the restarted source's memory is still registered"
        time.sleep(0.2)
    ray.kill(source), ray.kill(reader)


def test_a_reader_restarted_mid_stream_reads_on(nodes):
    source = Source.options(**on(nodes["a"])).remote()
    reader = Reader.options(**on(nodes["b"])).remote()
    other = Reader.options(**on(nodes["b"])).remote()
    for step in range(3):
        assert ray.get(reader.take.remote(source.weights.remote(step)))[0] == step
    # The reader dies while another reader keeps reading the same source.
    pending = [other.take.remote(source.weights.remote(10 + i)) for i in range(5)]
    restart(reader, ray.get(reader.pid.remote()))
    assert [v for v, _ in ray.get(pending)] == [10.0 + i for i in range(5)]
    for step in range(3, 6):
        assert ray.get(reader.take.remote(source.weights.remote(step)))[0] == step
    ray.kill(source), ray.kill(reader), ray.kill(other)
