"""rayaccel's devices in Ray's own dashboard and metrics.

Ray's dashboard agent (one per node) reports each GPU's utilization, memory, power and
temperature (ray_node_gpus_utilization, ray_node_gram_used, ray_node_gram_available,
ray_node_gpu_power_milliwatts, ...; labels GpuIndex, GpuDeviceName) from
ray/dashboard/modules/reporter/gpu_providers.py, whose GpuMetricProvider tries NVIDIA's
provider (pynvml), then AMD's, and uses the first available. Any other family shows nothing.

_rayaccel_hook adds RayaccelGpuProvider after Ray's own in that list, in processes started with
RAYACCEL_RAY_MANAGERS: where Ray's NVIDIA or AMD provider finds its GPUs it stays (one provider
per node, so no series twice); elsewhere rayaccel's answers for every family whose plugin
has get_telemetry, from the node's agent (the variable's address) or a local registry.
"""

import logging
import os
import threading

logger = logging.getLogger("rayaccel")

_MB = 1024 * 1024


class _ProviderName:
    """What Ray reads of a provider's name: .value (Ray's GpuProviderType is an enum of its
    own two)."""
    name = "RAYACCEL"
    value = "rayaccel"


def _source():
    """The node's telemetry: its agent when RAYACCEL_RAY_MANAGERS names one, else a local
    registry (plugins isolated, as everywhere in Ray's processes)."""
    where = os.environ.get("RAYACCEL_RAY_MANAGERS", "")
    if where.startswith(("unix:", "tcp://", "/")):
        from .agent import AgentClient
        return AgentClient(where, timeout=5.0)
    from .registry import Registry
    return Registry()


def provider_class(base):
    """RayaccelGpuProvider, a subclass of Ray's GpuProvider (`base`)."""

    class RayaccelGpuProvider(base):
        """Every rayaccel device with telemetry, as Ray's GpuUtilizationInfo: index (the
        plugin's, as the family's visible-devices variable numbers it), name, uuid (rayaccel's
        device id), utilization_gpu (None when the driver cannot say), memory in MB (0 when
        unknown), power_mw and temperature_c when known. TPUs are left to Ray's own TPU
        metrics."""

        def __init__(self):
            super().__init__()
            self._lock = threading.Lock()
            self._registry = None
            self._names = {}  # device id -> name of each device reported, from the snapshot
            self._known = set()  # every device id of that snapshot, TPUs included

        def get_provider_name(self):
            return _ProviderName

        def is_available(self) -> bool:
            try:
                if self._devices():
                    return True
            except Exception as e:  # Ray's other providers, or none, then
                logger.warning("rayaccel's GPU metrics are off on this node: %s: %s",
                               type(e).__name__, e)
            self._close()  # nothing to report: no registry (and plugin hosts) kept for it
            return False

        def _close(self):
            with self._lock:
                registry, self._registry = self._registry, None
            if registry is not None:
                registry.close()

        def _initialize(self) -> bool:
            return True

        def _shutdown(self):
            pass

        def _open(self):
            with self._lock:
                if self._registry is None:
                    self._registry = _source()
                return self._registry

        def _devices(self):
            snap = self._open().snapshot()
            devices = [d for d in snap.devices if d.resource != "TPU"]
            self._names = {d.id: d.name for d in devices}
            self._known = {d.id for d in snap.devices}
            return devices

        def get_gpu_utilization(self):
            registry = self._open()
            telemetry = registry.telemetry()
            if any(s.device_id not in self._known for s in telemetry.devices):
                self._devices()  # a rescan brought new devices: their names
            out = []
            for s in telemetry.devices:
                name = self._names.get(s.device_id)
                if name is None:  # a TPU, or gone since
                    continue
                info = {
                    "index": s.index,
                    "name": name,
                    "uuid": s.device_id,
                    "utilization_gpu": s.utilization_percent,
                    "memory_used": (s.memory_used_bytes or 0) // _MB,
                    "memory_total": (s.memory_total_bytes or 0) // _MB,
                    "processes_pids": None,
                }
                if s.power_mw is not None:
                    info["power_mw"] = s.power_mw
                if s.temperature_c is not None:
                    info["temperature_c"] = s.temperature_c
                out.append(info)
            return out

    return RayaccelGpuProvider


def add_to(gpu_providers) -> None:
    """Puts RayaccelGpuProvider after Ray's providers in every GpuMetricProvider of
    `gpu_providers` (Ray's module, just loaded). A Ray whose module has no GpuMetricProvider
    or GpuProvider keeps its own, with one warning."""
    metric_provider = getattr(gpu_providers, "GpuMetricProvider", None)
    base = getattr(gpu_providers, "GpuProvider", None)
    if metric_provider is None or base is None:
        logger.warning("this Ray's dashboard has no GpuMetricProvider/GpuProvider in "
                       "gpu_providers.py (Ray 2.60's): rayaccel's devices are not in Ray's "
                       "GPU metrics; Ray's own providers stay")
        return
    cls = provider_class(base)
    gpu_providers.RayaccelGpuProvider = cls
    init = metric_provider.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        providers = getattr(self, "_providers", None)
        if isinstance(providers, list):
            providers.append(cls())
        else:
            logger.warning("this Ray's GpuMetricProvider keeps no _providers list (Ray "
                           "2.60's): rayaccel's devices are not in Ray's GPU metrics")

    __init__.__wrapped__ = init
    metric_provider.__init__ = __init__
