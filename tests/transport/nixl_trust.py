#!/usr/bin/env python3
"""The transport's trust attacks, run on NIXL (Ray's own RDT backend) and on rayaccel's
transport side by side, each outcome measured (docs/transport.md, "Side by side with NIXL").

An owner registers 1 MiB of host memory and hands a reader a descriptor for the first 4 KiB,
as an RDT source names one tensor. Then:

  stranger     a process that was handed nothing but the owner's address (NIXL: its agent
               metadata, what its metadata listener serves to anyone; rayaccel: the endpoint
               address) reads the named 4 KiB with no credential of its own (rayaccel: another
               transport key).
  beyond       the reader reads 4 KiB past what it was named, inside the owner's registration
               (NIXL: a descriptor of its own making; rayaccel: the descriptor's range moved).
  past         the reader reads past the end of the registration.
  listener     (NIXL alone: rayaccel has no metadata service) an agent with NIXL's metadata
               listener: which addresses it binds, and whether a stranger's agent, with no
               credential, is sent the metadata that row "stranger" needs.
  code         the descriptor bytes a reader is handed are a pickle that opens a file when
               loaded (NIXL: deserialize_descs is pickle.loads; rayaccel: the bytes go where a
               descriptor goes).
  stopped      the owner is stopped (SIGSTOP) before the reader reads: how long until the read
               fails, or whether it completes without the owner (a read still waiting after
               30 s counts as a hang).

Prints one line per attack and transport, "ATTACK TRANSPORT: OUTCOME", and exits 1 when an
outcome differs from the one expected below (the table docs/transport.md shows), so that a
change on either side is noticed. Test-side only: not installed.

Usage: nixl_trust.py BUILD_DIR  (run with build/venv's python: nixl-cu12 and rayaccel)
"""

import base64
import json
import os
import pickle
import signal
import subprocess
import sys
import time

SIZE, NAMED = 1 << 20, 4096
HANG_S = 30

EXPECTED = {
    ("stranger", "nixl"): "read: the bytes arrived",
    ("stranger", "nixl-none"): "read: the bytes arrived",
    ("stranger", "rayaccel"): "refused: UnauthenticatedError",
    ("beyond", "nixl"): "read: the bytes arrived",
    ("beyond", "rayaccel"): "refused: InvalidArgumentError",
    ("past", "nixl"): "refused by the reader's own NIXL",
    ("past", "rayaccel"): "refused: InvalidArgumentError",
    ("listener", "nixl"): "binds every address; served its metadata to a stranger",
    ("code", "nixl"): "ran the peer's code",
    ("code", "rayaccel"): "refused: InvalidArgumentError",
    ("stopped", "nixl"): "hang",
    # One-sided over CMA: the reader copies out of the stopped owner, which takes no part.
    ("stopped", "nixl-none"): "read: the bytes arrived",
    ("stopped", "rayaccel"): "failed within 2 s + 3: UnavailableError",
}


# --- NIXL -----------------------------------------------------------------------------------

def nixl_agent(name, mode):
    from nixl_cu12._api import nixl_agent as agent, nixl_agent_config
    a = agent(name, nixl_agent_config(backends=[]))
    a.create_backend("UCX", {} if mode == "peer" else {"ucx_error_handling_mode": mode})
    return a


def nixl_owner(mode):
    """The owner: registers SIZE bytes of 0x5a, prints its metadata and the descriptor of the
    first NAMED bytes, then waits on stdin."""
    import numpy as np
    a = nixl_agent("owner", mode)
    buf = np.full(SIZE, 0x5A, dtype=np.uint8)
    a.register_memory([(buf.ctypes.data, SIZE, 0, "")], "DRAM")
    named = a.get_xfer_descs([(buf.ctypes.data, NAMED, 0)], "DRAM")
    info = {"metadata": base64.b64encode(a.get_agent_metadata()).decode(),
            "named": base64.b64encode(a.get_serialized_descs(named)).decode(),
            "base": buf.ctypes.data, "pid": os.getpid()}
    print("OUTCOME " + json.dumps(info), flush=True)
    sys.stdin.readline()


def nixl_reader(mode, attack, owner):
    """Reads as `attack` says from the owner described by `owner`; prints the outcome."""
    import numpy as np
    a = nixl_agent("reader", mode)
    peer = a.add_remote_agent(base64.b64decode(owner["metadata"]))
    length = NAMED
    if attack == "code":
        try:
            a.deserialize_descs(code_payload(owner["marker"]))
        except Exception:  # noqa: BLE001 - what it returned is no descriptor list
            pass
        print("OUTCOME " + ("ran the peer's code" if os.path.exists(owner["marker"]) else "refused"),
              flush=True)
        return
    if attack == "stranger":
        remote = a.deserialize_descs(base64.b64decode(owner["named"]))
    elif attack == "beyond":
        remote = a.get_xfer_descs([(owner["base"] + NAMED, NAMED, 0)], "DRAM")
    elif attack == "past":
        remote = a.get_xfer_descs([(owner["base"] + SIZE - NAMED // 2, NAMED, 0)], "DRAM")
    else:  # stopped: a large read
        length = SIZE
        remote = a.get_xfer_descs([(owner["base"], SIZE, 0)], "DRAM")
    buf = np.zeros(length, dtype=np.uint8)
    a.register_memory([(buf.ctypes.data, length, 0, "")], "DRAM")
    local = a.get_xfer_descs([(buf.ctypes.data, length, 0)], "DRAM")
    try:
        handle = a.initialize_xfer("READ", local, remote, peer)
    except Exception:  # noqa: BLE001 - the reader's NIXL checks the range against the metadata
        print("OUTCOME refused by the reader's own NIXL", flush=True)
        return
    if attack == "stopped":
        print("OUTCOME ready", flush=True)
        sys.stdin.readline()  # the owner is stopped now
    state = a.transfer(handle)
    while state == "PROC":
        state = a.check_xfer_state(handle)
    if state != "DONE":
        print(f"OUTCOME failed: {state}", flush=True)
    elif (buf == 0x5A).all():
        print("OUTCOME read: the bytes arrived", flush=True)
    else:
        print("OUTCOME done, other bytes", flush=True)


class _OpensAFile:
    """Unpickled, it opens (creates) a file: any code a pickle names runs the same way."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def code_payload(marker):
    return pickle.dumps(_OpensAFile(marker))


def marker_path():
    import tempfile
    return os.path.join(tempfile.mkdtemp(prefix="nixl-trust-"), "the-peer-ran-code")


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nixl_listener():
    """An owner with NIXL's metadata listener, and a stranger's agent that asks it."""
    from nixl_cu12._api import nixl_agent as agent, nixl_agent_config
    port = free_port()
    owner = agent("owner", nixl_agent_config(enable_listen_thread=True, listen_port=port))
    time.sleep(0.5)
    rows = [line.split() for line in open("/proc/net/tcp").read().splitlines()[1:]]
    binds = {r[1].split(":")[0] for r in rows
             if r[3] == "0A" and int(r[1].split(":")[1], 16) == port}
    where = "binds every address" if binds == {"00000000"} else f"binds {sorted(binds)}"
    # NIXL answers a fetch to the asker's own listener.
    stranger = agent("stranger", nixl_agent_config(enable_listen_thread=True,
                                                   listen_port=free_port()))
    stranger.fetch_remote_metadata("owner", "127.0.0.1", port)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if stranger.check_remote_metadata("owner"):
            print(f"OUTCOME {where}; served its metadata to a stranger", flush=True)
            return owner
        time.sleep(0.05)
    print(f"OUTCOME {where}; sent a stranger nothing", flush=True)
    return owner


def run_nixl(attack, mode):
    me = [sys.executable, __file__]
    if attack == "listener":
        out = subprocess.run(me + ["--nixl-listener"], capture_output=True, text=True,
                             timeout=60)
        # NIXL and its UCX print their own log lines on stdout too.
        lines = [l[len("OUTCOME "):] for l in out.stdout.splitlines() if l.startswith("OUTCOME ")]
        return lines[-1] if lines else f"no answer: {out.stdout[-200:]} {out.stderr[-200:]}"
    owner = subprocess.Popen(me + ["--nixl-owner", mode], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    reader = None
    try:
        info = json.loads(wait_line(owner, HANG_S) or "{}")
        info["marker"] = marker_path()
        info = json.dumps(info)
        reader = subprocess.Popen(me + ["--nixl-reader", mode, attack, info.strip()],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True)
        if attack == "stopped":
            if wait_line(reader, HANG_S) != "ready":
                return "the reader could not start"
            os.kill(owner.pid, signal.SIGSTOP)
            reader.stdin.write("go\n")
            reader.stdin.flush()
            start = time.monotonic()
            try:
                line = wait_line(reader, HANG_S)
            finally:
                os.kill(owner.pid, signal.SIGCONT)
            if line is None:
                return "hang"
            return f"{line} after {time.monotonic() - start:.0f} s"
        line = wait_line(reader, HANG_S)
        return "hang" if line is None else line
    finally:
        for p in (reader, owner):
            if p is not None:
                p.kill()
                p.wait()


def wait_line(proc, seconds):
    """The process's next outcome line ("OUTCOME ..."; NIXL and its UCX print their own log
    lines on stdout too), or None after `seconds`."""
    import selectors
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not sel.select(left):
            return None
        line = proc.stdout.readline()
        if not line:
            return "no answer (the reader died)"
        if line.startswith("OUTCOME "):
            return line[len("OUTCOME "):].strip()


# --- rayaccel -------------------------------------------------------------------------------

def rayaccel_owner():
    """An owner through rayaccel's Python transport, as its RDT source registers a tensor: the
    first NAMED bytes of SIZE bytes of 0x5a, and their metadata."""
    import numpy as np
    from rayaccel.transport import TensorTransport
    t = TensorTransport(peer_timeout=2.0)
    buf = np.full(SIZE, 0x5A, dtype=np.uint8)
    meta = t.extract_tensor_transport_metadata("obj", [buf[:NAMED]])
    print(base64.b64encode(pickle.dumps(meta)).decode(), flush=True)
    sys.stdin.readline()


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def widened(descriptor, length):
    """The descriptor with the region's length set to `length` and its checksum made again
    (docs/transport.md, "Descriptors": the checksum catches corruption, not forgery)."""
    d = bytearray(descriptor)
    d[32:40] = length.to_bytes(8, "little")
    d[12:16] = crc32c(bytes(d[16:])).to_bytes(4, "little")
    return bytes(d)


def run_rayaccel(attack):
    import numpy as np
    import rayaccel
    from rayaccel.transport import TensorTransport
    owner = subprocess.Popen([sys.executable, __file__, "--rayaccel-owner"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        meta = pickle.loads(base64.b64decode(owner.stdout.readline()))
        reader = TensorTransport(peer_timeout=2.0,
                                 key=os.urandom(32) if attack == "stranger" else None)
        marker = marker_path()
        if attack == "code":
            meta.descriptors[0] = code_payload(marker)
        if attack in ("beyond", "past"):
            n = 2 * NAMED if attack == "beyond" else SIZE + NAMED
            meta.descriptors[0] = widened(meta.descriptors[0], n)
            meta.tensor_meta, meta.nbytes = [((n,), np.dtype(np.uint8))], [n]
        start = time.monotonic()
        if attack == "stopped":
            os.kill(owner.pid, signal.SIGSTOP)
        try:
            [got] = reader.recv_multiple_tensors("obj", meta, None)
            return "read: the bytes arrived" if bytes(got[:4]) == b"\x5a" * 4 else "other bytes"
        except rayaccel.Error as e:
            if os.path.exists(marker):
                return "ran the peer's code"
            took = time.monotonic() - start
            if attack == "stopped":
                return f"failed within 2 s + 3: {type(e).__name__}" if took < 5 else \
                    f"failed after {took:.0f} s: {type(e).__name__}"
            return f"refused: {type(e).__name__}"
        finally:
            if attack == "stopped":
                os.kill(owner.pid, signal.SIGCONT)
    finally:
        owner.kill()
        owner.wait()


def main():
    if sys.argv[1] == "--nixl-owner":
        return nixl_owner(sys.argv[2])
    if sys.argv[1] == "--nixl-reader":
        return nixl_reader(sys.argv[2], sys.argv[3], json.loads(sys.argv[4]))
    if sys.argv[1] == "--rayaccel-owner":
        return rayaccel_owner()
    if sys.argv[1] == "--nixl-listener":
        nixl_listener()
        sys.stdout.flush()
        os._exit(0)  # NIXL's agents crash in their teardown at exit here
    os.environ.setdefault("NIXL_LOG_LEVEL", "ERROR")
    wrong = 0
    for attack in ("stranger", "listener", "beyond", "past", "code", "stopped"):
        for transport in ("nixl", "nixl-none", "rayaccel"):
            if (attack, transport) not in EXPECTED:
                continue
            if transport == "rayaccel":
                got = run_rayaccel(attack)
            else:
                got = run_nixl(attack, "none" if transport == "nixl-none" else "peer")
            want = EXPECTED[(attack, transport)]
            ok = got == want or (attack == "stopped" and got.startswith(want + " after"))
            wrong += not ok
            print(f"{attack} {transport}: {got}" + ("" if ok else f"   (expected: {want})"),
                  flush=True)
    print(f"{len(EXPECTED) - wrong} passed, {wrong} failed")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
