"""Two processes move NumPy arrays through rayaccel's transport the way Ray Direct Transport
does with rayaccel.transport.TensorTransport: the source registers them and hands over the
metadata (Ray carries it with the object), the destination pulls them, the source's memory is
then collected.

    python3 examples/python/transfer.py [SIZE_MIB]

In Ray, the same class is registered once, and actor methods name it:

    ray.experimental.register_tensor_transport("RAYACCEL", ["cpu"], TensorTransport)
    @ray.method(tensor_transport="RAYACCEL")
"""

import base64
import hashlib
import pickle
import subprocess
import sys
import time

import numpy as np

from rayaccel.transport import TensorTransport


def source(size):
    transport = TensorTransport()
    weights = np.random.default_rng(0).standard_normal(size // 4, dtype=np.float32)
    bias = np.arange(16, dtype=np.int64).reshape(4, 4)
    meta = transport.extract_tensor_transport_metadata("step-1", [weights, bias])
    print(base64.b64encode(pickle.dumps(meta)).decode())
    print(hashlib.sha256(weights.tobytes() + bias.tobytes()).hexdigest(), flush=True)
    sys.stdin.readline()  # the destination has them
    transport.garbage_collect("step-1", meta, [weights, bias])


def destination(size):
    peer = subprocess.Popen([sys.executable, __file__, "--source", str(size)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    meta = pickle.loads(base64.b64decode(peer.stdout.readline()))
    expected = peer.stdout.readline().strip()
    transport = TensorTransport()
    began = time.perf_counter()
    weights, bias = transport.recv_multiple_tensors("step-1", meta, None)
    took = time.perf_counter() - began
    peer.stdin.write("done\n")
    peer.stdin.close()
    peer.wait()
    same = hashlib.sha256(weights.tobytes() + bias.tobytes()).hexdigest() == expected
    print(f"received {weights.dtype}{list(weights.shape)} and {bias.dtype}{list(bias.shape)}, "
          f"{weights.nbytes + bias.nbytes} bytes, {'verified' if same else 'CORRUPT'} "
          f"({(weights.nbytes + bias.nbytes) / took / 1e9:.2f} GB/s in the first pull)")
    return 0 if same else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--source"]:
        source(int(sys.argv[2]))
    else:
        sys.exit(destination((int(sys.argv[1]) if len(sys.argv) > 1 else 16) << 20))
