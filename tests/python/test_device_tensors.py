"""Device memory through TensorTransport between two processes: arrays with
`__cuda_array_interface__` (as CuPy, Numba and PyTorch CUDA tensors expose it) on the fake CUDA
driver's GPUs, moved by the CUDA plugin, into target buffers on another GPU."""

import numpy as np
import pytest

import rayaccel
from conftest import source_process
from device_peer import contents
from fake_cuda_array import CONFIG, FIXTURE, FakeCudaArray
from rayaccel.transport import TensorTransport


@pytest.fixture
def source(monkeypatch):
    monkeypatch.setenv("FAKE_NVML_FIXTURE", FIXTURE)
    with source_process("device_peer.py") as meta:
        yield meta


def test_device_arrays_arrive_in_device_target_buffers(source):
    assert source.tensor_device == "cuda"
    want = contents()
    targets = [FakeCudaArray(v.shape, v.dtype, 5) for v in want]
    destination = TensorTransport(plugin="cuda", config=CONFIG, peer_timeout=2.0)
    out = destination.recv_multiple_tensors("dev-1", source, None, target_buffers=targets)
    assert out == targets
    for target, values in zip(targets, want):
        assert np.array_equal(target.download(), values)
    # Whole allocations of another process on this host: mapped, copied device to device.
    assert destination.last_paths == ["device-ipc"] * 3
    # Into host memory as well: a device tensor read into a NumPy buffer.
    host = [np.zeros_like(v) for v in want]
    destination.recv_multiple_tensors("dev-1", source, None, target_buffers=host)
    for got, values in zip(host, want):
        assert np.array_equal(got, values)
    assert destination.last_paths == ["device-ipc"] * 3


def test_device_tensors_without_a_place_to_land_are_refused_with_the_reason(source):
    destination = TensorTransport(plugin="cuda", config=CONFIG, peer_timeout=2.0)
    with pytest.raises(rayaccel.InvalidArgumentError, match="give target_buffers"):
        destination.recv_multiple_tensors("dev-1", source, None)


def test_device_arrays_the_driver_does_not_vouch_for(monkeypatch):
    monkeypatch.setenv("FAKE_NVML_FIXTURE", FIXTURE)
    transport = TensorTransport(plugin="cuda", config=CONFIG)
    strided = FakeCudaArray((8, 8), np.float32, 1, strides=(4, 32))
    with pytest.raises(rayaccel.InvalidArgumentError, match="C-contiguous"):
        transport.extract_tensor_transport_metadata("bad", [strided])
    freed = FakeCudaArray((16,), np.float32, 1)
    with freed:
        assert freed.cuda.cuMemFree_v2(freed.address) == 0
    with pytest.raises(rayaccel.InvalidArgumentError, match="not CUDA device memory"):
        transport.extract_tensor_transport_metadata("bad", [freed])
    mixed = [FakeCudaArray((4,), np.float32, 0), np.zeros(4, dtype=np.float32)]
    with pytest.raises(rayaccel.InvalidArgumentError, match="all host or all device"):
        transport.extract_tensor_transport_metadata("bad", mixed)
