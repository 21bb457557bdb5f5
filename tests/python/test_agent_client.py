"""rayaccel.AgentClient against a running `rayaccel serve` (real gRPC over a Unix socket and
over TLS on loopback TCP)."""

import json
import os
import re
import signal
import subprocess
import time

import pytest

import rayaccel
import rayaccel.ray
from rayaccel.agent import AgentClient
from conftest import BUILD, plugin, source

TLS = source("tests", "fixtures", "tls")


def serve(tmp_path, *args, log="agent.err"):
    err = open(tmp_path / log, "w")
    p = subprocess.Popen([os.path.join(BUILD, "bin", "rayaccel"), "--log-level", "info",
                          "serve", "--plugin", plugin("sim"), "--no-host-topology",
                          "--rescan-interval", "0", *args],
                         stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    deadline = time.time() + 20
    while "serving generation" not in (tmp_path / log).read_text():
        assert p.poll() is None and time.time() < deadline, (tmp_path / log).read_text()
        time.sleep(0.05)
    return p


@pytest.fixture
def agent(tmp_path):
    spec = tmp_path / "node.json"
    spec.write_text(open(source("examples", "dgx-h100.json")).read())
    token = tmp_path / "token"
    token.write_text("py-token-123\n")
    os.chmod(token, 0o600)
    p = serve(tmp_path, "--listen", f"unix:{tmp_path}/agent.sock", "--config",
              f"sim.spec={spec}", "--token-file", str(token))
    yield p, f"unix:{tmp_path}/agent.sock", spec
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)


def test_snapshot_plugins_and_allocation(agent):
    _, address, _ = agent
    with AgentClient(address, token="py-token-123") as c:
        snap = c.snapshot()
        assert snap.generation == 1 and len(snap.devices) == 8
        assert dict(snap.resources) == {"GPU": 8.0, "accelerator_type:H100": 1.0}
        assert snap.devices[0].health == "healthy" and snap.devices[0].numa_node == 0
        assert {l.type for l in snap.links} == {"nvlink"} and len(snap.links) == 28
        assert [p.name for p in c.plugins()] == ["sim"] and c.plugins()[0].state == "active"
        best = c.preferred_allocation(2, resource="GPU")
        assert len(best.device_ids) == 2 and best.generation == 1
        env = c.prepare_allocation(best.device_ids, best.generation)
        assert re.fullmatch(r"\d,\d", env["CUDA_VISIBLE_DEVICES"]), env
        with pytest.raises(rayaccel.NotFoundError):
            c.prepare_allocation(["GPU-nope"])
        gpu = rayaccel.ray.accelerator_manager("GPU", c)
        assert gpu.get_current_node_num_accelerators() == 8
        assert gpu.get_current_node_accelerator_type() == "H100"


def test_the_same_snapshot_as_the_local_registry(agent):
    _, address, spec = agent
    with AgentClient(address, token="py-token-123") as c, \
            rayaccel.Registry(plugins=[plugin("sim")], host_topology=False,
                              config={"sim.spec": str(spec)}) as r:
        remote, local = c.snapshot(), r.snapshot()
        assert remote.devices == local.devices and remote.links == local.links
        assert remote.resources == local.resources and remote.labels == local.labels


def test_telemetry_is_the_local_registrys_shape(agent):
    """GetTelemetry over gRPC reads as Registry.telemetry() does: the same devices, the same
    fields known (None where unknown), the same reasons by field name."""
    _, address, spec = agent
    with AgentClient(address, token="py-token-123") as c, \
            rayaccel.Registry(plugins=[plugin("sim")], host_topology=False,
                              config={"sim.spec": str(spec)}) as r:
        remote, local = c.telemetry(), r.telemetry()
        assert [d.device_id for d in remote.devices] == [d.device_id for d in local.devices]
        assert len(remote.devices) == 8 and remote.unix_ms > 0
        for a, b in zip(remote.devices, local.devices):
            for field in ("utilization_percent", "memory_total_bytes", "power_mw",
                          "temperature_c", "ecc_corrected", "link_errors"):
                assert (getattr(a, field) is None) == (getattr(b, field) is None), field
            assert a.memory_total_bytes == b.memory_total_bytes and a.index == b.index
        assert [p.name for p in remote.plugins] == ["sim"]
        assert dict(remote.plugins[0].unknown) == dict(local.plugins[0].unknown)


def test_watch_follows_a_health_change(agent):
    _, address, spec = agent
    with AgentClient(address, token="py-token-123") as c:
        watch = c.watch()
        assert next(watch).generation == 1
        data = json.loads(spec.read_text())
        data["devices"][1]["health"] = "unhealthy"
        (spec.parent / "next.json").write_text(json.dumps(data))
        os.rename(spec.parent / "next.json", spec)
        newer = next(watch)
        assert newer.generation == 2 and newer.devices[1].health == "unhealthy"
        assert newer.resources["GPU"] == 7
        watch.close()


def test_refusals_are_exceptions(agent, tmp_path):
    p, address, _ = agent
    with AgentClient(address) as c, pytest.raises(rayaccel.errors.UnauthenticatedError):
        c.snapshot()
    with AgentClient(address, token="wrong") as c, pytest.raises(rayaccel.Error):
        c.snapshot()
    with AgentClient(f"unix:{tmp_path}/nobody.sock", timeout=2) as c, \
            pytest.raises(rayaccel.UnavailableError):
        c.snapshot()
    with pytest.raises(ValueError):
        AgentClient("localhost:1234")


def test_a_lost_agent_ends_a_watch_with_an_error_not_a_hang(agent):
    p, address, _ = agent
    with AgentClient(address, token="py-token-123") as c:
        watch = c.watch()
        next(watch)
        p.kill()
        with pytest.raises(rayaccel.UnavailableError):
            next(watch)


def test_tls_with_a_client_certificate(tmp_path):
    port_file = tmp_path / "agent.err"
    p = serve(tmp_path, "--listen", "tcp://127.0.0.1:0", "--config",
              f"sim.spec={source('examples', 'dgx-h100.json')}",
              "--tls-cert", os.path.join(TLS, "server.pem"),
              "--tls-key", os.path.join(TLS, "server.key"),
              "--tls-client-ca", os.path.join(TLS, "ca.pem"))
    try:
        port = re.search(r"serving generation 1 on [^:]+:(\d+)", port_file.read_text()).group(1)
        with AgentClient(f"tcp://localhost:{port}", tls_ca=os.path.join(TLS, "ca.pem"),
                         tls_cert=os.path.join(TLS, "client.pem"),
                         tls_key=os.path.join(TLS, "client.key")) as c:
            assert len(c.snapshot().devices) == 8
        with AgentClient(f"tcp://localhost:{port}", tls_ca=os.path.join(TLS, "ca.pem"),
                         timeout=3) as c, pytest.raises(rayaccel.Error):
            c.snapshot()  # no client certificate
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)
