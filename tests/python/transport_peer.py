"""The source side of the transport tests, in a process of its own: registers tensors and
prints their metadata, then waits for commands.

    transport_peer.py SIZE[:DTYPE] ...    e.g. 1024 1048576:float32

Prints one line: base64 of the pickled metadata, then the tensors' blake2b digests. Reads
commands from stdin: "gc" garbage-collects the object (its descriptors go stale), "exit"
ends. The tensors are random bytes from a fixed seed.
"""

import base64
import hashlib
import pickle
import sys

import numpy as np

from rayaccel.transport import TensorTransport


def main():
    transport = TensorTransport(peer_timeout=2.0)
    rng = np.random.default_rng(7)
    tensors = []
    for arg in sys.argv[1:]:
        size, _, dtype = arg.partition(":")
        raw = rng.integers(0, 256, int(size), dtype=np.uint8)
        tensors.append(raw.view(np.dtype(dtype or "uint8")))
    meta = transport.extract_tensor_transport_metadata("obj-1", tensors)
    print(base64.b64encode(pickle.dumps(meta)).decode())
    print(" ".join(hashlib.blake2b(t.tobytes(), digest_size=16).hexdigest() for t in tensors))
    sys.stdout.flush()
    for line in sys.stdin:
        if line.strip() == "gc":
            transport.garbage_collect("obj-1", meta, tensors)
            print("gc done", flush=True)
        elif line.strip() == "exit":
            break


if __name__ == "__main__":
    main()
