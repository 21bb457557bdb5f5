"""Disaggregated serving's KV-cache move, rayaccel against NIXL: a prefill process holding a
request's KV cache in memory it allocated itself (32 layers x K and V, one array each), a
decode process pulling a request's blocks of every layer as one batch with a notification that
tells the prefill it may free them (vLLM's NIXL connector's pattern). Two caches, as NIXL's
kvbench plans them: 512 blocks of 16 KiB per layer and K or V (512 MiB), requests of 16, 64,
256 and 512 blocks per layer; and 64 blocks of 144 KiB (576 MiB), requests of 8, 32 and 64.

rayaccel: bench/kv_pair.cc (rayaccel_bench_kv, the sim plugin's transport: the UCX helper);
NIXL: bench/nixl_kv.py, its UCX backend in its default peer error mode and with
ucx_error_handling_mode=none, prepared descriptor lists and make_prepped_xfer per request.

    python kv_transfer.py BUILD_DIR [--iters 20] [--veth] [--caches 16384x512,147456x64]

--veth: the prefill in one network namespace and the decode in another, joined by a veth pair
(root; created here, removed at exit), TCP on the veth alone (UCX_TLS=tcp, UCX_NET_DEVICES),
RAYACCEL_TRANSPORT_SAME_HOST=0: the two namespaces stand for two hosts.

Per request: GB/s over the timed requests, p50/p99 of the request (issued to done, the
notification sent), and p50 of when the prefill heard the notification, from the request's
start (the two processes share the host's monotonic clock).
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REQUESTS = {16384: "16,64,256,512", 147456: "8,32,64"}


def run_pair(prefill_cmd, decode_cmd, lines_out):
    """Starts the prefill, hands its first `lines_out` lines (its address or metadata, and its
    descriptors) to the decode, and returns the decode's rows (by blocks per layer) with each
    row's notification latencies (us) joined in."""
    with tempfile.TemporaryFile("w+") as err:
        prefill = subprocess.Popen(prefill_cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=err, text=True)
        try:
            lines = [prefill.stdout.readline() for _ in range(lines_out)]
            if not all(lines):
                err.seek(0)
                raise RuntimeError(f"the prefill gave no descriptors: {err.read()[-300:]}")
            decode = subprocess.run(decode_cmd, input="".join(lines), capture_output=True,
                                    text=True, timeout=1800)
            if decode.returncode != 0:
                raise RuntimeError(decode.stderr.strip()[-300:])
            rows = [json.loads(line) for line in decode.stdout.splitlines() if line.strip()]
        finally:
            prefill.stdin.close()
        heard = json.loads(prefill.stdout.readline() or '{"notifications": []}')
        prefill.wait(timeout=60)
    arrived = {m: t for m, t in heard["notifications"]}
    for row in rows:
        row["notified_us"] = sorted(arrived[m] - start for m, start in row["starts"]
                                    if m in arrived)
        row["missing_notifications"] = sum(1 for m, _ in row["starts"] if m not in arrived)
    return {row["blocks_per_layer"]: row for row in rows}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--python", default=None, help="an interpreter with nixl "
                        "(default: BUILD/venv/bin/python)")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--caches", default="16384x512,147456x64",
                        help="block bytes x blocks per layer and K or V, comma-separated")
    parser.add_argument("--veth", action="store_true")
    parser.add_argument("--skip-nixl", action="store_true")
    args = parser.parse_args()
    python = args.python or os.path.join(args.build, "venv", "bin", "python")
    tool = os.path.join(args.build, "bin", "rayaccel_bench_kv")
    owner, reader = [], []
    if args.veth:
        owner, reader = veth()
    print(f"{'across a veth pair (TCP)' if args.veth else 'one host'}; "
          f"UCX_TLS={os.environ.get('UCX_TLS', '(unset)') if not args.veth else 'tcp'}; "
          f"{args.layers} layers x K,V; {args.iters} requests per row; per request: GB/s, "
          "p50/p99 ms done, p50 ms until the prefill heard the notification")
    print(f"{'block':>7} {'blocks':>6} {'MiB':>5}  {'rayaccel':>8} {'NIXL':>7} {'none':>7} "
          f"{'x NIXL':>6} {'x none':>6}  ms p50/p99/heard: rayaccel | NIXL | NIXL none")
    for cache in args.caches.split(","):
        block_bytes, blocks = (int(x) for x in cache.split("x"))
        requests = ",".join(k for k in REQUESTS.get(block_bytes, "8,32,64").split(",")
                            if int(k) <= blocks)
        common = ["--layers", str(args.layers), "--blocks", str(blocks), "--block-bytes",
                  str(block_bytes), "--requests", requests, "--iters", str(args.iters)]
        results = {}
        try:
            # its address, then a descriptor per region
            results["rayaccel"] = run_pair(owner + [tool, "prefill"] + common,
                                           reader + [tool, "decode"] + common,
                                           1 + 2 * args.layers)
        except Exception as e:  # noqa: BLE001 - reported, the rest still runs
            print(f"  rayaccel {cache}: {e}", file=sys.stderr)
        for mode in ([] if args.skip_nixl else ["peer", "none"]):
            script = [python, os.path.join(HERE, "nixl_kv.py"), "--error-mode", mode]
            try:
                # its metadata, then its descriptors
                results[mode] = run_pair(owner + script + ["--role", "prefill"] + common,
                                         reader + script + ["--role", "decode"] + common, 2)
            except Exception as e:  # noqa: BLE001
                print(f"  NIXL ({mode}) {cache}: {e}", file=sys.stderr)
        for k in (int(x) for x in requests.split(",")):
            rows = {name: r.get(k) for name, r in results.items()}
            print(format_row(block_bytes, k, args.layers, rows), flush=True)


def format_row(block_bytes, k, layers, rows):
    def gbps(r):
        return f"{r['bandwidth_bytes_per_s'] / 1e9:7.2f}" if r else f"{'n/a':>7}"

    def ratio(r):
        ours = rows.get("rayaccel")
        if not (r and ours):
            return f"{'n/a':>6}"
        return f"{ours['bandwidth_bytes_per_s'] / r['bandwidth_bytes_per_s']:5.2f}x"

    def lat(r):
        if not r:
            return "n/a"
        heard = r["notified_us"]
        h = f"{heard[len(heard) // 2] / 1e3:.1f}" if heard else "none"
        if r["missing_notifications"]:
            h += f" ({r['missing_notifications']} missing)"
        return f"{r['latency_us_p50'] / 1e3:.1f}/{r['latency_us_p99'] / 1e3:.1f}/{h}"

    mib = 2 * layers * k * block_bytes / (1 << 20)
    return (f"{block_bytes // 1024:>5}Ki {k:>6} {mib:>5.0f}  {gbps(rows.get('rayaccel')):>8} "
            f"{gbps(rows.get('peer'))} {gbps(rows.get('none'))} {ratio(rows.get('peer'))} "
            f"{ratio(rows.get('none'))}  {lat(rows.get('rayaccel'))} | {lat(rows.get('peer'))} | "
            f"{lat(rows.get('none'))}")


def veth():
    """Two network namespaces joined by a veth pair, removed at exit; the command prefixes that
    run the prefill in one and the decode in the other, TCP on the veth alone."""
    import atexit
    pid = os.getpid()
    a, b, va, vb = f"rxka{pid}", f"rxkb{pid}", f"rxkva{pid}", f"rxkvb{pid}"

    def sh(cmd):
        subprocess.run(shlex.split(cmd), check=True)

    sh(f"ip netns add {a}")
    sh(f"ip netns add {b}")
    atexit.register(lambda: [subprocess.run(["ip", "netns", "del", n]) for n in (a, b)])
    sh(f"ip link add {va} type veth peer name {vb}")
    sh(f"ip link set {va} netns {a}")
    sh(f"ip link set {vb} netns {b}")
    sh(f"ip -n {a} addr add 10.231.10.1/24 dev {va}")
    sh(f"ip -n {b} addr add 10.231.10.2/24 dev {vb}")
    for ns, dev in ((a, va), (b, vb)):
        sh(f"ip -n {ns} link set lo up")
        sh(f"ip -n {ns} link set {dev} up")

    def prefix(ns, dev):
        return ["ip", "netns", "exec", ns, "env", "UCX_TLS=tcp", f"UCX_NET_DEVICES={dev}",
                "RAYACCEL_TRANSPORT_SAME_HOST=0"]
    return prefix(a, va), prefix(b, vb)


if __name__ == "__main__":
    main()
