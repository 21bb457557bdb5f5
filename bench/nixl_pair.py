"""Two NIXL agents in two processes, host memory, as bench/compare_nixl.sh measures them: the
same operations `rayaccel transfer --connect` times (one READ or WRITE of SIZE bytes, or one
request of a list of COUNT entries of SIZE bytes each), on NIXL's UCX backend in its default
peer error mode or with ucx_error_handling_mode=none.

    python nixl_pair.py --op read --size 4096 --count 64 --iters 200 [--error-mode none]

Prints one JSON object: bandwidth_bytes_per_s, latency_us_p50, latency_us_p99 (one request:
posted, then waited for by polling its state, as a NIXL user does), as rayaccel transfer
--json does. The target is a child process that registers its buffer, hands over its metadata
and descriptors on stdout, and waits on stdin; it checks nothing (NIXL's target takes no part).
"""

import argparse
import base64
import json
import os
import shlex
import subprocess
import sys
import time

import numpy as np

try:
    from nixl._api import nixl_agent, nixl_agent_config
except ImportError:  # the CUDA-12 build alone, without the meta package
    from nixl_cu12._api import nixl_agent, nixl_agent_config


def agent(name, error_mode):
    a = nixl_agent(name, nixl_agent_config(backends=[]))
    params = {} if error_mode == "peer" else {"ucx_error_handling_mode": error_mode}
    a.create_backend("UCX", params)
    return a


def run(a, handle, what):
    """Posts a prepared transfer and polls it to its end, as NIXL's examples do."""
    state = a.transfer(handle)
    while state == "PROC":
        state = a.check_xfer_state(handle)
    if state != "DONE":
        raise SystemExit(f"NIXL {what}: {state}")


def target(args):
    a = agent("target", args.error_mode)
    buf = np.full(args.size * args.count, 7, dtype=np.uint8)
    a.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
    descs = a.get_xfer_descs([(buf.ctypes.data + i * args.size, args.size, 0)
                              for i in range(args.count)], "DRAM")
    print(base64.b64encode(a.get_agent_metadata()).decode(), flush=True)
    print(base64.b64encode(a.get_serialized_descs(descs)).decode(), flush=True)
    sys.stdin.readline()  # until the initiator is done


def initiator(args):
    child = subprocess.Popen(shlex.split(args.target_prefix) +
                             [sys.executable, __file__, "--role", "target", "--size",
                              str(args.size), "--count", str(args.count), "--error-mode",
                              args.error_mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        metadata = base64.b64decode(child.stdout.readline())
        remote_descs = base64.b64decode(child.stdout.readline())
        a = agent("initiator", args.error_mode)
        buf = np.zeros(args.size * args.count, dtype=np.uint8)
        a.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
        local = a.get_xfer_descs([(buf.ctypes.data + i * args.size, args.size, 0)
                                  for i in range(args.count)], "DRAM")
        peer = a.add_remote_agent(metadata)
        remote = a.deserialize_descs(remote_descs)
        handle = a.initialize_xfer(args.op.upper(), local, remote, peer)
        times = []
        for i in range(args.warmup + args.iters):
            start = time.perf_counter()
            run(a, handle, "transfer failed")
            if i >= args.warmup:
                times.append(time.perf_counter() - start)
        if args.op == "read" and not (buf == 7).all():
            raise SystemExit("NIXL read the wrong bytes")
        times.sort()
        total = sum(times)
        print(json.dumps({
            "bandwidth_bytes_per_s": args.size * args.count * len(times) / total,
            "latency_us_p50": times[len(times) // 2] * 1e6,
            "latency_us_p99": times[min(len(times) - 1, int(len(times) * 0.99))] * 1e6}))
    finally:
        child.stdin.write("done\n")
        child.stdin.flush()
        child.wait(timeout=30)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", default="initiator", choices=["initiator", "target"])
    parser.add_argument("--op", default="read", choices=["read", "write"])
    parser.add_argument("--size", type=int, default=1 << 20)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--error-mode", default="peer", choices=["peer", "none"])
    parser.add_argument("--target-prefix", default="",
                        help="a command the target runs under (ip netns exec NS env ...)")
    args = parser.parse_args()
    os.environ.setdefault("NIXL_LOG_LEVEL", "WARN")
    (target if args.role == "target" else initiator)(args)
    # NIXL 1.5.1's agents crash (SIGSEGV) in their teardown at interpreter exit on this
    # machine, after the work is done: leave without it.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
