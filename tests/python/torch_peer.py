"""The source side of the torch transport tests, in a process of its own: registers the
tensors of torch_tensors.py with TensorTransport, prints base64 of the pickled metadata, then
waits on stdin for "exit"."""

import base64
import pickle
import sys

from rayaccel.transport import TensorTransport
from torch_tensors import tensors


def main():
    transport = TensorTransport(peer_timeout=2.0)
    held = tensors()
    meta = transport.extract_tensor_transport_metadata("torch-1", held)
    print(base64.b64encode(pickle.dumps(meta)).decode(), flush=True)
    for line in sys.stdin:
        if line.strip() == "exit":
            break
    transport.garbage_collect("torch-1")


if __name__ == "__main__":
    main()
