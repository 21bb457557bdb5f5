#!/usr/bin/python3
"""The Python transfer path against the C++ one, at one size (default 64 MiB).

    PYTHONPATH=build/python bench/python_transfer.py BUILD_DIR [SIZE_MIB] [ITERS]

C++: `rayaccel transfer --own-memory --op read` (a server process registers its own buffer, a
client reads it into its own: the pull Ray's direct transport makes). Python: a source process
registers a NumPy array with rayaccel.transport.TensorTransport and hands over the metadata; the
destination calls recv_multiple_tensors into a target buffer, as Ray does with target_buffers.
Both over the sim plugin's transport (UCX, host memory, same host). Python runs twice: on memory
from malloc, as the C++ tool's (the transport path's own cost), and on arrays from NumPy's
allocator (which advises large arrays as huge pages). Prints the medians and the ratios.
"""

import base64
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
import json

import numpy as np

from rayaccel.transport import TensorTransport

build = sys.argv[1]
size = int(sys.argv[2] if len(sys.argv) > 2 else 64) << 20
iters = int(sys.argv[3]) if len(sys.argv) > 3 else 50
rayaccel = os.path.join(build, "bin", "rayaccel")


def cpp():
    with tempfile.TemporaryDirectory() as tmp:
        token = os.path.join(tmp, "token")
        server = subprocess.Popen([rayaccel, "transfer", "--serve", "--own-memory", "--size",
                                   str(size), "--token-file", token],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            out = subprocess.run([rayaccel, "transfer", "--token-file", token, "--size", str(size),
                                  "--op", "read", "--own-memory", "--iters", str(iters),
                                  "--warmup", "5", "--json"],
                                 capture_output=True, text=True, check=True, timeout=300).stdout
        finally:
            server.terminate()
            server.wait()
    r = json.loads(out)
    # The tool reports bytes over total time and per-transfer latencies; the median transfer:
    return size / (r["latency_us_p50"] / 1e6)


SOURCE = """
import base64, pickle, sys
import numpy as np
from rayaccel.transport import TensorTransport
t = TensorTransport()
a = np.random.default_rng(1).integers(0, 256, int(sys.argv[1]), dtype=np.uint8)
if sys.argv[2] == "malloc":
    a = np.frombuffer(bytearray(a.tobytes()), dtype=np.uint8)
print(base64.b64encode(pickle.dumps(t.extract_tensor_transport_metadata("o", [a]))).decode(),
      flush=True)
sys.stdin.read()
"""


def python(memory):
    """memory: "numpy" (arrays from NumPy's allocator) or "malloc" (as the C++ tool's)."""
    source = subprocess.Popen([sys.executable, "-c", SOURCE, str(size), memory],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        meta = pickle.loads(base64.b64decode(source.stdout.readline()))
        dest = TensorTransport()
        target = [np.empty(size, np.uint8) if memory == "numpy" else
                  np.frombuffer(bytearray(size), dtype=np.uint8)]
        times = []
        for i in range(5 + iters):
            began = time.perf_counter()
            dest.recv_multiple_tensors("o", meta, None, target)
            if i >= 5:
                times.append(time.perf_counter() - began)
        return size / statistics.median(times)
    finally:
        source.stdin.close()
        source.wait()


c, same, numpy = cpp(), python("malloc"), python("numpy")
print(f"{size >> 20} MiB read, median of {iters}: C++ {c / 1e9:.2f} GB/s; Python on the same "
      f"memory {same / 1e9:.2f} GB/s ({same / c:.2f}x), on NumPy's arrays {numpy / 1e9:.2f} GB/s "
      f"({numpy / c:.2f}x)")
