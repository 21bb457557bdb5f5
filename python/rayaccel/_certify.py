"""Tier 5 of the conformance suite, "certified in Ray": a plugin inside a real Ray on this host.

`rayaccel-conformance PLUGIN.so --tier 5` runs this module with a Python that has Ray
(python -m rayaccel._certify ...) and reads the JSON it writes: one entry per check of the
suite's table (src/conformance/checks.cc, the ray.* rows), each with a status, a message and
its figures. Nothing here judges a tier; the suite does.

Ray runs as this module starts it and is stopped at the end: a head without accelerators and
two raylets started from what `rayaccel ray-start-args` (and `--env`) prints for the plugin,
rayaccel's managers in Ray's processes (RAYACCEL_RAY_MANAGERS), all under the folder --root
names (Ray's temp dir, HOME), with authentication off, so that nothing is left in ~/.ray or
/tmp/ray for another Ray to pick up. The suite runs this in a process group of its own, kills
what is left of the group and removes the folder after.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import subprocess
import sys
import time
import traceback
from typing import Dict, List, Optional

CHECKS = ["ray.start_accepted", "ray.one_device_per_task", "ray.distributed_workload",
          "ray.recovery", "ray.perf"]


def _bus(text: str) -> str:
    """A PCI address as dddd:bb:dd.f, lower case ("00000000:1B:00.0" -> "0000:1b:00.0")."""
    try:
        domain, bus, rest = text.strip().split(":")
        device, function = rest.split(".")
        return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}." \
               f"{int(function, 16):x}"
    except ValueError:
        return text


def _first_device_bus(kind: str, library: str) -> str:
    """In a worker: the PCI address of device 0 as the vendor's runtime there sees it (the
    runtime honours the visible-devices variable Ray set)."""
    import ctypes
    lib = ctypes.CDLL(library)
    out = ctypes.create_string_buffer(64)
    if kind == "cuda":
        device = ctypes.c_int()
        if lib.cuInit(0) != 0 or lib.cuDeviceGet(ctypes.byref(device), 0) != 0:
            return "none (the runtime opens no device)"
        rc = lib.cuDeviceGetPCIBusId(out, 64, device)
    else:
        rc = lib.hipDeviceGetPCIBusId(out, 64, 0)
    return _bus(out.value.decode()) if rc == 0 else f"none (error {rc})"


def _cause(error: BaseException) -> str:
    """The innermost error's own words: Ray wraps an actor's exception in a RayTaskError whose
    text starts with the actor's call and colour codes."""
    import re
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error))
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    last = lines[-1] if lines else ""
    return f"{type(error).__name__}: {last}"[:500]


def result(status: str, message: str = "", **figures) -> dict:
    return {"status": status, "message": message, "figures": figures}


class NotRun(Exception):
    """A check that cannot run here (a capability the plugin lacks): a skip with the reason."""


class Certifier:
    def __init__(self, args):
        self.args = args
        self.plugin = os.path.abspath(args.plugin)
        self.config = dict(c.split("=", 1) for c in args.config)
        self.root = args.root
        self.cluster = None
        self.nodes: List[str] = []
        self.printed: Dict[str, str] = {}
        self.info: dict = {}

    # What rayaccel says of the plugin.

    def rayaccel(self, *words, env=None) -> subprocess.CompletedProcess:
        return subprocess.run([self.args.rayaccel, *words, "--plugin", self.plugin,
                               "--no-host-topology",
                               *[a for k, v in self.config.items() for a in ("--config",
                                                                             f"{k}={v}")]],
                              capture_output=True, text=True, timeout=self.args.timeout,
                              env=env)

    def describe(self):
        out = self.rayaccel("plugins", "--json")
        if out.returncode != 0:
            raise RuntimeError(f"rayaccel plugins: {out.stderr.strip()}")
        self.info = json.loads(out.stdout)["plugins"][0]
        args = self.rayaccel("ray-start-args")
        env = self.rayaccel("ray-start-args", "--env")
        for name, got in (("ray-start-args", args), ("ray-start-args --env", env)):
            if got.returncode != 0:
                raise RuntimeError(f"rayaccel {name}: {got.stderr.strip()}")
        self.printed = {"args": args.stdout.strip(), "env": env.stdout.strip()}

    def node_environment(self) -> Dict[str, str]:
        """What a raylet of the plugin starts with: what `--env` printed, rayaccel's managers,
        the plugin alone on the search path, its configuration, and its transport."""
        env = dict(pair.split("=", 1) for pair in shlex.split(self.printed["env"]))
        folder = os.path.join(self.root, "plugins")
        os.makedirs(folder, exist_ok=True)
        link = os.path.join(folder, os.path.basename(self.plugin))
        if not os.path.exists(link):
            os.symlink(self.plugin, link)
        name = self.info["name"].upper().replace("-", "_")
        env.update({"RAYACCEL_RAY_MANAGERS": "1", "RAYACCEL_PLUGIN_PATH": folder,
                    "RAYACCEL_TRANSPORT_PLUGIN": self.plugin,
                    "RAYACCEL_TRANSPORT_CONFIG": json.dumps(self.config)})
        for key, value in self.config.items():
            env[f"RAYACCEL_{name}_{key.upper()}"] = value
        return env

    def add_node_options(self) -> dict:
        from ray._private.label_utils import parse_node_labels_string
        options = {}
        for word in shlex.split(self.printed["args"]):
            flag, _, value = word.partition("=")
            if flag == "--num-gpus":
                options["num_gpus"] = int(value)
            elif flag == "--resources":
                options["resources"] = json.loads(value)
            elif flag == "--labels":
                options["labels"] = parse_node_labels_string(value)
        return options

    # Ray, started and stopped here.

    def start(self):
        import ray
        from ray.cluster_utils import Cluster
        # Ray's temp dir (sessions, sockets, ray_current_cluster) is $RAY_TMPDIR/ray.
        os.environ["RAY_TMPDIR"] = self.root
        # Ray gives up on an RDT object after its own fetch timeout (60 s by default), counted
        # from when the read is queued: on a loaded machine the ring's actors start slower than
        # that, and Ray's TimeoutError would hide which hop hung. The suite's bounds (the
        # longest is the first round's) come first; a user's own setting is kept.
        longest = self.args.timeout * 6 + 10 * 8
        os.environ.setdefault("RAY_rdt_fetch_fail_timeout_milliseconds",
                              str(int((longest + 60) * 1000)))
        self.cluster = Cluster(initialize_head=True, head_node_args=dict(
            num_cpus=1, include_dashboard=False))
        options = self.add_node_options()
        saved = dict(os.environ)
        try:
            os.environ.update(self.node_environment())
            for _ in range(2):
                self.nodes.append(self.cluster.add_node(num_cpus=1, **options).node_id)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        ray.init(address=self.cluster.address)
        self.cluster.wait_for_nodes()
        return options

    def stop(self):
        import ray
        if getattr(self, "registry", None) is not None:
            with contextlib.suppress(Exception):
                self.registry.close()
        with contextlib.suppress(Exception):
            ray.shutdown()
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.shutdown()

    # The checks.

    def start_accepted(self) -> dict:
        import ray
        try:
            options = self.start()
        except Exception as e:  # Ray refused what rayaccel printed
            return result("fail", f"Ray refused `ray start {self.printed['args']}`: "
                                  f"{type(e).__name__}: {e}")
        wanted = dict(options.get("resources", {}))
        if "num_gpus" in options:
            wanted["GPU"] = options["num_gpus"]
        by_id = {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}
        for node_id in self.nodes:
            node = by_id.get(node_id)
            if node is None:
                return result("fail", f"the raylet {node_id[:12]} is not alive in Ray")
            theirs = {k: v for k, v in node["Resources"].items()
                      if k not in ("CPU", "memory", "object_store_memory")
                      and not k.startswith("node:")}
            if theirs != wanted:
                return result("fail", f"Ray shows {theirs}, rayaccel printed {wanted}")
            labels = dict(options.get("labels", {}), **{"ray.io/node-id": node_id})
            if node["Labels"] != labels:
                missing = {k: v for k, v in labels.items() if node["Labels"].get(k) != v}
                return result("fail", f"Ray's labels differ from rayaccel's: {missing}")
        return result("pass", f"{len(self.nodes)} raylets with {wanted} and "
                              f"{len(options.get('labels', {}))} labels",
                      **{"ray.start_s": round(time.monotonic() - self.t0, 3)})

    def family(self):
        options = self.add_node_options()
        resource = self.info["resource"]
        count = options.get("num_gpus") if resource == "GPU" else \
            options.get("resources", {}).get(resource)
        return resource, int(count or 0), self.info.get("visible_devices_env", "")

    def one_device_per_task(self) -> dict:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        resource, count, variable = self.family()
        if count == 0:
            raise NotRun("the plugin gives Ray no device here")
        barrier = os.path.join(self.root, "barrier")
        os.makedirs(barrier)

        @ray.remote(num_cpus=0)
        def held(folder, parties, resource, variable, runtime=None):
            open(os.path.join(folder, str(os.getpid())), "w").close()
            deadline = time.time() + 60
            while len(os.listdir(folder)) < parties and time.time() < deadline:
                time.sleep(0.02)
            ids = ray.get_runtime_context().get_accelerator_ids().get(resource, [])
            return sorted(str(i) for i in ids), os.environ.get(variable), \
                _first_device_bus(*runtime) if runtime else None

        request = {"num_gpus": 1} if resource == "GPU" else {"resources": {resource: 1}}
        strategy = NodeAffinitySchedulingStrategy(self.nodes[0], soft=False)
        # Where the plugin's devices have a runtime that honours the variable (CUDA's driver,
        # HIP's), the device a worker opens through it must be the one Ray assigned.
        runtime = ("cuda", self.config["cuda_library"]) if "cuda_library" in self.config else \
            ("hip", self.config["hip_library"]) if "hip_library" in self.config else None
        # Ray starts the workers one at a time on a one-CPU raylet (a few seconds each here).
        starting = self.args.timeout * 6 + 10 * count
        got = ray.get([held.options(scheduling_strategy=strategy, **request).remote(
            barrier, count, resource, variable, runtime) for _ in range(count)],
            timeout=starting)
        # The node's device ids are the visible-devices variable `--env` printed (Ray reads them
        # at start), else 0..N-1; the worker's variable must name the device Ray assigned.
        env = dict(pair.split("=", 1) for pair in shlex.split(self.printed["env"]))
        node_ids = env[variable].split(",") if env.get(variable) else \
            [str(i) for i in range(count)]
        seen = []
        buses = {str(d.index): _bus(d.pci_bus_id) for d in self._registry().snapshot().devices
                 if d.plugin == self.info["name"]}
        opened = 0
        for ids, visible, bus in got:
            if runtime and bus != buses.get(ids[0] if ids else ""):
                return result("fail", f"Ray assigned {resource} {ids}, and the device the "
                                      f"worker opens through {runtime[0]} is at PCI {bus}, not "
                                      f"{buses.get(ids[0] if ids else '')}")
            opened += bool(runtime)
        for ids, visible, _ in got:
            if len(ids) != 1:
                return result("fail", f"a task asking one {resource} was given {ids}")
            if visible is None:
                return result("fail", f"a task given {resource} {ids[0]} has no {variable}: "
                                      "nothing set the device Ray assigned")
            if visible.split(",") != ids:
                return result("fail", f"Ray assigned {resource} {ids[0]}, and the worker's "
                                      f"{variable}={visible} names another device")
            seen.append(ids[0])
        if sorted(seen) != sorted(node_ids):
            return result("fail", f"{count} tasks at once were given {sorted(seen)}, not each of "
                                  f"the node's devices {node_ids} once")
        # What the plugin's prepare_allocation gives each device is what the worker has.
        expected = self.prepared(variable)
        for ids, visible, _ in got:
            want = expected.get(ids[0])
            if want is not None and visible != want:
                return result("fail", f"the worker given {resource} {ids[0]} has "
                                      f"{variable}={visible}; the plugin's prepare_allocation "
                                      f"gives {variable}={want} for that device")
        # A fraction, where the family takes one (Ray's rule and the plugin's validate_quantity,
        # as rayaccel's managers apply them): two halves at once, each given one device.
        fraction = ""
        from .ray import _validate
        registry = self._registry()
        if _validate(registry.snapshot, resource, 0.5, registry)[0]:
            halves = os.path.join(self.root, "halves")
            os.makedirs(halves)
            half = {"num_gpus": 0.5} if resource == "GPU" else {"resources": {resource: 0.5}}
            got = ray.get([held.options(scheduling_strategy=strategy, **half).remote(
                halves, 2, resource, variable) for _ in range(2)],
                timeout=self.args.timeout * 6 + 20)
            for ids, visible, _ in got:
                if len(ids) != 1 or visible is None or visible.split(",") != ids:
                    return result("fail", f"a task asking half a {resource} was given {ids} and "
                                          f"{variable}={visible}")
            fraction = "; two halves at once, each one device"
        through = f"; each opened it through {runtime[0]}" if opened else ""
        return result("pass", f"{count} tasks at once, each given one {resource} that its "
                              f"{variable} names, as prepare_allocation says{through}{fraction}",
                      **{"ray.tasks": float(count)})

    def _registry(self):
        """The plugin, loaded here (in a child of its own) with its configuration."""
        if getattr(self, "registry", None) is None:
            from .registry import Registry
            name = self.info["name"]
            self.registry = Registry(plugins=[self.plugin], host_topology=False,
                                     use_environment=False,
                                     config={f"{name}.{k}": v for k, v in self.config.items()})
        return self.registry

    def prepared(self, variable) -> Dict[str, str]:
        """Ray's id of each device (its index) -> what prepare_allocation sets `variable` to."""
        registry = self._registry()
        snap = registry.snapshot()
        out = {}
        for d in snap.devices:
            if d.plugin != self.info["name"]:
                continue
            try:
                env = registry.prepare_allocation([d.id], snap.generation)
            except Exception:
                continue
            if variable in env:
                out[str(d.index)] = env[variable]
        return out

    def transport_ready(self):
        if "transport" not in self.info.get("capabilities", []):
            raise NotRun("the plugin has no transport (tier 3)")
        if getattr(self, "stuck", None):  # its actors are still waiting on it
            raise NotRun(f"not run: the transport hung ({self.stuck})")

    def ring(self):
        """One actor per device (up to 8; two for one), on both raylets in turn."""
        import numpy as np
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        from rayaccel.transport import TensorTransport
        from ray.experimental.rdt import util as rdt
        if "RAYACCEL_NUMPY" not in rdt.transport_manager_info:
            ray.experimental.register_tensor_transport("RAYACCEL_NUMPY", ["cpu"],
                                                       TensorTransport, np.ndarray)

        @ray.remote(num_cpus=0, enable_tensor_transport=True, max_restarts=1)
        class Hop:
            def pid(self):
                return os.getpid()

            @ray.method(tensor_transport="RAYACCEL_NUMPY")
            def make(self, nbytes, seed):
                return np.random.default_rng(seed).integers(0, 255, nbytes, dtype=np.uint8)

            def take(self, array, seed):
                want = np.random.default_rng(seed).integers(0, 255, array.size, dtype=np.uint8)
                return bool(np.array_equal(array, want)), int(array.size)

            def timed(self, array):
                return time.perf_counter()

            def registered(self):
                from ray.experimental.rdt.util import get_tensor_transport_manager
                return get_tensor_transport_manager("RAYACCEL_NUMPY").stats().get(
                    "registered_bytes", 0)

        _, count, _ = self.family()
        n = max(2, min(8, count or 2))
        return Hop, [Hop.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            self.nodes[i % 2], soft=False)).remote() for i in range(n)]

    def distributed_workload(self) -> dict:
        import ray
        self.transport_ready()
        _, actors = self.ring()
        self.actors = actors
        sizes = (4 << 10, 1 << 20, 8 << 20)  # a round each
        for r, nbytes in enumerate(sizes):
            refs = [actors[i].make.remote(nbytes, r * 100 + i) for i in range(len(actors))]
            checks = [actors[(i + 1) % len(actors)].take.remote(refs[i], r * 100 + i)
                      for i in range(len(actors))]
            # The first round also starts the ring's actors (one at a time, seconds each).
            bound = self.args.timeout * 6 + (10 * len(actors) if r == 0 else 0)
            ready, _ = ray.wait(checks, num_returns=len(checks), timeout=bound)
            for i, check in enumerate(checks):
                hop = f"round {r} ({nbytes} bytes), hop {i} -> {(i + 1) % len(actors)}"
                if check not in ready:
                    self.stuck = f"{hop} was not done within {bound:g} s"
                    return result("fail", self.stuck)
                try:
                    same, size = ray.get(check)
                except Exception as e:
                    return result("fail", f"{hop}: {_cause(e)}")
                if not same or size != nbytes:
                    return result("fail", f"{hop}: {size} bytes arrived, "
                                          f"{'equal' if same else 'not the bytes sent'}")
        return result("pass", f"{len(sizes)} rounds around a ring of {len(actors)} actors on two "
                              f"raylets (4 KiB, 1 MiB, 8 MiB a hop), every hop's bytes verified",
                      **{"ray.ring_actors": float(len(actors))})

    def recovery(self) -> dict:
        import ray
        self.transport_ready()
        actors = getattr(self, "actors", None) or self.ring()[1]
        source, reader = actors[0], actors[1]
        ref = source.make.remote(64 << 20, 7)
        ray.wait([ref], fetch_local=False, timeout=self.args.timeout * 3)
        pid = ray.get(source.pid.remote())
        start = time.monotonic()
        os.kill(pid, 9)
        try:
            ray.get(reader.take.remote(ref, 7), timeout=self.args.timeout * 6)
            return result("fail", "a read from a killed source succeeded")
        except ray.exceptions.GetTimeoutError:
            return result("fail", "a read from a killed source did not fail within "
                                  f"{self.args.timeout * 6} s")
        except Exception as e:  # the lost peer, as Ray reports it
            failed_after = time.monotonic() - start
            why = _cause(e)
        # Ray restarts the source (max_restarts=1); the next round must complete.
        deadline = time.monotonic() + self.args.timeout * 6
        while True:
            try:
                if ray.get(source.pid.remote(), timeout=10) != pid:
                    break
            except Exception:
                pass
            if time.monotonic() > deadline:
                return result("fail", "the killed source was not restarted by Ray")
            time.sleep(0.2)
        try:
            same, _ = ray.get(reader.take.remote(source.make.remote(1 << 20, 8), 8),
                              timeout=self.args.timeout * 6)
        except Exception as e:
            return result("fail", f"the restarted source could not serve a read: {_cause(e)}")
        if not same:
            return result("fail", "the restarted source's bytes arrived changed")
        return result("pass", f"the reader failed {failed_after:.1f} s after its source was "
                              f"killed ({why[:160]}); the restarted source served the next read",
                      **{"ray.recovery_s": round(failed_after, 3)})

    def perf(self) -> dict:
        import ray
        if not self.args.perf:
            return result("skip", "measured with --perf")
        self.transport_ready()
        actors = getattr(self, "actors", None) or self.ring()[1]
        figures = {}
        for name, nbytes, reps in (("1mib", 1 << 20, 20), ("64mib", 64 << 20, 5)):
            times = []
            for rep in range(reps):
                ref = actors[0].make.remote(nbytes, rep)
                ray.wait([ref], fetch_local=False)
                start = time.perf_counter()
                ray.get(actors[1].timed.remote(ref))
                times.append(time.perf_counter() - start)
            times.sort()
            p50 = times[len(times) // 2]
            figures[f"ray.hop_{name}_gbps"] = round(nbytes / p50 / 1e9, 4)
            figures[f"ray.hop_{name}_p50_us"] = round(p50 * 1e6, 1)
        return result("pass", ", ".join(f"{k} {v}" for k, v in figures.items()), **figures)

    def run(self, save) -> dict:
        """Runs the checks in order; `save(out)` after each, so that a run cut short still
        says what it found."""
        import ray
        self.t0 = time.monotonic()
        out = {"ray_version": ray.__version__, "python": sys.version.split()[0], "checks": {}}
        try:
            self.describe()
        except Exception as e:
            for name in CHECKS:
                out["checks"][name] = result("fail", f"rayaccel cannot describe the plugin: {e}")
            return out
        gate = None
        for name in CHECKS:
            if gate is not None:
                out["checks"][name] = result("skip", f"not run: {gate} failed")
                continue
            started = time.monotonic()
            try:
                got = getattr(self, name.split(".", 1)[1])()
            except NotRun as e:
                got = result("skip", str(e))
            except Exception as e:
                got = result("fail", f"{_cause(e)} "
                                     f"({traceback.extract_tb(e.__traceback__)[-1].name})")
            got["seconds"] = round(time.monotonic() - started, 3)
            out["checks"][name] = got
            save(out)
            if name == "ray.start_accepted" and got["status"] != "pass":
                gate = name
        return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rayaccel._certify")
    parser.add_argument("--plugin", required=True)
    parser.add_argument("--config", action="append", default=[])
    parser.add_argument("--rayaccel", required=True, help="the rayaccel command")
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--perf", action="store_true")
    parser.add_argument("--out", required=True)
    parser.add_argument("--root", required=True,
                        help="a folder of this run's own (Ray's temp dir, HOME); the caller "
                             "removes it")
    args = parser.parse_args(argv)
    # Ray's processes, and anything Ray writes for its user, stay in the run's folder.
    home = os.path.join(args.root, "home")
    os.makedirs(home, exist_ok=True)
    os.environ.update({"HOME": home, "RAY_AUTH_MODE": "disabled",
                       "RAY_USAGE_STATS_ENABLED": "0", "RAY_TMPDIR": args.root})
    def save(out):
        with open(args.out + ".tmp", "w") as f:
            json.dump(out, f)
        os.replace(args.out + ".tmp", args.out)

    certifier = Certifier(args)
    try:
        save(certifier.run(save))
    finally:
        certifier.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
