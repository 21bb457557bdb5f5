"""rayaccel's transport against NIXL, Ray's own RDT backend, on one host: host memory between
two processes, READ and WRITE, single transfers and lists, in one run, as ratios
(bench/compare_nixl.sh runs it; docs/performance.md has the figures).

rayaccel: `rayaccel transfer --serve` / `--connect --json` (the sim plugin's transport: the
UCX helper, or the libfabric one with --fabric libfabric), on memory the transport allocates
(shared with a reader on the owner's host) and, with --own-memory, also on memory each process
allocated itself and registered, as a tensor or an array is: a table for each, against the same
NIXL runs. NIXL: bench/nixl_pair.py, its UCX
backend in the default peer error mode and with ucx_error_handling_mode=none (shared memory
and CMA back, peer failures no longer detected). Each side uses its own UCX (Debian's for
rayaccel, the one NIXL's wheel carries for NIXL), with UCX_TLS as the caller set it.

    python compare_nixl.py BUILD_DIR [--sizes 8,4096,65536,1048576,67108864] [--lists 64,1024]
                           [--ops read,write] [--fabrics ucx] [--iters N] [--own-memory]
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def human(n):
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= factor and n % factor == 0:
            return f"{n // factor}{unit}"
    return f"{n}B"


def rayaccel(build, op, size, count, iters, fabric, memory, owner_prefix, reader_prefix):
    tool = os.path.join(build, "bin", "rayaccel")
    own = ["--own-memory"] if memory == "own" else []
    with tempfile.TemporaryDirectory() as tmp:
        token = os.path.join(tmp, "token")
        server = subprocess.Popen(owner_prefix + [tool, "transfer", "--serve", "--size",
                                                  str(size * count), "--fabric", fabric,
                                                  "--token-file", token] + own,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 30
            while not (os.path.exists(token) and os.path.getsize(token) > 0):
                if server.poll() is not None or time.time() > deadline:
                    raise RuntimeError("rayaccel transfer --serve gave no token")
                time.sleep(0.02)
            out = subprocess.run(reader_prefix + [
                                  tool, "transfer", "--connect", open(token).read().strip(),
                                  "--op", op, "--size", str(size), "--batch", str(count),
                                  "--iters", str(iters), "--fabric", fabric, "--json"] + own,
                                 capture_output=True, text=True, timeout=600)
            if out.returncode != 0:
                raise RuntimeError(out.stderr.strip()[-300:])
            return json.loads(out.stdout)
        finally:
            server.terminate()
            server.wait(timeout=30)


def nixl(python, op, size, count, iters, mode, owner_prefix, reader_prefix):
    out = subprocess.run(reader_prefix + [
                          python, os.path.join(HERE, "nixl_pair.py"), "--op", op, "--size",
                          str(size), "--count", str(count), "--iters", str(iters),
                          "--error-mode", mode, "--target-prefix", shlex.join(owner_prefix)],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip()[-300:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--sizes", default="8,4096,65536,1048576,67108864")
    parser.add_argument("--lists", default="64,1024", help="list lengths, for sizes <= 64 KiB")
    parser.add_argument("--ops", default="read,write")
    parser.add_argument("--fabrics", default="ucx")
    parser.add_argument("--iters", type=int, default=0, help="default: by size")
    parser.add_argument("--python", default=sys.executable, help="an interpreter with nixl")
    parser.add_argument("--owner-prefix", default="", help="a command the owners (the serving "
                        "side) run under, e.g. ip netns exec A env UCX_NET_DEVICES=veth0")
    parser.add_argument("--reader-prefix", default="", help="the same for the readers")
    parser.add_argument("--own-memory", action="store_true", help="also measure memory each "
                        "process allocated and registered (a tensor in place): a second table")
    args = parser.parse_args()
    memories = ["allocated", "own"] if args.own_memory else ["allocated"]
    owner, reader = shlex.split(args.owner_prefix), shlex.split(args.reader_prefix)
    sizes = [int(s) for s in args.sizes.split(",")]
    lists = [int(n) for n in args.lists.split(",") if n]
    cases = [(size, 1) for size in sizes] + \
        [(size, n) for size in sizes if size <= 65536 for n in lists]

    where = f"owners under `{args.owner_prefix}`, readers under `{args.reader_prefix}`; " \
        if owner or reader else "one host; "
    print(f"{where}UCX_TLS={os.environ.get('UCX_TLS', '(unset)')}; GB/s (10^9 bytes/s) of one request "
          "at a time; p50/p99 in us for requests of at most 64 KiB")
    header = (f"{'op':5} {'size':>6} {'list':>5} {'fabric':9} {'rayaccel':>9} {'NIXL':>9} "
              f"{'NIXL none':>9} {'x NIXL':>7} {'x none':>7}  latency p50/p99 us: rayaccel | "
              "NIXL | NIXL none")
    titles = {"allocated": "memory the transport allocated (rayaccel transfer's default)",
              "own": "memory each process allocated and registered (--own-memory)"}
    tables = {memory: [] for memory in memories}
    if len(memories) == 1:
        print(header)
    for op in args.ops.split(","):
        for size, count in cases:
            iters = args.iters or max(20, min(2000, (256 << 20) // (size * count)))
            theirs = {}
            for mode in ("peer", "none"):
                try:
                    theirs[mode] = nixl(args.python, op, size, count, iters, mode, owner,
                                        reader)
                except Exception as e:  # noqa: BLE001 - reported in the row
                    print(f"  NIXL ({mode}) {op} {human(size)} x{count}: {e}", file=sys.stderr)
            for memory in memories:
                for fabric in args.fabrics.split(","):
                    try:
                        ours = rayaccel(args.build, op, size, count, iters, fabric, memory,
                                        owner, reader)
                    except Exception as e:  # noqa: BLE001
                        print(f"  rayaccel {fabric} {memory} {op} {human(size)} x{count}: {e}",
                              file=sys.stderr)
                        continue
                    row = format_row(op, size, count, fabric, ours, theirs)
                    tables[memory].append(row)
                    if len(memories) > 1:
                        print(f"{memory:9} {row}", file=sys.stderr, flush=True)
                    else:
                        print(row, flush=True)
    if len(memories) > 1:
        for memory in memories:
            print(f"\n{titles[memory]}\n{header}")
            print("\n".join(tables[memory]), flush=True)


def format_row(op, size, count, fabric, ours, theirs):
    bw = ours["bandwidth_bytes_per_s"]

    def gbps(r):
        return f"{r['bandwidth_bytes_per_s'] / 1e9:9.3f}" if r else f"{'n/a':>9}"

    def ratio(r):
        return f"{bw / r['bandwidth_bytes_per_s']:6.2f}x" if r else f"{'n/a':>7}"

    def lat(r):
        return f"{r['latency_us_p50']:.0f}/{r['latency_us_p99']:.0f}" if r else "n/a"

    row = (f"{op:5} {human(size):>6} {count:>5} {fabric:9} {bw / 1e9:9.3f} "
           f"{gbps(theirs.get('peer'))} {gbps(theirs.get('none'))} "
           f"{ratio(theirs.get('peer'))} {ratio(theirs.get('none'))}")
    if size * count <= 65536:
        row += f"  {lat(ours)} | {lat(theirs.get('peer'))} | {lat(theirs.get('none'))}"
    return row


if __name__ == "__main__":
    main()
