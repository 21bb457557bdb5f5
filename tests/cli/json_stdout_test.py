#!/usr/bin/env python3
"""Every --json command's standard output is JSON alone, whatever UCX is told to use: UCX
prints its own log lines (errors included) on stdout unless told otherwise, and a program
reading the JSON would fail on them. Each UCX_TLS value the docs mention, with the transfer
(read and write, where UCX logs most), discover, plugins, resources, topo and the conformance
suite's transport tier.

Usage: json_stdout_test.py BUILD_DIR SOURCE_DIR
"""

import json
import os
import subprocess
import sys
import tempfile
import time

BUILD, SOURCE = sys.argv[1], sys.argv[2]
RAYACCEL = os.path.join(BUILD, "bin", "rayaccel")
SUITE = os.path.join(BUILD, "bin", "rayaccel-conformance")
SIM = os.path.join(BUILD, "lib", "rayaccel", "plugins", "librayaccel-sim.so")
SPEC = os.path.join(SOURCE, "examples", "dgx-h100.json")
TRANSPORTS = ["posix,cma,self", "posix,sysv,self,tcp", "tcp", "all"]

failures = []


def check(what, args, env):
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    try:
        json.loads(out.stdout)
    except ValueError as e:
        failures.append(f"UCX_TLS={env['UCX_TLS']} {what}: stdout is not JSON ({e}): "
                        f"{out.stdout[:300]!r}")
    return out


for tls in TRANSPORTS:
    env = dict(os.environ, UCX_TLS=tls)
    env.pop("UCX_LOG_FILE", None)
    for command in ("discover", "plugins", "resources", "topo"):
        check(command, [RAYACCEL, command, "--json", "--no-host-topology", "--config",
                        f"sim.spec={SPEC}"], env)
    with tempfile.TemporaryDirectory() as tmp:
        token = os.path.join(tmp, "token")
        server = subprocess.Popen([RAYACCEL, "transfer", "--serve", "--size", "64KiB",
                                   "--token-file", token], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 30
            while not (os.path.exists(token) and os.path.getsize(token) > 0):
                assert server.poll() is None and time.time() < deadline, "no token"
                time.sleep(0.05)
            for op in ("read", "write"):
                out = check(f"transfer --op {op}",
                            [RAYACCEL, "transfer", "--connect", open(token).read().strip(),
                             "--op", op, "--size", "64KiB", "--iters", "5", "--json"], env)
                if out.returncode != 0:
                    failures.append(f"UCX_TLS={tls} transfer --op {op} failed: {out.stderr}")
        finally:
            server.terminate()
            server.wait(timeout=30)
check("conformance --tier 3", [SUITE, SIM, "--config", f"spec={SPEC}", "--tier", "3", "--json"],
      dict(os.environ, UCX_TLS="posix,cma,self"))

for f in failures:
    print(f)
print(f"{len(failures)} failed: --json commands under UCX_TLS={', '.join(TRANSPORTS)}")
sys.exit(1 if failures else 0)
