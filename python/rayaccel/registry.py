"""rayaccel.Registry: plugins loaded, checked and merged, as librayaccel does it for the raylet."""

from __future__ import annotations

import os
from typing import Iterable, Mapping, Optional, Sequence

from . import _native
from .types import Allocation, NodeSnapshot, Telemetry


def _split_config(config: Mapping[str, str] | Mapping[str, Mapping[str, str]] | None):
    """{"sim.spec": "x"} or {"sim": {"spec": "x"}} -> {"sim": {"spec": "x"}}."""
    out: dict = {}
    for key, value in (config or {}).items():
        if isinstance(value, Mapping):
            out.setdefault(key, {}).update({str(k): str(v) for k, v in value.items()})
            continue
        plugin, dot, name = key.partition(".")
        if not dot or not plugin or not name:
            raise ValueError(f"config key {key!r} is not PLUGIN.KEY")
        out.setdefault(plugin, {})[name] = str(value)
    return out


NODE_CONFIG_FILE = "/etc/rayaccel/rayaccel.conf"


def _node_config_file() -> str:
    """The node's configuration file, as the rayaccel command finds it (docs/operations.md)."""
    named = os.environ.get("RAYACCEL_CONFIG_FILE")
    if named:
        return named
    return NODE_CONFIG_FILE if os.access(NODE_CONFIG_FILE, os.R_OK) else ""


class Registry:
    """The node's accelerators, through rayaccel's plugins.

    plugins: names or paths to load (empty: every plugin found on the search path).
    config: {"PLUGIN.KEY": value} or {"PLUGIN": {"KEY": value}}.
    isolation: "process" runs each plugin in a child process of its own (a crash in vendor
    code fails that plugin only); "none" loads them into this process.
    plugin_host: the rayaccel-plugin-host program (default: the one installed with
    librayaccel, in ../bin next to its folder).
    config_file: lines of "plugin.key = value", below `config` and the environment (default,
    with use_environment, as the rayaccel command takes it: $RAYACCEL_CONFIG_FILE, else
    /etc/rayaccel/rayaccel.conf when this user can read it).
    """

    def __init__(self, plugins: Iterable[str] = (), config=None, isolation: str = "process",
                 search_path: Sequence[str] = (), use_environment: bool = True,
                 host_topology: bool = True, hwloc_xml: str = "",
                 plugin_host: str = "", call_timeout: float = 10.0,
                 config_file: Optional[str] = None):
        if config_file is None:
            config_file = _node_config_file() if use_environment else ""
        self._native = _native.Registry(
            plugins=list(plugins), config=_split_config(config), isolation=isolation,
            search_path=list(search_path), use_environment=use_environment,
            host_topology=host_topology, hwloc_xml=hwloc_xml, plugin_host=plugin_host,
            call_timeout_ms=int(call_timeout * 1000), config_file=config_file)

    def snapshot(self) -> NodeSnapshot:
        return NodeSnapshot._from_native(self._native.snapshot())

    def rescan(self) -> NodeSnapshot:
        return NodeSnapshot._from_native(self._native.rescan())

    def wait_for_newer(self, generation: int, timeout: float) -> NodeSnapshot:
        """The first snapshot newer than `generation`, or the current one after `timeout` s."""
        return NodeSnapshot._from_native(self._native.wait_for_newer(generation, timeout))

    def telemetry(self) -> Telemetry:
        """What each device is doing now: every plugin with get_telemetry asked once (an
        isolated one within its call timeout); a plugin that fails has its error and no
        samples (docs/python.md)."""
        return Telemetry._from_native(self._native.telemetry())

    def validate_quantity(self, resource: str, quantity: int) -> None:
        """Raises InvalidArgumentError when the family cannot be asked for `quantity`."""
        self._native.validate_quantity(resource, quantity)

    def preferred_allocation(self, size: int, available: Sequence[str] = (),
                             must_include: Sequence[str] = (), resource: str = "") -> Allocation:
        """The best-connected `size` devices among `available` (empty: all of `resource`)."""
        a = self._native.preferred_allocation(list(available), list(must_include), size, resource)
        return Allocation(device_ids=tuple(a["device_ids"]), positions=tuple(a["positions"]),
                          generation=a["generation"], reason=a["reason"],
                          link_score=a["link_score"], leftover_score=a["leftover_score"])

    def prepare_allocation(self, device_ids: Sequence[str], generation: int = 0) -> dict:
        """The environment a worker given these devices needs ({"CUDA_VISIBLE_DEVICES": ...})."""
        return dict(self._native.prepare_allocation(list(device_ids), generation))

    def close(self) -> None:
        """Stops health watches and plugins; the last snapshot stays readable."""
        self._native.close()

    def __enter__(self) -> "Registry":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
