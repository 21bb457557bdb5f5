"""rayaccel.Registry over the real extension module and real plugins."""

import dataclasses
import os

import pytest

import rayaccel
from conftest import plugin, source


def test_snapshot_is_frozen_dataclasses(sim_h100):
    snap = sim_h100.snapshot()
    assert isinstance(snap, rayaccel.NodeSnapshot) and snap.generation == 1
    assert [d.accelerator_type for d in snap.devices] == ["H100"] * 8
    assert snap.devices[0].name == "NVIDIA H100 80GB HBM3" and snap.devices[0].numa_node == 0
    assert len(snap.links) == 28 and {l.type for l in snap.links} == {"nvlink"}
    assert dict(snap.resources) == {"GPU": 8.0, "accelerator_type:H100": 1.0}
    assert snap.labels["ray.io/accelerator-type"] == "H100"
    assert snap.plugin("sim").state == "active"
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.generation = 2
    with pytest.raises(TypeError):
        snap.resources["GPU"] = 1


def test_the_plugin_runs_isolated_by_default(sim_h100):
    # The plugin host is a child of this process: the plugin's code is not in it.
    children = open(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read().split()
    names = [open(f"/proc/{c}/comm").read().strip() for c in children]
    assert any(n.startswith("rayaccel-plugin") for n in names), names


def test_allocation_and_its_environment(sim_h100):
    best = sim_h100.preferred_allocation(2, resource="GPU")
    assert len(best.device_ids) == 2 and best.generation == 1 and best.reason
    env = sim_h100.prepare_allocation(best.device_ids)
    indices = [str(sim_h100.snapshot().devices[p].index) for p in best.positions]
    assert env == {"CUDA_VISIBLE_DEVICES": ",".join(indices)}


def test_errors_carry_the_status(sim_h100):
    with pytest.raises(rayaccel.NotFoundError) as e:
        sim_h100.prepare_allocation(["GPU-no-such-device"])
    assert e.value.code == "NOT_FOUND" and "GPU-no-such-device" in str(e.value)
    with pytest.raises(rayaccel.InvalidArgumentError):
        rayaccel.Registry(plugins=[plugin("sim")], isolation="threads")
    with pytest.raises(ValueError, match="PLUGIN.KEY"):
        rayaccel.Registry(config={"spec": "x"})


def test_rescan_sees_a_spec_edit(tmp_path):
    import json
    spec = tmp_path / "node.json"
    data = json.load(open(source("examples", "dgx-h100.json")))
    spec.write_text(json.dumps(data))
    with rayaccel.Registry(plugins=[plugin("sim")], host_topology=False,
                           config={"sim.spec": str(spec)}) as r:
        data["devices"][5]["health"] = "unhealthy"
        data["devices"][5]["health_reason"] = "XID 48"
        spec.write_text(json.dumps(data))
        snap = r.rescan()
        assert snap.generation == 2 and snap.devices[5].health == "unhealthy"
        assert snap.devices[5].health_reason == "XID 48" and snap.resources["GPU"] == 7


def test_a_broken_plugin_is_reported_not_raised(tmp_path):
    bad = tmp_path / "librayaccel-notaplugin.so"
    bad.write_bytes(b"\x7fELF not really")
    os.chmod(bad, 0o755)
    with rayaccel.Registry(plugins=[str(bad), plugin("sim")], host_topology=False,
                           config={"sim.spec": source("examples", "dgx-h100.json")}) as r:
        snap = r.snapshot()
        assert snap.plugin("sim").state == "active" and len(snap.devices) == 8
        refused = [p for p in snap.plugins if p.state == "refused"]
        assert len(refused) == 1 and refused[0].message, snap.plugins


def test_telemetry_names_each_device_and_says_what_is_unknown(sim_h100):
    t = sim_h100.telemetry()
    assert isinstance(t, rayaccel.Telemetry) and t.unix_ms > 0
    ids = [d.id for d in sim_h100.snapshot().devices]
    assert [s.device_id for s in t.devices] == ids
    first = t.devices[0]
    assert first.plugin == "sim" and 0 <= first.utilization_percent <= 100
    assert first.memory_used_bytes <= first.memory_total_bytes
    assert first.link_errors is None  # the sim cannot say...
    (sim,) = t.plugins
    assert sim.error == "" and sim.unknown == {"link_errors": "a sim spec has no link error counters"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.power_mw = 0
