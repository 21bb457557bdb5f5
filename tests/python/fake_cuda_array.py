"""Arrays in the fake CUDA driver's device memory, as CuPy or Numba would hand them to
TensorTransport: `__cuda_array_interface__` (version 3) over memory from cuMemAlloc, filled and
read back with cuMemcpyHtoD and cuMemcpyDtoH."""

import ctypes
import os

import numpy as np

BUILD = os.environ["RAYACCEL_BUILD_DIR"]
LIBRARY = os.path.join(BUILD, "tests", "fake-cuda", "libcuda.so.1")
NVML = os.path.join(BUILD, "tests", "fake-nvml-current", "libnvidia-ml.so.1")
FIXTURE = os.path.join(os.environ["RAYACCEL_SOURCE_DIR"], "tests", "fixtures", "fake-nvml",
                       "dgx-h100.json")
CONFIG = {"nvml_library": NVML, "cuda_library": LIBRARY}


def driver():
    cuda = ctypes.CDLL(LIBRARY)
    u64, ptr, size = ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t
    cuda.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(ptr), ctypes.c_int]
    cuda.cuCtxPushCurrent_v2.argtypes = [ptr]
    cuda.cuCtxPopCurrent_v2.argtypes = [ctypes.POINTER(ptr)]
    cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(u64), size]
    cuda.cuMemFree_v2.argtypes = [u64]
    cuda.cuMemcpyHtoD_v2.argtypes = [u64, ptr, size]
    cuda.cuMemcpyDtoH_v2.argtypes = [ptr, u64, size]
    assert cuda.cuInit(0) == 0
    return cuda


class FakeCudaArray:
    """`nbytes` of device memory on CUDA device `ordinal`, seen as an array of `dtype`."""

    def __init__(self, shape, dtype, ordinal, strides=None, readonly=False):
        self.cuda = driver()
        self.dtype, self.shape, self.ordinal = np.dtype(dtype), tuple(shape), ordinal
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.ctx = ctypes.c_void_p()
        assert self.cuda.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), ordinal) == 0
        self.address = ctypes.c_uint64(0)
        with self:
            assert self.cuda.cuMemAlloc_v2(ctypes.byref(self.address), max(self.nbytes, 1)) == 0
        self._strides, self._readonly = strides, readonly

    def __enter__(self):
        assert self.cuda.cuCtxPushCurrent_v2(self.ctx) == 0

    def __exit__(self, *exc):
        popped = ctypes.c_void_p()
        self.cuda.cuCtxPopCurrent_v2(ctypes.byref(popped))

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "strides": self._strides,
                "data": (self.address.value, self._readonly), "version": 3}

    def upload(self, array):
        array = np.ascontiguousarray(array, dtype=self.dtype)
        with self:
            assert self.cuda.cuMemcpyHtoD_v2(self.address, array.ctypes.data, self.nbytes) == 0

    def download(self):
        out = np.empty(self.shape, dtype=self.dtype)
        with self:
            assert self.cuda.cuMemcpyDtoH_v2(out.ctypes.data, self.address, self.nbytes) == 0
        return out
