"""rayaccel's accelerator managers in every Python process Ray starts.

Ray asks its accelerator managers in more processes than the one a user writes: the process
that starts a node resolves its resources (resource_and_label_spec.py), and every worker reads
its visible devices when `import ray` makes its Worker, and sets them before each task
(worker.py, utils.py).
None of them runs user code first, so an install() in the driver alone would leave the workers
with Ray's own managers.

rayaccel.pth (in the environment's site-packages) imports this module when any interpreter of
the environment starts. When RAYACCEL_RAY_MANAGERS is set, which rayaccel.ray.install() does
for the processes started after it (Ray's raylets and workers inherit it), it runs
rayaccel.ray.install() right after Ray's accelerator package has run, before any of Ray's code
asks a manager. Its value says where the node's snapshot comes from: "1" discovers locally with
the environment's configuration (RAYACCEL_CONFIG_FILE, RAYACCEL_<PLUGIN>_<KEY>); an agent's
address (unix:PATH, tcp://HOST:PORT, an absolute path) asks that agent; "0" (or "false",
"no", "off") keeps Ray's own managers in the processes started with it. Without the variable
this costs one lookup and imports nothing.

With the variable, Ray's dashboard agent also reports rayaccel's devices in Ray's own GPU
metrics (ray_node_gpus_utilization, ...) where Ray's NVIDIA and AMD providers find none
(rayaccel/_gpu_provider.py).

Whatever the variable says, rayaccel's RDT transports (RAYACCEL, RAYACCEL_NUMPY) join Ray's
lazily registered ones in every process, right after Ray's ray.experimental.rdt.util loads
(an actor Ray restarts can use them again). That imports nothing until a process uses RDT.
"""

import os
import sys

VARIABLE = "RAYACCEL_RAY_MANAGERS"
_ACCELERATORS = "ray._private.accelerators"
_RDT_UTIL = "ray.experimental.rdt.util"
_GPU_PROVIDERS = "ray.dashboard.modules.reporter.gpu_providers"


def _install() -> None:
    try:
        import rayaccel.ray
        rayaccel.ray.install()
    except Exception as e:  # Ray keeps its own managers; the process goes on
        import logging
        logging.getLogger("rayaccel").warning(
            "rayaccel's accelerator managers are not installed in this process (Ray keeps "
            "its own): %s: %s", type(e).__name__, e)


# rayaccel's RDT transports in every process. Ray 2.60 keeps its registry of tensor transports
# per process (transport_manager_info, ray/experimental/rdt/util.py): its own transports are
# registered lazily in every process (_ensure_default_transports_registered), a custom one only
# where register_tensor_transport ran and, shipped by Ray, on each actor when it is created. An
# actor Ray restarts is a new process that was not created that way: its first RAYACCEL method
# raised "Unsupported tensor transport protocol: RAYACCEL". So Ray's lazy registration is
# wrapped to register these after its own (rayaccel itself is imported only then, at a
# process's first use of RDT):
#   name -> (devices, the data type's module and name)
RDT_NAMES = {"RAYACCEL": (["cpu", "cuda"], "torch", "Tensor"),
             "RAYACCEL_NUMPY": (["cpu"], "numpy", "ndarray")}
# A driver that registers one of these names itself, as the docs show, is taken as is: the
# same class and data type is no error; another class or type replaces rayaccel's (the user's
# choice wins). Other names follow Ray's rule (no restarts).


def _register_rdt_names(util) -> None:
    """Wraps Ray's lazy registration and its register_tensor_transport in `util` (Ray's
    ray.experimental.rdt.util module, just loaded)."""
    import threading

    ensure = getattr(util, "_ensure_default_transports_registered", None)
    register = getattr(util, "register_tensor_transport", None)
    if ensure is None or register is None or not hasattr(util, "transport_manager_info"):
        import logging
        logging.getLogger("rayaccel").warning(
            "this Ray's ray.experimental.rdt.util is not Ray 2.60's: rayaccel's RDT transports "
            "are registered only where register_tensor_transport runs (not after a restart)")
        return
    implicit = set()  # the names registered here, not by the user
    lock = threading.Lock()
    done = []

    def register_ours():
        with lock:
            if done:
                return
            done.append(True)
            try:
                from rayaccel.transport import TensorTransport
            except Exception as e:  # Ray's own transports stay
                import logging
                logging.getLogger("rayaccel").warning(
                    "rayaccel's RDT transports are not registered in this process: %s: %s",
                    type(e).__name__, e)
                return
            for name, (devices, module, type_name) in RDT_NAMES.items():
                try:
                    data_type = getattr(__import__(module), type_name)
                except ImportError:
                    continue
                if name not in util.transport_manager_info:
                    register(name, devices, TensorTransport, data_type)
                    implicit.add(name)

    def ensure_default_transports_registered():
        ensure()
        register_ours()

    def register_tensor_transport(transport_name, devices, transport_manager_class, data_type):
        name = transport_name.upper()
        if name in implicit:
            implicit.discard(name)  # the user's own from now on
            info = util.transport_manager_info.get(name)
            if info is not None and info.transport_manager_class is transport_manager_class \
                    and info.data_type is data_type:
                return None
            util.transport_manager_info.pop(name, None)
        return register(transport_name, devices, transport_manager_class, data_type)

    register_tensor_transport.__doc__ = register.__doc__
    register_tensor_transport.__wrapped__ = register
    util._ensure_default_transports_registered = ensure_default_transports_registered
    util.register_tensor_transport = register_tensor_transport


class _AfterRays:
    """Finds Ray's modules as Python would and runs rayaccel's step after each has loaded:
    {module name: function of the module}."""

    def __init__(self, steps):
        self.steps = dict(steps)

    def find_spec(self, name, path=None, target=None):
        step = self.steps.pop(name, None)
        if step is None:
            return None
        if not self.steps:
            sys.meta_path.remove(self)  # each once per process
        from importlib.machinery import PathFinder
        spec = PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            step(module)

        spec.loader.exec_module = exec_module
        return spec


# Ray's dashboard agent reports GPU metrics from gpu_providers.py's providers, NVIDIA's and
# AMD's; rayaccel's joins them there (rayaccel/_gpu_provider.py), last, so Ray's stay where
# they find GPUs.
def _add_gpu_provider(module) -> None:
    try:
        from rayaccel._gpu_provider import add_to
        add_to(module)
    except Exception as e:  # Ray's own providers stay
        import logging
        logging.getLogger("rayaccel").warning(
            "rayaccel's devices are not in Ray's GPU metrics: %s: %s", type(e).__name__, e)


def _wanted() -> bool:
    """The variable set to something other than off ("", "0", "false", "no", "off")."""
    return os.environ.get(VARIABLE, "").strip().lower() not in ("", "0", "false", "no", "off")


_steps = {}
if _wanted() and _ACCELERATORS not in sys.modules:
    _steps[_ACCELERATORS] = lambda module: _install()
if _wanted() and _GPU_PROVIDERS not in sys.modules:
    _steps[_GPU_PROVIDERS] = _add_gpu_provider
if _RDT_UTIL not in sys.modules:
    _steps[_RDT_UTIL] = _register_rdt_names
if _steps:
    sys.meta_path.insert(0, _AfterRays(_steps))
