"""PyTorch tensors through TensorTransport between two processes, as Ray's RDT moves them:
dtypes from bool to complex64, 0-d and empty tensors, strided, transposed and channels-last
views, into new tensors and into target_buffers."""

import pytest
import torch

import rayaccel
from conftest import source_process
from rayaccel.transport import TensorTransport
from torch_tensors import tensors


@pytest.fixture
def source():
    with source_process("torch_peer.py") as meta:
        yield meta


def test_every_dtype_shape_and_layout_arrives_equal(source):
    expected = tensors()
    assert [dtype for _, dtype in source.tensor_meta] == [t.dtype for t in expected]
    assert source.tensor_device == "cpu"
    out = TensorTransport(peer_timeout=2.0).recv_multiple_tensors("torch-1", source, None)
    assert len(out) == len(expected)
    for got, want in zip(out, expected):
        assert isinstance(got, torch.Tensor) and got.device.type == "cpu"
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape)
        assert got.is_contiguous()
        assert torch.equal(got, want), want.dtype


def test_into_target_buffers(source):
    expected = tensors()
    targets = [torch.full(t.shape, 0, dtype=t.dtype) for t in expected]
    out = TensorTransport(peer_timeout=2.0).recv_multiple_tensors("torch-1", source, None,
                                                                  target_buffers=targets)
    for got, target, want in zip(out, targets, expected):
        assert got is target  # written in place, not copied
        assert torch.equal(target, want), want.dtype


def test_target_buffers_that_cannot_hold_them_are_refused(source):
    expected = tensors()
    destination = TensorTransport(peer_timeout=2.0)
    wrong_size = [torch.empty(t.shape, dtype=t.dtype) for t in expected]
    wrong_size[0] = torch.empty(10, dtype=torch.float32)
    with pytest.raises(rayaccel.InvalidArgumentError, match="target buffer 0 holds 40 bytes"):
        destination.recv_multiple_tensors("torch-1", source, None, target_buffers=wrong_size)
    strided = [torch.empty(t.shape, dtype=t.dtype) for t in expected]
    strided[0] = torch.empty(48, 64).t()  # the right size, not contiguous
    with pytest.raises(rayaccel.InvalidArgumentError, match="contiguous"):
        destination.recv_multiple_tensors("torch-1", source, None, target_buffers=strided)
    # Refusals leave the transfer possible.
    out = destination.recv_multiple_tensors("torch-1", source, None)
    assert torch.equal(out[0], expected[0])


def test_a_tensor_that_requires_grad_and_a_device_it_cannot_reach():
    transport = TensorTransport()
    leaf = torch.ones(4, requires_grad=True)
    meta = transport.extract_tensor_transport_metadata("grad", [leaf * 2])
    out = TensorTransport().recv_multiple_tensors("grad", meta, None)
    assert torch.equal(out[0], torch.full((4,), 2.0)) and not out[0].requires_grad
    transport.garbage_collect("grad")
    meta_device = torch.empty(4, device="meta")
    with pytest.raises(rayaccel.InvalidArgumentError, match="meta tensor"):
        transport.extract_tensor_transport_metadata("meta", [meta_device])
