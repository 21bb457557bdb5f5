"""NIXL's side of bench/kv_transfer.py: the KV-cache move bench/kv_pair.cc makes, done as NIXL's
users do it (vLLM's NIXL connector): the cache in memory each process allocated, registered
once; every block of both sides prepared once as a descriptor list (prep_xfer_dlist); each
request a prepared transfer of the chosen blocks' indices (make_prepped_xfer) with a
notification, posted and polled until done.

    python nixl_kv.py --role prefill|decode --layers 32 --blocks 512 --block-bytes 16384
                      [--requests 16,64,256,512] [--iters 20] [--error-mode peer|none]

The prefill prints its metadata and descriptors (base64), then collects notifications until
stdin closes and prints {"notifications": [[message, monotonic us], ...]}. The decode reads
those lines on stdin and prints one JSON line per request size, as rayaccel_bench_kv does.
"""

import argparse
import base64
import json
import os
import sys
import threading
import time

import numpy as np

os.environ.setdefault("NIXL_LOG_LEVEL", "WARN")  # its INFO lines go to stdout, where ours go
from nixl_pair import agent, run  # noqa: E402 - NIXL reads its log level as it is imported


def now_us():
    return time.monotonic() * 1e6


def cache(args, fill):
    """One array per layer and K or V; block i of region r tagged (r, i) as kv_pair.cc does."""
    regions = []
    for r in range(2 * args.layers):
        a = np.zeros(args.blocks * args.block_bytes, dtype=np.uint8)
        if fill:
            blocks = a.reshape(args.blocks, args.block_bytes)
            blocks[:] = ord("a") + r % 26
            blocks[:, :16] = np.frombuffer(
                np.array([[r, i] for i in range(args.blocks)], dtype=np.uint64).tobytes(),
                dtype=np.uint8).reshape(args.blocks, 16)
        regions.append(a)
    return regions


def block_list(regions, args):
    """Every block of every region, region-major: block b of region r at r * blocks + b."""
    rows = [(a.ctypes.data + b * args.block_bytes, args.block_bytes, 0)
            for a in regions for b in range(args.blocks)]
    return np.array(rows, dtype=np.uint64)


def prefill(args):
    a = agent("prefill", args.error_mode)
    regions = cache(args, fill=True)
    a.register_memory([(r.ctypes.data, r.nbytes, 0, "") for r in regions], "DRAM")
    descs = a.get_xfer_descs(block_list(regions, args), "DRAM")
    print(base64.b64encode(a.get_agent_metadata()).decode(), flush=True)
    print(base64.b64encode(a.get_serialized_descs(descs)).decode(), flush=True)
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    heard = []
    while not done.is_set():
        for messages in a.get_new_notifs().values():
            t = now_us()
            heard.extend([m.decode(), t] for m in messages)
        time.sleep(0.00002)
    print(json.dumps({"notifications": heard}), flush=True)


def decode(args):
    metadata = base64.b64decode(sys.stdin.readline())
    remote_descs = base64.b64decode(sys.stdin.readline())
    a = agent("decode", args.error_mode)
    regions = cache(args, fill=False)
    a.register_memory([(r.ctypes.data, r.nbytes, 0, "") for r in regions], "DRAM")
    peer = a.add_remote_agent(metadata)
    local = a.prep_xfer_dlist("NIXL_INIT_AGENT", block_list(regions, args), "DRAM")
    remote = a.prep_xfer_dlist(peer, a.deserialize_descs(remote_descs))
    random = np.random.default_rng(7)
    layer_base = (np.arange(2 * args.layers, dtype=np.int64) * args.blocks)[:, None]
    for k in args.requests:
        latencies, starts = [], []
        for i in range(args.warmup + args.iters):
            remote_blocks = random.permutation(args.blocks)[:k]
            local_blocks = random.permutation(args.blocks)[:k]
            message = f"{k}/{i}"
            start = now_us()
            handle = a.make_prepped_xfer(
                "READ", local, (layer_base + local_blocks).reshape(-1).astype(np.int32),
                remote, (layer_base + remote_blocks).reshape(-1).astype(np.int32),
                message.encode())
            run(a, handle, f"request {message}")
            if i >= args.warmup:
                latencies.append(now_us() - start)
                starts.append([message, start])
            a.release_xfer_handle(handle)
        for r, arr in enumerate(regions):  # the last request's blocks landed whole
            blocks = arr.reshape(args.blocks, args.block_bytes)
            for lb, rb in zip(local_blocks, remote_blocks):
                tag = np.frombuffer(blocks[lb, :16].tobytes(), dtype=np.uint64)
                if tag[0] != r or tag[1] != rb or blocks[lb, -1] != ord("a") + r % 26:
                    raise SystemExit(f"NIXL block {rb} of region {r} arrived wrong")
        ordered = sorted(latencies)
        nbytes = 2 * args.layers * k * args.block_bytes
        print(json.dumps({
            "blocks_per_layer": k, "bytes": nbytes, "entries": 2 * args.layers * k,
            "bandwidth_bytes_per_s": nbytes * len(latencies) / sum(latencies) * 1e6,
            "latency_us_p50": ordered[len(ordered) // 2],
            "latency_us_p99": ordered[min(len(ordered) - 1, len(ordered) * 99 // 100)],
            "starts": starts}), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", required=True, choices=["prefill", "decode"])
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--blocks", type=int, default=512)
    parser.add_argument("--block-bytes", type=int, default=16 << 10)
    parser.add_argument("--requests", default="16,64,256,512")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--error-mode", default="peer", choices=["peer", "none"])
    args = parser.parse_args()
    args.requests = [int(k) for k in args.requests.split(",")]
    (prefill if args.role == "prefill" else decode)(args)
    # NIXL 1.5.1's agents crash (SIGSEGV) in their teardown at interpreter exit on this
    # machine, after the work is done: leave without it.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
