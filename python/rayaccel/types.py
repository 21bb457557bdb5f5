"""What a snapshot holds, as frozen dataclasses (the C++ NodeSnapshot, field for field)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Optional, Tuple


def _frozen_map(d: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(d))


@dataclass(frozen=True)
class PluginStatus:
    name: str
    path: str
    state: str  # "active", "degraded", "failed", "refused"
    message: str
    abi_version: str
    vendor: str
    version: str
    resource: str
    visible_devices_env: str
    capabilities: int
    device_count: int


@dataclass(frozen=True)
class Device:
    id: str
    plugin: str
    resource: str
    index: int
    name: str
    vendor: str
    accelerator_type: str
    architecture: str
    memory_bytes: int
    pci_bus_id: str
    pci_vendor_id: int
    pci_device_id: int
    numa_node: Optional[int]
    driver_version: str
    firmware_version: str
    parent_id: str
    partition_profile: str
    health: str  # "healthy", "unhealthy", "unknown"
    health_reason: str
    attributes: Mapping[str, Any]
    cpuset: str
    nearest_nics: Tuple[str, ...]


@dataclass(frozen=True)
class Link:
    a: int  # positions in NodeSnapshot.devices
    b: int
    type: str  # "nvlink", "xgmi", "pcie", ... or the interconnect's own name
    count: int
    bandwidth_mbps: int
    pcie_path: str  # "PIX" ... "SYS", "" unknown
    source: str


@dataclass(frozen=True)
class Domain:
    plugin: str
    kind: str  # "nvlink", "xgmi", "tpu-slice", ...
    id: str
    devices: Tuple[int, ...]


@dataclass(frozen=True)
class NodeSnapshot:
    generation: int
    plugins: Tuple[PluginStatus, ...]
    devices: Tuple[Device, ...]
    links: Tuple[Link, ...]
    domains: Tuple[Domain, ...]
    host_topology: str
    resources: Mapping[str, float] = field(default_factory=dict)  # what Ray is given
    labels: Mapping[str, str] = field(default_factory=dict)

    @staticmethod
    def _from_native(d: Mapping[str, Any]) -> "NodeSnapshot":
        return NodeSnapshot(
            generation=d["generation"],
            plugins=tuple(PluginStatus(**p) for p in d["plugins"]),
            devices=tuple(Device(**{**v, "attributes": _frozen_map(v["attributes"]),
                                    "nearest_nics": tuple(v["nearest_nics"])})
                          for v in d["devices"]),
            links=tuple(Link(**l) for l in d["links"]),
            domains=tuple(Domain(**{**m, "devices": tuple(m["devices"])}) for m in d["domains"]),
            host_topology=d["host_topology"],
            resources=_frozen_map(d["resources"]),
            labels=_frozen_map(d["labels"]),
        )

    def plugin(self, name: str) -> Optional[PluginStatus]:
        return next((p for p in self.plugins if p.name == name), None)


@dataclass(frozen=True)
class Allocation:
    device_ids: Tuple[str, ...]
    positions: Tuple[int, ...]
    generation: int
    reason: str
    link_score: int
    leftover_score: int


@dataclass(frozen=True)
class DeviceSample:
    """What a device is doing now (Registry.telemetry); None where its driver cannot say."""
    device_id: str
    plugin: str
    index: int
    utilization_percent: Optional[int]
    memory_used_bytes: Optional[int]
    memory_total_bytes: Optional[int]
    power_mw: Optional[int]
    temperature_c: Optional[int]
    ecc_corrected: Optional[int]
    ecc_uncorrected: Optional[int]
    retired_pages: Optional[int]
    link_errors: Optional[int]


@dataclass(frozen=True)
class PluginTelemetry:
    """A plugin's part of a sample: its error (no samples then), why fields are unknown
    ({"power_mw": "nvmlDeviceGetPowerUsage: Not Supported"}), samples it had refused."""
    name: str
    error: str
    seconds: float
    unknown: Mapping[str, str]
    problems: Tuple[str, ...]


@dataclass(frozen=True)
class Telemetry:
    """Registry.telemetry(): every device of a plugin with get_telemetry (ABI 1.6)."""
    unix_ms: int
    devices: Tuple[DeviceSample, ...]
    plugins: Tuple[PluginTelemetry, ...]

    @staticmethod
    def _from_native(d: Mapping[str, Any]) -> "Telemetry":
        return Telemetry(
            unix_ms=d["unix_ms"],
            devices=tuple(DeviceSample(**v) for v in d["devices"]),
            plugins=tuple(PluginTelemetry(name=p["name"], error=p["error"], seconds=p["seconds"],
                                          unknown=_frozen_map(p["unknown"]),
                                          problems=tuple(p["problems"])) for p in d["plugins"]))
