"""PyTorch CUDA tensors through rayaccel.transport.TensorTransport between two processes on a
real NVIDIA host, on Ray's fetch path (the destination pulls): several dtypes and shapes from
PyTorch's caching allocator (inside its segments: staged, docs/transport.md), into new CUDA
tensors and into target buffers. Prints, per recv, the bytes, the
time, the paths taken and whether every tensor arrived equal.

    python3 torch_cuda_tensors.py             (the destination; starts the source itself)

Needs PyTorch with CUDA and the rayaccel package on PYTHONPATH; the plugin is "cuda"."""

import base64
import pickle
import subprocess
import sys
import time

import torch

from rayaccel.transport import TensorTransport


def tensors():
    g = torch.Generator(device="cuda").manual_seed(11)
    out = [
        torch.randn(1024, 1024, device="cuda", generator=g),  # 4 MiB float32
        torch.randn(4096, 4096, device="cuda", generator=g).to(torch.bfloat16),  # 32 MiB
        torch.randint(-100, 100, (1 << 20,), device="cuda", dtype=torch.int8, generator=g),
        torch.arange(1000, device="cuda", dtype=torch.int64),
        torch.randn(256, 512, device="cuda", generator=g).t().contiguous(),
    ]
    torch.cuda.synchronize()  # registered only once the work that wrote them completed
    return out


def source():
    transport = TensorTransport(plugin="cuda", peer_timeout=10.0)
    held = tensors()
    meta = transport.extract_tensor_transport_metadata("obj-1", held)
    print(base64.b64encode(pickle.dumps(meta)).decode(), flush=True)
    for line in sys.stdin:
        if line.strip() == "exit":
            break
    transport.garbage_collect("obj-1")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "source":
        source()
        return
    if not torch.cuda.is_available():
        print("no CUDA device for PyTorch: nothing to record")
        return
    proc = subprocess.Popen([sys.executable, __file__, "source"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        meta = pickle.loads(base64.b64decode(proc.stdout.readline()))
        want = [t.cpu() for t in tensors()]  # the same generator: the source's values
        destination = TensorTransport(plugin="cuda", peer_timeout=10.0)
        print("devices:", meta.tensor_device, "tensors:",
              [(tuple(s), str(d)) for s, d in meta.tensor_meta])
        for attempt in range(3):
            began = time.perf_counter()
            out = destination.recv_multiple_tensors("obj-1", meta, None)
            torch.cuda.synchronize()
            took = time.perf_counter() - began
            equal = all(torch.equal(o.cpu(), w) for o, w in zip(out, want))
            total = sum(meta.nbytes)
            print(f"recv {attempt}: {total} bytes in {took * 1e3:.2f} ms "
                  f"({total / took / 1e9:.2f} GB/s), equal={equal}, "
                  f"paths={destination.last_paths}")
        targets = [torch.empty_like(w, device="cuda") for w in want]
        destination.recv_multiple_tensors("obj-1", meta, None, target_buffers=targets)
        torch.cuda.synchronize()
        print("into target buffers: equal =",
              all(torch.equal(t.cpu(), w) for t, w in zip(targets, want)),
              "paths =", destination.last_paths)
    finally:
        proc.stdin.write("exit\n")
        proc.stdin.close()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
