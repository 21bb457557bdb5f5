"""rayaccel.AgentClient: a running agent (`rayaccel serve`) over gRPC, from Python (grpcio)."""

from __future__ import annotations

from typing import Iterator, Optional, Sequence

from .errors import Error, _from_status
from .types import (Allocation, Device, DeviceSample, Domain, Link, NodeSnapshot,
                    PluginStatus, PluginTelemetry, Telemetry, _frozen_map)

try:
    import grpc
except ImportError as e:  # pragma: no cover - grpcio is optional for the local Registry
    raise ImportError("rayaccel.AgentClient needs grpcio (Debian: python3-grpcio)") from e

from .v1 import agent_pb2, snapshot_pb2

_SERVICE = "/rayaccel.v1.AcceleratorRegistry/"
_STATES = {0: "active", 1: "degraded", 2: "failed", 3: "refused"}
_HEALTH = {0: "unknown", 1: "healthy", 2: "unhealthy"}
_LINKS = {0: "unspecified", 1: "pcie", 2: "nvlink", 3: "xgmi", 4: "ici", 5: "scale-out",
          6: "other"}
_PCIE = {0: "", 1: "PIX", 2: "PXB", 3: "PHB", 4: "NODE", 5: "SYS"}
# plugin.h's RAYACCEL_SAMPLE_* bits, named as Registry.telemetry() names them.
_SAMPLE_FIELDS = {1: "utilization_percent", 2: "memory", 4: "power_mw", 8: "temperature_c",
                  16: "ecc", 32: "retired_pages", 64: "link_errors"}


def telemetry_from_proto(t: "snapshot_pb2.Telemetry") -> Telemetry:
    """The agent's GetTelemetry answer as Registry.telemetry() gives it: None where a
    device's driver cannot say."""
    def sample(d):
        def maybe(bit, value):
            return value if d.known & bit else None
        return DeviceSample(
            device_id=d.device_id, plugin=d.plugin, index=d.index,
            utilization_percent=maybe(1, d.utilization_percent),
            memory_used_bytes=maybe(2, d.memory_used_bytes),
            memory_total_bytes=maybe(2, d.memory_total_bytes), power_mw=maybe(4, d.power_mw),
            temperature_c=maybe(8, d.temperature_c), ecc_corrected=maybe(16, d.ecc_corrected),
            ecc_uncorrected=maybe(16, d.ecc_uncorrected),
            retired_pages=maybe(32, d.retired_pages), link_errors=maybe(64, d.link_errors))

    def plugin(p):
        unknown = {name: why for bits, why in p.unknown.items()
                   for bit, name in _SAMPLE_FIELDS.items() if bits & bit}
        return PluginTelemetry(name=p.plugin, error=p.error, seconds=p.seconds,
                               unknown=_frozen_map(unknown), problems=tuple(p.problems))
    return Telemetry(unix_ms=t.unix_ms, devices=tuple(sample(d) for d in t.devices),
                     plugins=tuple(plugin(p) for p in t.plugins))


def _target(address: str) -> str:
    """The agent's address as the CLI takes it (unix:PATH, /PATH, tcp://HOST:PORT) for gRPC."""
    if address.startswith("tcp://"):
        return address[len("tcp://"):]
    if address.startswith("/"):
        return "unix:" + address
    if address.startswith("unix:"):
        return address
    raise ValueError(f"agent address {address!r}: unix:PATH, an absolute path or tcp://HOST:PORT")


def _attribute(a) -> object:
    kind = a.WhichOneof("value")
    return getattr(a, kind) if kind else None


def snapshot_from_proto(s: snapshot_pb2.NodeSnapshot) -> NodeSnapshot:
    """The wire's NodeSnapshot (proto/rayaccel/v1/snapshot.proto) as rayaccel.NodeSnapshot."""
    return NodeSnapshot(
        generation=s.generation,
        plugins=tuple(PluginStatus(
            name=p.name, path=p.path, state=_STATES.get(p.state, "refused"), message=p.message,
            abi_version=p.abi_version, vendor=p.vendor, version=p.plugin_version,
            resource=p.resource_name, visible_devices_env=p.visible_devices_env,
            capabilities=p.capabilities, device_count=p.device_count) for p in s.plugins),
        devices=tuple(Device(
            id=d.id, plugin=d.plugin, resource=d.resource, index=d.index, name=d.name,
            vendor=d.vendor, accelerator_type=d.accelerator_type, architecture=d.architecture,
            memory_bytes=d.memory_bytes, pci_bus_id=d.pci_bus_id, pci_vendor_id=d.pci_vendor_id,
            pci_device_id=d.pci_device_id, numa_node=d.numa_node if d.numa_node >= 0 else None,
            driver_version=d.driver_version, firmware_version=d.firmware_version,
            parent_id=d.parent_id, partition_profile=d.partition_profile,
            health=_HEALTH.get(d.health, "unknown"), health_reason=d.health_reason,
            attributes=_frozen_map({k: _attribute(v) for k, v in sorted(d.attributes.items())}),
            cpuset=d.cpuset, nearest_nics=tuple(d.nearest_nics)) for d in s.devices),
        links=tuple(Link(a=l.a, b=l.b, type=l.type_name or _LINKS.get(l.type, "other"),
                         count=l.count, bandwidth_mbps=l.bandwidth_mbps,
                         pcie_path=_PCIE.get(l.pcie_path, ""), source=l.source)
                    for l in s.links),
        domains=tuple(Domain(plugin=d.plugin, kind=d.kind, id=d.id, devices=tuple(d.devices))
                      for d in s.domains),
        host_topology=s.host_topology,
        resources=_frozen_map(dict(s.resources_total)),
        labels=_frozen_map(dict(s.labels)),
    )


class AgentClient:
    """A running agent's AcceleratorRegistry service.

    address: unix:PATH, an absolute path, or tcp://HOST:PORT. token: the agent's bearer token
    (its --token-file), sent on every call. tls_ca: a PEM CA file for a TLS agent (without it,
    but with a client certificate, the system's roots); tls_cert and tls_key: a client
    certificate for one that requires them. timeout: seconds per call.
    """

    def __init__(self, address: str, token: Optional[str] = None, tls_ca: Optional[str] = None,
                 tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                 timeout: float = 10.0):
        target = _target(address)
        self.address = address
        if tls_ca is not None or tls_cert is not None or tls_key is not None:
            # Any TLS setting means TLS (the system's roots when no CA is given): a token is
            # never sent in the clear because a CA was left out.
            read = lambda path: open(path, "rb").read() if path else None  # noqa: E731
            credentials = grpc.ssl_channel_credentials(read(tls_ca), read(tls_key),
                                                       read(tls_cert))
            self._channel = grpc.secure_channel(target, credentials)
        else:
            self._channel = grpc.insecure_channel(target)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._timeout = timeout

    def _call(self, method: str, request, response_type, timeout=None):
        call = self._channel.unary_unary(_SERVICE + method,
                                         request_serializer=type(request).SerializeToString,
                                         response_deserializer=response_type.FromString)
        try:
            return call(request, timeout=timeout or self._timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise _rpc_error(e) from None

    def snapshot(self) -> NodeSnapshot:
        return snapshot_from_proto(self._call("GetSnapshot", agent_pb2.GetSnapshotRequest(),
                                              snapshot_pb2.NodeSnapshot))

    def watch(self, after_generation: int = 0) -> Iterator[NodeSnapshot]:
        """The current snapshot (newer than after_generation), then each newer one, until the
        agent ends the stream or the iterator is closed."""
        stream = self._channel.unary_stream(
            _SERVICE + "WatchSnapshots",
            request_serializer=agent_pb2.WatchSnapshotsRequest.SerializeToString,
            response_deserializer=snapshot_pb2.NodeSnapshot.FromString)
        responses = stream(agent_pb2.WatchSnapshotsRequest(after_generation=after_generation),
                           metadata=self._metadata)
        try:
            for s in responses:
                yield snapshot_from_proto(s)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED:
                raise _rpc_error(e) from None
        finally:
            responses.cancel()

    def plugins(self, name: str = "") -> tuple:
        r = self._call("GetPluginStatus", agent_pb2.GetPluginStatusRequest(name=name),
                       agent_pb2.GetPluginStatusResponse)
        return snapshot_from_proto(snapshot_pb2.NodeSnapshot(plugins=r.plugins)).plugins

    def telemetry(self) -> Telemetry:
        """What each device is doing now, as Registry.telemetry(); the agent samples at most
        once a second, whoever asks."""
        return telemetry_from_proto(self._call("GetTelemetry", agent_pb2.GetTelemetryRequest(),
                                               snapshot_pb2.Telemetry))

    def preferred_allocation(self, size: int, available: Sequence[str] = (),
                             must_include: Sequence[str] = (), resource: str = "") -> Allocation:
        r = self._call("PreferredAllocation", agent_pb2.PreferredAllocationRequest(
            resource=resource, count=size, must_include=list(must_include),
            available=list(available)), agent_pb2.PreferredAllocationResponse)
        return Allocation(device_ids=tuple(r.device_ids), positions=(), generation=r.generation,
                          reason=r.reason, link_score=r.score, leftover_score=r.leftover_score)

    def prepare_allocation(self, device_ids: Sequence[str], generation: int = 0) -> dict:
        r = self._call("PrepareAllocation", agent_pb2.PrepareAllocationRequest(
            generation=generation, device_ids=list(device_ids)),
            agent_pb2.PrepareAllocationResponse)
        return dict(r.env)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "AgentClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _rpc_error(e: "grpc.RpcError") -> Error:
    code = e.code() if hasattr(e, "code") else None
    number = code.value[0] if code is not None else 2
    return _from_status(number, e.details() if hasattr(e, "details") else str(e))
