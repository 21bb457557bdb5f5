"""Frameworks beyond torch over RDT through rayaccel, between actors of a real Ray: JAX arrays
(Ray's `data_type=jax.Array`), NumPy arrays, and any object that speaks DLPack, each arriving
in the reader as its framework made it (a JAX array for JAX) with dtype, shape and contents
kept: bfloat16, bool, 0-d and empty arrays, and strided views (copied to contiguous). What the
transport cannot take (no array protocol, memory of a device it does not reach) is refused
before anything is registered, naming the type and the device."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rayaccel.transport import TensorTransport
from conftest import cluster


class OnlyDlpack:
    """An array of a framework rayaccel does not know: DLPack and nothing else; `device` makes it
    claim memory of another device (DLPack's (kDLROCM, 0): one the transport does not reach).
    One class for both: Ray takes a transport's objects out of a return value by their exact
    class (ray.util.serialization), a subclass would go through the object store."""

    def __init__(self, array, device=None):
        self._array, self._device = array, device

    def __dlpack__(self, stream=None):
        return self._array.__dlpack__()

    def __dlpack_device__(self):
        return self._device or self._array.__dlpack_device__()


ray.experimental.register_tensor_transport("RAYACCEL_JAX", ["cpu"], TensorTransport, jax.Array)
ray.experimental.register_tensor_transport("RAYACCEL_NUMPY", ["cpu"], TensorTransport,
                                           np.ndarray)
ray.experimental.register_tensor_transport("RAYACCEL_DLPACK", ["cpu"], TensorTransport,
                                           OnlyDlpack)


def jax_arrays():
    key = jax.random.PRNGKey(0)
    return {"f32": jax.random.normal(key, (64, 48)),
            "bf16": jnp.arange(17, dtype=jnp.bfloat16) / 3,
            "bool": jnp.arange(33) % 3 == 0,
            "i8": jnp.arange(-20, 20, dtype=jnp.int8),
            "scalar": jnp.array(2.5, dtype=jnp.float32),
            "empty": jnp.zeros((0, 5), dtype=jnp.float16)}


def numpy_arrays():
    grid = np.arange(120, dtype=np.float64).reshape(10, 12)
    return {"strided": grid[::3, 1::2], "transposed": grid.T,
            "bf16": np.arange(9, dtype=ml_dtypes.bfloat16), "bool": np.array([True, False]),
            "scalar": np.array(7, dtype=np.int32), "empty": np.zeros(0, dtype=np.uint8)}


@ray.remote(num_cpus=0, enable_tensor_transport=True)
class Source:
    @ray.method(tensor_transport="RAYACCEL_JAX")
    def jax(self):
        return jax_arrays()

    @ray.method(tensor_transport="RAYACCEL_NUMPY")
    def numpy(self):
        return numpy_arrays()

    @ray.method(tensor_transport="RAYACCEL_DLPACK")
    def dlpack(self):
        return {"x": OnlyDlpack(np.arange(6, dtype=np.float32).reshape(2, 3))}

    @ray.method(tensor_transport="RAYACCEL_DLPACK")
    def elsewhere(self):
        return {"ok": OnlyDlpack(np.arange(4, dtype=np.float32)),
                "x": OnlyDlpack(np.arange(4, dtype=np.float32), device=(10, 0))}

    def registered(self):
        from ray.experimental.rdt.util import get_tensor_transport_manager
        return get_tensor_transport_manager("RAYACCEL_DLPACK").stats()["registered_bytes"]


@ray.remote(num_cpus=0, enable_tensor_transport=True)
class Reader:
    def describe(self, arrays):
        return {name: (type(a).__module__.split(".")[0], str(a.dtype), tuple(a.shape),
                       np.asarray(a).tobytes(), bool(np.asarray(a).flags["C_CONTIGUOUS"]))
                for name, a in arrays.items()}


@pytest.fixture(scope="module")
def actors():
    with cluster([("a", {}), ("b", {})]) as (_, ids):
        on = lambda node: NodeAffinitySchedulingStrategy(node, False)  # noqa: E731
        source = Source.options(scheduling_strategy=on(ids["a"])).remote()
        reader = Reader.options(scheduling_strategy=on(ids["b"])).remote()
        yield source, reader


def expected(arrays, framework):
    return {name: (framework, str(a.dtype), tuple(a.shape), np.asarray(a).tobytes(), True)
            for name, a in arrays.items()}


def test_jax_arrays_arrive_as_jax_arrays(actors):
    source, reader = actors
    got = ray.get(reader.describe.remote(source.jax.remote()))
    assert got == expected(jax_arrays(), "jaxlib"), got


def test_numpy_views_arrive_contiguous_with_their_values(actors):
    source, reader = actors
    got = ray.get(reader.describe.remote(source.numpy.remote()))
    assert got == expected({k: np.ascontiguousarray(v) if v.ndim else v
                            for k, v in numpy_arrays().items()}, "numpy"), got


def test_an_object_that_speaks_only_dlpack_arrives_as_numpy(actors):
    source, reader = actors
    got = ray.get(reader.describe.remote(source.dlpack.remote()))
    assert got == {"x": ("numpy", "float32", (2, 3),
                         np.arange(6, dtype=np.float32).tobytes(), True)}, got


def test_memory_of_another_device_is_refused_before_anything_is_registered(actors):
    source, reader = actors
    with pytest.raises(Exception) as refused:
        ray.get(reader.describe.remote(source.elsewhere.remote()), timeout=120)
    assert "test_frameworks.OnlyDlpack in rocm memory (device 0): this transport moves host " \
        "and CUDA memory" in str(refused.value), refused.value
    assert ray.get(source.registered.remote()) == 0
