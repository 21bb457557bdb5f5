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
"""

import os
import sys

VARIABLE = "RAYACCEL_RAY_MANAGERS"
_TARGET = "ray._private.accelerators"


def _install() -> None:
    try:
        import rayaccel.ray
        rayaccel.ray.install()
    except Exception as e:  # Ray keeps its own managers; the process goes on
        import logging
        logging.getLogger("rayaccel").warning(
            "rayaccel's accelerator managers are not installed in this process (Ray keeps "
            "its own): %s: %s", type(e).__name__, e)


class _AfterRaysAccelerators:
    """Finds Ray's accelerator package as Python would and runs _install after it."""

    def find_spec(self, name, path=None, target=None):
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)  # once per process
        from importlib.machinery import PathFinder
        spec = PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _install()

        spec.loader.exec_module = exec_module
        return spec


def _wanted() -> bool:
    """The variable set to something other than off ("", "0", "false", "no", "off")."""
    return os.environ.get(VARIABLE, "").strip().lower() not in ("", "0", "false", "no", "off")


if _wanted() and _TARGET not in sys.modules:
    sys.meta_path.insert(0, _AfterRaysAccelerators())
