"""Device memory for TensorTransport: arrays on a GPU, and which of the plugin's devices holds
them.

Any object with `__cuda_array_interface__` (PyTorch CUDA tensors, CuPy and Numba arrays) is
device memory. The transport's plugin names devices by its own index (the NVML index for the
CUDA plugin), while the array's memory belongs to a CUDA device ordinal, which
CUDA_VISIBLE_DEVICES renumbers: the CUDA driver says which ordinal holds the pointer and its PCI
bus id, and the plugin's own discovery says which of its devices has that bus id.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import numpy as np

from .errors import InvalidArgumentError, UnavailableError

CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9


@dataclass
class DeviceArray:
    """One C-contiguous array in device memory."""
    address: int
    nbytes: int
    readonly: bool
    shape: Tuple[int, ...]
    dtype: Any  # numpy dtype, or the torch dtype of a torch tensor


def device_array(obj) -> Optional[DeviceArray]:
    """The device memory `obj` exposes, or None for host memory. A torch CUDA tensor is used
    as it is (the caller makes it contiguous); anything else must be C-contiguous."""
    device = getattr(obj, "device", None)  # a torch tensor: only CUDA ones have the interface
    if type(obj).__module__.startswith("torch") and getattr(device, "type", None) != "cuda":
        return None
    interface = getattr(obj, "__cuda_array_interface__", None)
    if interface is None:
        return None
    shape = tuple(int(n) for n in interface["shape"])
    dtype = np.dtype(interface["typestr"])
    strides = interface.get("strides")
    if strides is not None:
        expected, want = dtype.itemsize, []
        for n in reversed(shape):
            want.append(expected)
            expected *= n
        if tuple(strides) != tuple(reversed(want)) and math.prod(shape) > 1:
            raise InvalidArgumentError("a device array must be C-contiguous")
    address, readonly = interface["data"]
    torch_dtype = getattr(obj, "dtype", None) if type(obj).__module__.startswith("torch") \
        else None
    return DeviceArray(int(address), math.prod(shape) * dtype.itemsize, bool(readonly), shape,
                       torch_dtype or dtype)


class CudaDevices:
    """Which of the plugin's devices holds a CUDA pointer."""

    def __init__(self, library: str, plugin: str, name: str, config: Dict[str, str],
                 search_path):
        """plugin: the transport's plugin (a name or a path); name: the name in its table,
        which its configuration keys take as their prefix."""
        self._library, self._plugin, self._name = library, plugin, name
        self._config, self._search_path = config, list(search_path)
        self._cuda = None
        self._by_bus: Optional[Dict[str, int]] = None

    def _driver(self):
        if self._cuda is None:
            try:
                cuda = ctypes.CDLL(self._library)
            except OSError as e:
                raise UnavailableError(f"device memory needs the CUDA driver: {e}") from None
            cuda.cuPointerGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int,
                                                    ctypes.c_uint64]
            cuda.cuDeviceGet.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
            cuda.cuDeviceGetPCIBusId.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
            if cuda.cuInit(0) != 0:
                raise UnavailableError(f"{self._library}: cuInit failed")
            self._cuda = cuda
        return self._cuda

    def _plugin_devices(self) -> Dict[str, int]:
        if self._by_bus is None:
            from .registry import Registry
            config = {f"{self._name}.{k}": v for k, v in self._config.items()}
            with Registry(plugins=[self._plugin], search_path=self._search_path,
                          host_topology=False, config=config) as registry:
                snap = registry.snapshot()
            self._by_bus = {d.pci_bus_id.lower(): d.index for d in snap.devices
                            if d.pci_bus_id and not d.parent_id}
        return self._by_bus

    def index_of(self, address: int) -> int:
        """The plugin's index of the device whose memory `address` is."""
        cuda = self._driver()
        ordinal = ctypes.c_int(-1)
        r = cuda.cuPointerGetAttribute(ctypes.byref(ordinal),
                                       CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, address)
        if r != 0:
            raise InvalidArgumentError(
                f"not CUDA device memory (cuPointerGetAttribute: CUresult {r})")
        device, bus = ctypes.c_int(0), ctypes.create_string_buffer(32)
        if cuda.cuDeviceGet(ctypes.byref(device), ordinal.value) != 0 or \
                cuda.cuDeviceGetPCIBusId(bus, len(bus), device.value) != 0:
            raise InvalidArgumentError(f"CUDA device {ordinal.value} has no PCI bus id")
        index = self._plugin_devices().get(bus.value.decode().lower())
        if index is None:
            raise InvalidArgumentError(
                f"GPU {bus.value.decode()} (CUDA device {ordinal.value}) is not one of the "
                f"{self._name} plugin's devices")
        return index
