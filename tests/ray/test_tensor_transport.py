"""Ray Direct Transport through rayaccel: tensor_transport="RAYACCEL" between actors on two
raylets of a real Ray. The bytes travel over rayaccel's transport (its stats count them), the
source's memory is deregistered when Ray collects the object, a stopped or killed source fails
the consumer within the peer timeout, and the transport key comes from the cluster."""

import os
import signal
import time

import numpy as np
import pytest
import ray
import torch
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rayaccel.transport import TensorTransport
from conftest import cluster

PEER_TIMEOUT = 10.0  # TensorTransport's default


# Registered in the driver before any actor class names them; Ray ships the class to each
# actor. One name per data type: Ray takes the objects of that type out of a return value.
ray.experimental.register_tensor_transport("RAYACCEL", ["cpu", "cuda"], TensorTransport,
                                           torch.Tensor)
ray.experimental.register_tensor_transport("RAYACCEL_NUMPY", ["cpu"], TensorTransport,
                                           np.ndarray)


@pytest.fixture(scope="module")
def nodes():
    with cluster([("a", {}), ("b", {})]) as (_, ids):
        yield ids


def on(node_id, **options):
    return dict(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, False),
                **options)


def transport(name="RAYACCEL"):
    from ray.experimental.rdt.util import get_tensor_transport_manager
    return get_tensor_transport_manager(name)


def expected_tensors(seed):
    g = torch.Generator().manual_seed(seed)
    grid = torch.randn(64, 48, generator=g)
    return [grid, torch.randint(-2**40, 2**40, (1000,), generator=g),
            torch.randn(17, generator=g).to(torch.bfloat16),
            torch.rand(33, generator=g) > 0.5, grid.t()[::3, 1:], torch.zeros(0)]


@ray.remote
class Source:
    def __init__(self):
        self.kept = {}

    def pid(self):
        return os.getpid()

    @ray.method(tensor_transport="RAYACCEL")
    def tensors(self, seed):
        return expected_tensors(seed)

    @ray.method(tensor_transport="RAYACCEL")
    def one(self, nbytes):
        return torch.ones(nbytes, dtype=torch.uint8)

    @ray.method(tensor_transport="RAYACCEL_NUMPY")
    def arrays(self):
        return {"f": np.arange(12, dtype=np.float64).reshape(3, 4),
                "i": np.arange(7, dtype=np.int16)[::-2]}

    def sleep(self, seconds):
        time.sleep(seconds)

    def put(self, seed):
        return [ray.put(expected_tensors(seed)[0], _tensor_transport="RAYACCEL")]

    def stats(self, name="RAYACCEL"):
        return transport(name).stats()


# A consumer needs enable_tensor_transport=True too: Ray runs the read on its "_ray_system"
# concurrency group, which only such actors have (docs/ray-integration.md).
@ray.remote(enable_tensor_transport=True)
class Sink:
    def checksums(self, tensors):
        return [(str(t.dtype), tuple(t.shape), t.is_contiguous(), t.float().sum().item())
                for t in tensors]

    def equal(self, tensors, seed):
        return all(torch.equal(a, b) for a, b in zip(tensors, expected_tensors(seed)))

    def arrays(self, arrays):
        return {k: v.tolist() for k, v in arrays.items()}

    def nbytes(self, tensor):
        return tensor.numel()

    def stats(self, name="RAYACCEL"):
        return transport(name).stats()

    def first(self, refs):
        return ray.get(refs[0]).sum().item()


def read_bytes(stats):
    return sum(p["bytes"] for p in stats["transfers"]["read"].values())


def test_torch_tensors_move_between_actors_over_rayaccel(nodes):
    source, sink = Source.options(**on(nodes["a"])).remote(), \
        Sink.options(**on(nodes["b"])).remote()
    before = read_bytes(ray.get(sink.stats.remote()))
    ref = source.tensors.remote(7)
    assert ray.get(sink.equal.remote(ref, 7))
    want = expected_tensors(7)
    moved = read_bytes(ray.get(sink.stats.remote())) - before
    assert moved == sum(t.numel() * t.element_size() for t in want)
    # Several dtypes, a non-contiguous view arriving contiguous, an empty tensor.
    assert [c[:3] for c in ray.get(sink.checksums.remote(ref))] == \
        [(str(t.dtype), tuple(t.shape), True) for t in want]
    # The driver reads them too (one-sided: through its own transport).
    got = ray.get(ref)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    ray.kill(source), ray.kill(sink)


def test_whether_an_actor_has_the_transport_is_asked_once(nodes):
    """Ray asks before every .remote() of an RDT method. The actor answers on its system
    concurrency group (so a method it is running does not hold the answer up), and a yes is
    kept: asked again once the actor is gone, the driver answers without it."""
    source = Source.options(**on(nodes["a"])).remote()
    ray.get(source.pid.remote())
    asked = TensorTransport()
    busy = source.sleep.remote(30)  # the actor's main thread is taken
    assert asked.actor_has_tensor_transport(source) is True
    ray.kill(source, no_restart=True)
    assert asked.actor_has_tensor_transport(source) is True
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(busy)


def test_numpy_arrays_and_ray_put(nodes):
    source, sink = Source.options(**on(nodes["a"])).remote(), \
        Sink.options(**on(nodes["b"])).remote()
    assert ray.get(sink.arrays.remote(source.arrays.remote())) == \
        {"f": np.arange(12.0).reshape(3, 4).tolist(), "i": [6, 4, 2, 0]}
    assert read_bytes(ray.get(sink.stats.remote("RAYACCEL_NUMPY"))) == 12 * 8 + 4 * 2
    # ray.put with the transport inside the actor (one-sided transports only), read by another.
    refs = ray.get(source.put.remote(3))
    assert ray.get(sink.first.remote(refs)) == pytest.approx(expected_tensors(3)[0].sum().item(),
                                                             rel=1e-5)
    ray.kill(source), ray.kill(sink)


def test_garbage_collect_deregisters_the_sources_memory(nodes):
    source, sink = Source.options(**on(nodes["a"])).remote(), \
        Sink.options(**on(nodes["b"])).remote()
    ref = source.one.remote(1 << 20)
    assert ray.get(sink.nbytes.remote(ref)) == 1 << 20
    assert ray.get(source.stats.remote())["registered_bytes"] >= 1 << 20
    del ref
    deadline = time.time() + 20
    while ray.get(source.stats.remote())["registered_bytes"] != 0:
        assert time.time() < deadline, "Ray collected the object; its memory is still registered"
        time.sleep(0.2)
    ray.kill(source), ray.kill(sink)


def fails_within(ref_consumer, bound):
    start = time.time()
    with pytest.raises(Exception) as caught:
        ray.get(ref_consumer, timeout=bound + 30)
    return time.time() - start, caught.value


def test_a_stopped_source_fails_the_consumer_then_healthy_actors_go_on(nodes):
    source, sink = Source.options(**on(nodes["a"])).remote(), \
        Sink.options(**on(nodes["b"])).remote()
    assert ray.get(sink.nbytes.remote(source.one.remote(1024))) == 1024  # connected
    ref = source.one.remote(64 << 20)
    ray.wait([ref], fetch_local=False)
    pid = ray.get(source.pid.remote())
    os.kill(pid, signal.SIGSTOP)
    try:
        took, error = fails_within(sink.nbytes.remote(ref), PEER_TIMEOUT)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert took < PEER_TIMEOUT + 10, took
    # The error says what happened and names the source: its actor, process and node.
    assert "the peer was silent" in str(error) and f"pid {pid}," in str(error), error
    assert ray.get(sink.stats.remote())["peers_lost"] >= 1
    # The sink and a new source work as before.
    other = Source.options(**on(nodes["a"])).remote()
    assert ray.get(sink.nbytes.remote(other.one.remote(4096))) == 4096
    ray.kill(source), ray.kill(sink), ray.kill(other)


def test_a_killed_source_fails_the_consumer(nodes):
    source, sink = Source.options(**on(nodes["a"])).remote(), \
        Sink.options(**on(nodes["b"])).remote()
    ref = source.one.remote(1 << 20)
    ray.wait([ref], fetch_local=False)
    pid = ray.get(source.pid.remote())
    ray.kill(source)
    took, error = fails_within(sink.nbytes.remote(ref), PEER_TIMEOUT)
    assert took < PEER_TIMEOUT + 10, took
    assert "peer lost" in str(error) and f"pid {pid}," in str(error), error
    other = Source.options(**on(nodes["a"])).remote()
    assert ray.get(sink.nbytes.remote(other.one.remote(4096))) == 4096
    ray.kill(sink), ray.kill(other)


def test_the_key_is_the_clusters_and_another_key_is_refused(nodes, tmp_path):
    from ray.experimental import internal_kv
    source = Source.options(**on(nodes["a"])).remote()
    ref = source.one.remote(4096)
    ray.wait([ref], fetch_local=False)
    # Every process of the cluster reads one key from the GCS, made by the first that needed it.
    key = internal_kv._internal_kv_get(b"transport-key", namespace=b"rayaccel")
    assert key is not None and len(key) == 32
    other_key = tmp_path / "other.key"
    other_key.write_bytes(os.urandom(32))
    other_key.chmod(0o600)
    stranger = Sink.options(**on(nodes["b"], runtime_env={
        "env_vars": {"RAYACCEL_TRANSPORT_KEY_FILE": str(other_key)}})).remote()
    _, error = fails_within(stranger.nbytes.remote(ref), PEER_TIMEOUT)
    assert "UnauthenticatedError" in repr(error) and "transport key" in str(error), error
    ray.kill(source), ray.kill(stranger)
