"""The source side of the device tensor tests, in a process of its own: device arrays on CUDA
device 2 (of the fake driver) registered with TensorTransport through the CUDA plugin; prints
base64 of the pickled metadata, then waits on stdin for "exit"."""

import base64
import pickle
import sys

import numpy as np

from fake_cuda_array import CONFIG, FakeCudaArray
from rayaccel.transport import TensorTransport


def contents():
    rng = np.random.default_rng(5)
    return [rng.standard_normal((256, 64)).astype(np.float32),
            rng.integers(-100, 100, 1 << 20, dtype=np.int8),
            np.arange(3, dtype=np.int64)]


def main():
    arrays = []
    for values in contents():
        a = FakeCudaArray(values.shape, values.dtype, 2)
        a.upload(values)
        arrays.append(a)
    transport = TensorTransport(plugin="cuda", config=CONFIG, peer_timeout=2.0)
    meta = transport.extract_tensor_transport_metadata("dev-1", arrays)
    print(base64.b64encode(pickle.dumps(meta)).decode(), flush=True)
    for line in sys.stdin:
        if line.strip() == "exit":
            break
    transport.garbage_collect("dev-1")


if __name__ == "__main__":
    main()
