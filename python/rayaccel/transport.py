"""rayaccel's transport for Ray Direct Transport: Ray's TensorTransportManager, one-sided.

The source registers the tensors' memory with a rayaccel plugin's transport and puts its
endpoint address and one descriptor per tensor into the transport metadata, which travels
with the object through Ray. The destination connects to that address, reads each tensor into
`target_buffers` or new arrays, and returns them; the source does nothing during the transfer
(as with NIXL). `garbage_collect` deregisters the source's memory: a read with its descriptors
then fails as stale. `abort_transport` closes the destination's connection, which fails the
reads in flight. A peer that dies fails the reads within the transport's peer timeout: an
exception, never a hang.

    import ray, rayaccel.transport
    ray.experimental.register_tensor_transport("RAYACCEL", ["cpu", "cuda"],
                                               rayaccel.transport.TensorTransport)

Host memory: NumPy arrays, any C-contiguous buffer-protocol object (read back as uint8 arrays),
and CPU tensors of PyTorch when it is installed. Device memory, with the CUDA plugin
(plugin="cuda"): PyTorch CUDA tensors and any object with `__cuda_array_interface__` (CuPy,
Numba); the plugin moves it (docs/transport.md, "Device memory"). A destination receives device
tensors into `target_buffers`, or into new CUDA tensors of its current device when PyTorch has
CUDA.
"""

from __future__ import annotations

import importlib
import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from . import _native
from ._device_memory import CudaDevices, DeviceArray, device_array
from .errors import AbortedError, Error, InvalidArgumentError, UnavailableError

try:  # Ray's interface and metadata types, when Ray is installed
    from ray.experimental import (CommunicatorMetadata, TensorTransportManager,
                                  TensorTransportMetadata)
except ImportError:  # pragma: no cover - Ray is optional
    try:
        from ray.experimental.rdt.tensor_transport_manager import (  # older layouts
            CommunicatorMetadata, TensorTransportManager, TensorTransportMetadata)
    except ImportError:
        TensorTransportManager = object

        @dataclass
        class CommunicatorMetadata:  # type: ignore[no-redef]
            """Ray's CommunicatorMetadata (empty for a one-sided transport)."""

        @dataclass
        class TensorTransportMetadata:  # type: ignore[no-redef]
            """Ray's TensorTransportMetadata: (shape, dtype) per tensor, and their device."""

            tensor_meta: List[Tuple[Any, Any]]
            tensor_device: Optional[str] = None

# ray.dag and ray.experimental.collective import each other. When a transfer fails, Ray's RDT
# failure monitor imports the second from its own thread while ray.shutdown() imports the first
# from the driver's: two threads entering the cycle from both ends see a module half made
# (ImportError, KeyError 'ray.dag'). Loaded here, in the thread that registers the transport,
# both later imports find it whole (50 ms, once).
try:
    importlib.import_module("ray.dag")
except ImportError:  # pragma: no cover - Ray is optional
    pass

try:
    import torch
except ImportError:  # PyTorch is optional
    torch = None


@dataclass
class RayaccelTransportMetadata(TensorTransportMetadata):
    """What the destination needs: the source endpoint's address, and per tensor its
    descriptor (a checksummed reference to the registered memory) and size in bytes."""

    address: bytes = b""
    descriptors: List[bytes] = field(default_factory=list)
    nbytes: List[int] = field(default_factory=list)
    # Who holds the memory, for the reader's errors: "actor <id> (pid <n>, node <id>)" in a
    # Ray actor, else "pid <n> on <host>".
    source: str = ""
    # Per tensor, the framework it came from ("torch", "numpy", "jax"; "" as numpy): the reader's
    # tensors are made in it.
    frameworks: List[str] = field(default_factory=list)


def _printable(text, limit: int = 200) -> str:
    """What the metadata (the source's word, however it came) says of the source, fit for an
    error message: printable characters only, at most `limit` of them."""
    if not isinstance(text, str):
        return ""
    shown = "".join(c if c.isprintable() else "?" for c in text[:limit])
    return shown + ("..." if len(text) > limit else "")


def _this_process() -> str:
    """This process as a reader's error names it."""
    try:
        import ray
        if ray.is_initialized():
            context = ray.get_runtime_context()
            actor = context.get_actor_id()
            where = f"pid {os.getpid()}, node {context.get_node_id()}"
            return f"actor {actor} ({where})" if actor else f"the driver ({where})"
    except ImportError:
        pass
    return f"pid {os.getpid()} on {os.uname().nodename}"


def _device_memory_of(tensor) -> Optional[Tuple[DeviceArray, Tuple[Any, Any], Any]]:
    """(its device memory, (shape, dtype), what keeps it alive) for a device tensor, else
    None."""
    if torch is not None and isinstance(tensor, torch.Tensor):
        if tensor.device.type != "cuda":
            return None
        t = tensor.detach().contiguous()
        return device_array(t), (t.shape, t.dtype), t
    array = device_array(tensor)
    return None if array is None else (array, (array.shape, array.dtype), tensor)


# DLPack's device types (dlpack.h, DLDeviceType): the ones whose memory this transport reaches.
_DLPACK_HOST = {1: "cpu", 3: "cuda_host"}
_DLPACK_DEVICES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal",
                   9: "vpi", 10: "rocm", 11: "rocm_host", 13: "cuda_managed", 14: "oneapi",
                   15: "webgpu", 16: "hexagon", 17: "maia"}


def _framework(tensor) -> str:
    """The framework an array comes from, by its type's module: "torch", "numpy", "jax", or ""
    for another (its bytes are read through NumPy, and it arrives as a NumPy array)."""
    if torch is not None and isinstance(tensor, torch.Tensor):
        return "torch"
    if isinstance(tensor, np.ndarray):
        return "numpy"
    module = type(tensor).__module__.split(".")[0]
    return "jax" if module in ("jax", "jaxlib") else ""


def _host_array(tensor) -> np.ndarray:
    """A NumPy view (or, where the framework cannot give one, a copy) of an array in host
    memory: NumPy's own, a JAX array, or any object that speaks DLPack. Refuses, naming the
    type and the device, an object that is not an array or lies in memory of a device this
    transport does not reach."""
    if isinstance(tensor, np.ndarray):
        return tensor
    if isinstance(tensor, (bytes, bytearray, memoryview)):
        return np.frombuffer(tensor, dtype=np.uint8)  # raw bytes, not a 0-d string array
    where = getattr(tensor, "__dlpack_device__", None)
    if where is not None:
        kind, index = where()
        if int(kind) not in _DLPACK_HOST:
            name = _DLPACK_DEVICES.get(int(kind), f"DLPack device type {int(kind)}")
            raise InvalidArgumentError(
                f"a {type(tensor).__module__}.{type(tensor).__name__} in {name} memory "
                f"(device {index}): this transport moves host and CUDA memory")
        if _framework(tensor) != "jax" and hasattr(np, "from_dlpack"):
            try:
                return np.from_dlpack(tensor)
            except (RuntimeError, TypeError, BufferError):
                pass  # a dtype NumPy's DLPack does not take (bfloat16, bool): the array protocol
    array = np.asarray(tensor)
    if array.dtype == object:
        raise InvalidArgumentError(f"{type(tensor).__module__}.{type(tensor).__name__} is not an "
                                   "array, a buffer or a DLPack object")
    return array


def _config_from_environment(text: str) -> Dict[str, str]:
    """RAYACCEL_TRANSPORT_CONFIG: a JSON object of configuration keys and values."""
    try:
        config = json.loads(text)
    except ValueError as e:
        raise InvalidArgumentError(f"RAYACCEL_TRANSPORT_CONFIG is not JSON: {e}") from None
    if not isinstance(config, dict):
        raise InvalidArgumentError("RAYACCEL_TRANSPORT_CONFIG must be a JSON object of keys and "
                                   f"values, not {type(config).__name__}")
    return config


def _as_framework(array, framework: str):
    """A received NumPy array as the source's framework made it (JAX: a JAX array)."""
    if framework == "jax":
        import jax.numpy as jnp
        return jnp.asarray(array)
    return array


def _bytes_of(tensor) -> Tuple[np.ndarray, Tuple[Any, Any], Any]:
    """(a flat uint8 view of the tensor's memory, (shape, dtype), what keeps it alive)."""
    if torch is not None and isinstance(tensor, torch.Tensor):
        if tensor.device.type != "cpu":
            raise InvalidArgumentError(
                f"a {tensor.device.type} tensor: this transport moves host and CUDA memory")
        t = tensor.detach().contiguous()
        return t.reshape(-1).view(torch.uint8).numpy(), (t.shape, t.dtype), t
    array = _host_array(tensor)
    if array.dtype == object:
        raise InvalidArgumentError(f"{type(tensor).__name__} is not an array or buffer")
    # A copy only when it was not contiguous (a strided view): the reader gets it contiguous.
    # (Not np.ascontiguousarray: it makes a 0-d array 1-d.)
    if not array.flags["C_CONTIGUOUS"]:
        array = array.copy(order="C")
    return array.reshape(-1).view(np.uint8), (array.shape, array.dtype), array


def _target_bytes(out) -> np.ndarray:
    """A flat uint8 view of a target buffer's own memory (never of a copy)."""
    if torch is not None and isinstance(out, torch.Tensor):
        if out.device.type != "cpu" or not out.is_contiguous():
            raise InvalidArgumentError("a target tensor must be a contiguous CPU tensor")
        return out.reshape(-1).view(torch.uint8).numpy()
    array = np.asarray(out)
    if not array.flags["C_CONTIGUOUS"] or not array.flags["WRITEABLE"]:
        raise InvalidArgumentError("a target buffer must be writable and C-contiguous")
    return array.reshape(-1).view(np.uint8)


def _new_tensor(shape, dtype):
    if torch is not None and isinstance(dtype, torch.dtype):
        return torch.empty(shape, dtype=dtype)
    # Memory from malloc, not NumPy's allocator: UCX's cross-process copy (CMA) into NumPy's
    # own large arrays measured a quarter slower on one machine (docs/performance.md, "Python").
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    return np.frombuffer(bytearray(count * dtype.itemsize), dtype=dtype).reshape(shape)


def _new_device_tensor(shape, dtype):
    """A new CUDA tensor on this process's current device, for a tensor that came from device
    memory; without PyTorch's CUDA, the caller passes target_buffers."""
    if torch is not None and isinstance(dtype, torch.dtype) and torch.cuda.is_available():
        return torch.empty(shape, dtype=dtype, device="cuda")
    raise InvalidArgumentError("these tensors are in device memory: give target_buffers with "
                               "__cuda_array_interface__ (no PyTorch with CUDA here)")


class TensorTransport(TensorTransportManager):
    """Ray's TensorTransportManager over rayaccel's transport (one per process, as Ray makes
    it). plugin: whose transport to use (default: $RAYACCEL_TRANSPORT_PLUGIN, else "sim",
    host memory over UCX like every in-tree plugin); config: its configuration (default: the
    JSON object $RAYACCEL_TRANSPORT_CONFIG holds, e.g. {"transport_fabric": "libfabric"}); peer_timeout:
    seconds a silent peer may take before its reads fail; key (bytes) or key_file: the secret
    both ends prove before any tensor is named (default: the file $RAYACCEL_TRANSPORT_KEY_FILE
    names, else, in a process of a Ray cluster, the cluster's key, which every node's actors
    read from the cluster's GCS, else this user's key on this host). A peer with another key
    fails its reads with UnauthenticatedError."""

    def __init__(self, plugin: Optional[str] = None, config: Optional[Dict[str, str]] = None,
                 search_path: Tuple[str, ...] = (), peer_timeout: float = 10.0,
                 key: Optional[bytes] = None, key_file: Optional[str] = None):
        self._plugin = plugin or os.environ.get("RAYACCEL_TRANSPORT_PLUGIN", "sim")
        if config is None and os.environ.get("RAYACCEL_TRANSPORT_CONFIG"):
            config = _config_from_environment(os.environ["RAYACCEL_TRANSPORT_CONFIG"])
        self._config = {str(k): str(v) for k, v in (config or {}).items()}
        self._search_path = list(search_path)
        self._peer_timeout = peer_timeout
        self._key = bytes(key or b"")
        self._key_file = key_file or ""
        self._lock = threading.Lock()
        self._native: Optional[_native.Transport] = None
        self._devices: Optional[CudaDevices] = None
        self._sources: Dict[str, List[Tuple[int, Any]]] = {}  # obj_id -> (region, keep-alive)
        self._connections: Dict[bytes, int] = {}  # peer address -> connection
        self._inflight: Dict[str, Tuple[bytes, int]] = {}  # obj_id -> (address, connection)
        self._aborted: set = set()
        # peer -> (the object, when) whose abort or failed recv closed its shared connection
        # here: other objects' reads that failed with it are tried again.
        self._closed_here: Dict[bytes, Tuple[str, float]] = {}
        # Actors (by id) that answered they can open a transport: Ray asks before every
        # .remote() of an RDT method, and the answer is a round trip to the actor.
        self._actors_with_transport: set = set()
        # How the most recent recv_multiple_tensors moved each tensor ("fabric", "staged",
        # "device-ipc", "same-host"; none for an empty one): what an operator checks first when a transfer
        # is slower than the fabric.
        self.last_paths: List[str] = []

    def _transport(self) -> _native.Transport:
        with self._lock:
            if self._native is None:
                key = self._key
                if not key and not self._key_file and \
                        not os.environ.get("RAYACCEL_TRANSPORT_KEY_FILE"):
                    key = _ray_cluster_key()
                self._native = _native.Transport(self._plugin, self._config, self._search_path,
                                                 self._peer_timeout, key, self._key_file)
            return self._native

    def _device_index(self, address: int) -> int:
        """The plugin's index of the device holding `address`."""
        transport = self._transport()
        with self._lock:
            if self._devices is None:
                self._devices = CudaDevices(self._config.get("cuda_library", "libcuda.so.1"),
                                            self._plugin, transport.plugin_name, self._config,
                                            self._search_path)
            devices = self._devices
        return devices.index_of(address)

    def _register_device(self, array: DeviceArray, writable: bool) -> int:
        if writable and array.readonly:
            raise InvalidArgumentError("a target device array must be writable")
        return self._transport().register_device(array.address, array.nbytes,
                                                 self._device_index(array.address))

    def stats(self) -> Dict[str, Any]:
        """What this process's transport has done: transfers, bytes and failures by direction
        ("read", "write") and path ("fabric", "staged", "device-ipc", "same-host", "unreported"), request
        latency buckets, connections, peers lost, registered regions (docs/python.md)."""
        return self._transport().stats()

    # Ray's interface.

    def tensor_transport_backend(self) -> str:
        return "RAYACCEL"

    @staticmethod
    def is_one_sided() -> bool:
        return True

    @staticmethod
    def can_abort_transport() -> bool:
        return True

    def actor_has_tensor_transport(self, actor) -> bool:
        """Asked by Ray in the caller before every .remote() of an RDT method. The actor is
        asked once, on its system concurrency group (not behind its running methods); a yes is
        kept for the actor's id (a restarted actor is the same environment, and its transports
        are registered again by the hook), a no is asked again next time."""
        import ray
        actor_id = actor._actor_id.hex()
        with self._lock:
            if actor_id in self._actors_with_transport:
                return True
        try:
            asked = actor.__ray_call__.options(concurrency_group="_ray_system").remote(
                _has_transport)
        except Exception:  # an actor without Ray's RDT concurrency groups
            asked = actor.__ray_call__.remote(_has_transport)
        has = bool(ray.get(asked))
        if has:
            with self._lock:
                self._actors_with_transport.add(actor_id)
        return has

    def get_communicator_metadata(self, src_actor, dst_actor, backend=None):
        return CommunicatorMetadata()

    def extract_tensor_transport_metadata(self, obj_id: str,
                                          rdt_object: List[Any]) -> RayaccelTransportMetadata:
        transport = self._transport()
        meta, descriptors, sizes, held, frameworks = [], [], [], [], []
        devices = set()
        # Every tensor is read (and refused, naming its type and device) before any is
        # registered.
        memory = []
        for tensor in rdt_object:
            on_device = _device_memory_of(tensor)
            if on_device is not None:
                array, shape_dtype, keep = on_device
                memory.append((True, array, shape_dtype, keep, array.nbytes))
                devices.add("cuda")
            else:
                view, shape_dtype, keep = _bytes_of(tensor)
                memory.append((False, view, shape_dtype, keep, view.nbytes))
                devices.add("cpu")
            frameworks.append(_framework(tensor))
        if len(devices) > 1:
            raise InvalidArgumentError("one object's tensors are all host or all device "
                                       "memory (Ray's metadata names one device)")
        try:
            for on_device, array, shape_dtype, keep, nbytes in memory:
                meta.append(shape_dtype)
                sizes.append(nbytes)
                if nbytes == 0:
                    descriptors.append(b"")
                    continue
                region = self._register_device(array, False) if on_device else \
                    transport.register(array, False)
                held.append((region, keep))
                descriptors.append(transport.describe(region))
        except BaseException:
            for region, _ in held:
                transport.deregister(region)
            raise
        with self._lock:
            self._sources.setdefault(obj_id, []).extend(held)
        device = "cuda" if "cuda" in devices else "cpu"
        return RayaccelTransportMetadata(tensor_meta=meta, tensor_device=device,
                                         address=transport.address, descriptors=descriptors,
                                         nbytes=sizes, source=_this_process(),
                                         frameworks=frameworks)

    def recv_multiple_tensors(self, obj_id: str, tensor_transport_metadata,
                              communicator_metadata=None,
                              target_buffers: Optional[List[Any]] = None) -> List[Any]:
        meta = tensor_transport_metadata
        if target_buffers is not None and len(target_buffers) != len(meta.tensor_meta):
            raise InvalidArgumentError(f"{len(target_buffers)} target buffers for "
                                       f"{len(meta.tensor_meta)} tensors")
        try:
            try:
                return self._receive(obj_id, meta, target_buffers)
            except UnavailableError:
                # Connections are shared per peer: another object's abort (or failure) may
                # have closed this one's under it, moments ago. Not this object's failure:
                # once more, on a new one. Its own failure (a peer lost, stopped or cut off)
                # is final.
                with self._lock:
                    closer, when = self._closed_here.get(meta.address, (None, 0.0))
                    retry = closer not in (None, obj_id) and \
                        time.monotonic() - when < self._peer_timeout
                    if retry:
                        del self._closed_here[meta.address]
                if not retry:
                    raise
                return self._receive(obj_id, meta, target_buffers)
        except Error as e:
            source = _printable(getattr(meta, "source", ""))
            if not source:
                raise
            # The same error, naming whose memory it was: the peer a user looks for.
            raise type(e)(f"reading {obj_id} from {source}: {e}") from None

    def _receive(self, obj_id, meta, target_buffers):
        transport = self._transport()
        connection = self._connect(meta.address)
        with self._lock:
            if obj_id in self._aborted:
                self._aborted.discard(obj_id)  # refused once: the abort is spent
                raise AbortedError(f"the transfer of {obj_id} was aborted")
            self._inflight[obj_id] = (meta.address, connection)
        outputs, regions, entries, requests = [], [], [], []
        finished = False
        try:
            on_device = getattr(meta, "tensor_device", "cpu") == "cuda"
            for i, ((shape, dtype), descriptor, nbytes) in enumerate(
                    zip(meta.tensor_meta, meta.descriptors, meta.nbytes)):
                out = target_buffers[i] if target_buffers is not None else \
                    _new_device_tensor(shape, dtype) if on_device else _new_tensor(shape, dtype)
                array = device_array(out)
                view = None if array is not None else _target_bytes(out)
                have = array.nbytes if array is not None else view.nbytes
                if have != nbytes:
                    raise InvalidArgumentError(f"target buffer {i} holds {have} bytes; "
                                               f"the tensor is {nbytes}")
                outputs.append(out)
                if nbytes == 0:
                    continue
                region = self._register_device(array, True) if array is not None else \
                    transport.register(view, True)
                regions.append(region)
                entries.append((region, 0, descriptor, 0, nbytes))
            if entries:
                # Every tensor of the object in one batch: in flight together, one request.
                requests.append(transport.read_batch(connection, entries))
            for request in requests:
                request.wait()  # the transport fails it when the peer goes silent
            finished = True
            self.last_paths = requests[0].paths if requests else []
        except Error:
            with self._lock:
                aborted = obj_id in self._aborted
                self._aborted.discard(obj_id)
            if aborted:
                raise AbortedError(f"the transfer of {obj_id} was aborted") from None
            raise
        finally:
            if not finished and requests:
                # Reads may still be landing in these buffers (an error, an interrupt):
                # closing the connection ends them; wait for that before the memory goes.
                with self._lock:
                    self._closed_here[meta.address] = (obj_id, time.monotonic())
                self._forget(meta.address, connection)
                for request in requests:
                    try:
                        request.wait(self._peer_timeout + 1.0)
                    except Error:
                        pass
            for region in regions:
                try:
                    transport.deregister(region)
                except Error:
                    pass
            with self._lock:
                self._inflight.pop(obj_id, None)
        if target_buffers is None:
            kinds = list(getattr(meta, "frameworks", None) or [])
            outputs = [_as_framework(out, kinds[i] if i < len(kinds) else "")
                       for i, out in enumerate(outputs)]
        return outputs

    def send_multiple_tensors(self, tensors, tensor_transport_metadata, communicator_metadata):
        raise NotImplementedError("one-sided: the destination reads; Ray does not call this")

    def garbage_collect(self, obj_id: str, tensor_transport_meta=None, tensors=None) -> None:
        with self._lock:
            held = self._sources.pop(obj_id, [])
            self._aborted.discard(obj_id)
        kept, first_error = [], None
        for region, keep in held:
            try:
                self._transport().deregister(region)
            except Error as e:  # still registered: its memory must stay alive
                kept.append((region, keep))
                first_error = first_error or e
        if kept:
            with self._lock:
                self._sources.setdefault(obj_id, []).extend(kept)
            raise first_error

    def abort_transport(self, obj_id: str, communicator_metadata=None) -> None:
        """On the destination: the recv of obj_id in flight, or else the next one, fails as
        aborted (its connection is closed; other objects' reads on it are retried on a new
        one). On the source: nothing is in flight."""
        with self._lock:
            self._aborted.add(obj_id)
            inflight = self._inflight.get(obj_id)
            if inflight is not None:
                self._closed_here[inflight[0]] = (obj_id, time.monotonic())
        if inflight is not None:
            self._forget(*inflight)

    # Connections, one per peer endpoint, made on first use.

    def _connect(self, address: bytes) -> int:
        with self._lock:
            connection = self._connections.get(address)
        if connection is not None:
            return connection
        connection = self._transport().connect(address)
        with self._lock:
            return self._connections.setdefault(address, connection)

    def _forget(self, address: bytes, connection: int) -> None:
        with self._lock:
            if self._connections.get(address) == connection:
                del self._connections[address]
            else:
                return
        try:
            self._transport().close(connection)
        except Error:
            pass


# Where a Ray cluster keeps its transport key: Ray's internal key-value store in the GCS.
_KEY_NAMESPACE = b"rayaccel"
_KEY_NAME = b"transport-key"


def _ray_cluster_key() -> bytes:
    """In a process connected to a Ray cluster, the cluster's transport key: 32 random bytes
    kept in the cluster's GCS (internal KV, namespace "rayaccel"), made by the first process
    that needs one; every process of the cluster, on any node, reads the same. Else b"" (the
    user's key on this host)."""
    try:
        import ray
        from ray.experimental import internal_kv
    except ImportError:
        return b""
    if not ray.is_initialized() or not internal_kv._internal_kv_initialized():
        return b""
    key = internal_kv._internal_kv_get(_KEY_NAME, namespace=_KEY_NAMESPACE)
    if not key:  # the first: put without overwriting, then read whichever key won
        internal_kv._internal_kv_put(_KEY_NAME, os.urandom(32), overwrite=False,
                                     namespace=_KEY_NAMESPACE)
        key = internal_kv._internal_kv_get(_KEY_NAME, namespace=_KEY_NAMESPACE)
    return bytes(key or b"")


def _has_transport(self_actor=None) -> bool:
    """Run inside an actor by actor_has_tensor_transport: can this process open one?"""
    try:
        TensorTransport()._transport()
        return True
    except Exception:
        return False
