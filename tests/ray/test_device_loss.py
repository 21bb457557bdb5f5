"""A device lost after `ray start` reaches Ray: two GPU nodes on the fake NVML, each with its
node's agent (`rayaccel serve`). An XID 79 (a GPU fallen off the bus) on a node whose agent runs
with `--on-device-loss drain` has Ray's GCS drain that node: it is draining in Ray, and new
`num_gpus=1` tasks land on the other node. With `report` (the default) the agent says so on its
page and Ray is left alone."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from conftest import FAKE_NVML, PLUGINS, RAYACCEL, add_node_options, cluster, source

FIXTURE = source("tests", "fixtures", "fake-nvml", "dgx-h100.json")
LOST_GPU = 3  # the fixture's fourth GPU


def machine_losing_a_gpu(tmp_path, name):
    """dgx-h100.json with an XID 79 on GPU 3 (which then falls off the bus) held back until the
    test creates the returned trigger file."""
    trigger = tmp_path / f"{name}.xid79"
    with open(FIXTURE) as f:
        machine = json.load(f)
    machine["events"] = [{"gpu": LOST_GPU, "type": 8, "data": 79, "after_ms": 0, "lost": True,
                          "when_file": str(trigger)}]
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(machine))
    return str(path), trigger


def cuda_args():
    return ["--plugin", "cuda", "--plugin-path", PLUGINS, "--config",
            "cuda.nvml_library=" + FAKE_NVML, "--no-host-topology"]


def start_args(fixture):
    out = subprocess.run([RAYACCEL, "ray-start-args", *cuda_args()],
                         env=dict(os.environ, FAKE_NVML_FIXTURE=fixture), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return add_node_options(out.stdout.strip())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def agent(fixture, tmp_path, name, *policy):
    """The node's agent on `fixture`, its web view on a free port; yields the view's URL once
    the agent serves its first snapshot (8 GPUs)."""
    sock = f"unix:{tmp_path}/{name}.sock"
    port = free_port()
    log = open(tmp_path / f"{name}.log", "w")
    proc = subprocess.Popen([RAYACCEL, "serve", *cuda_args(), "--rescan-interval", "0",
                             "--listen", sock, "--http", f"tcp://127.0.0.1:{port}", *policy],
                            env=dict(os.environ, FAKE_NVML_FIXTURE=fixture), stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 60
        while True:
            out = subprocess.run([RAYACCEL, "ray-start-args", "--agent", sock],
                                 capture_output=True, text=True, timeout=30)
            if "--num-gpus=8" in out.stdout:
                break
            assert proc.poll() is None and time.time() < deadline, \
                (tmp_path / f"{name}.log").read_text()
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        log.close()


def api_ray(url):
    with urllib.request.urlopen(url + "/api/ray", timeout=10) as r:
        return json.load(r)


def wait_for(what, condition, timeout=60):
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, what
        time.sleep(0.2)


def alive(node_id):
    return any(n["NodeID"] == node_id and n["Alive"] for n in ray.nodes())


@ray.remote(num_gpus=1, num_cpus=0)
class Worker:
    def node(self):
        return ray.get_runtime_context().get_node_id()


@ray.remote(num_gpus=1, num_cpus=0)
def gpu_task():
    return ray.get_runtime_context().get_node_id()


def test_a_gpu_lost_after_start_drains_the_node_and_work_goes_elsewhere(tmp_path):
    fixture_a, trigger_a = machine_losing_a_gpu(tmp_path, "a")
    fixture_b, trigger_b = machine_losing_a_gpu(tmp_path, "b")
    nodes = [("a", start_args(fixture_a)), ("b", start_args(fixture_b))]
    assert nodes[0][1]["num_gpus"] == 8 and nodes[1][1]["num_gpus"] == 8
    with cluster(nodes) as (c, ids):
        gcs = c.address
        with agent(fixture_a, tmp_path, "a") as view_a, \
                agent(fixture_b, tmp_path, "b", "--on-device-loss", "drain", "--gcs-address",
                      gcs, "--node-id", ids["b"]) as view_b:
            assert api_ray(view_a) == {"on_device_loss": "report", "lost": []}
            before = api_ray(view_b)
            assert before["lost"] == [] and before["drain"]["requested"] is False

            # report (the default): the agent says so, Ray is not asked.
            trigger_a.touch()
            wait_for("node A's agent to see GPU 3 lost", lambda: api_ray(view_a)["lost"])
            lost = api_ray(view_a)["lost"]
            assert [d["resource"] for d in lost] == ["GPU"] and "fell off the bus" in lost[0]["reason"]
            assert "drain" not in api_ray(view_a)

            # drain: Ray's GCS drains node B. An actor holding one of its GPUs keeps it busy
            # (an idle drained node's raylet exits at once).
            worker = Worker.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
                ids["b"], soft=False)).remote()
            assert ray.get(worker.node.remote(), timeout=120) == ids["b"]
            trigger_b.touch()
            wait_for("Ray to drain node B",
                     lambda: ids["b"] in ray._private.state.state.get_draining_nodes())
            assert ids["a"] not in ray._private.state.state.get_draining_nodes()
            state = api_ray(view_b)
            assert state["drain"]["accepted"] is True and state["drain"]["node_id"] == ids["b"]
            assert state["drain"]["attempts"] == 1 and "error" not in state["drain"]
            assert "fell off the bus" in state["drain"]["message"] and lost[0]["id"] in state["drain"]["message"]
            with urllib.request.urlopen(view_b + "/metrics", timeout=10) as r:
                metrics = r.read().decode()
            assert 'rayaccel_node_draining{policy="drain"} 1' in metrics
            assert "rayaccel_lost_devices 1" in metrics

            # New GPU work lands on node A only (node B still has 8 free GPUs in Ray's books).
            landed = ray.get([gpu_task.remote() for _ in range(6)], timeout=120)
            assert set(landed) == {ids["a"]}
            # What runs there goes on.
            assert ray.get(worker.node.remote(), timeout=60) == ids["b"]
            assert ids["b"] in ray._private.state.state.get_draining_nodes()

            # Once its work is done the drained node leaves the cluster, saying why.
            ray.kill(worker)
            wait_for("node B to leave", lambda: not alive(ids["b"]), timeout=90)
            assert alive(ids["a"])


def test_a_gcs_that_does_not_answer_is_retried_and_said(tmp_path):
    """No GCS where --gcs-address points: the agent says why on its page and in its log, tries
    again later, and goes on serving."""
    fixture, trigger = machine_losing_a_gpu(tmp_path, "c")
    nowhere = f"127.0.0.1:{free_port()}"
    with agent(fixture, tmp_path, "c", "--on-device-loss", "drain", "--gcs-address", nowhere,
               "--node-id", "ab" * 28) as view:
        trigger.touch()
        wait_for("two drain attempts", lambda: api_ray(view)["drain"]["attempts"] >= 2,
                 timeout=90)
        state = api_ray(view)["drain"]
        assert state["accepted"] is False and nowhere in state["error"], state
        assert len(api_ray(view)["lost"]) == 1
    log = (tmp_path / "c.log").read_text()
    assert "cannot drain node" in log and "device lost after start" in log


def test_without_node_id_the_agent_finds_its_node_in_rays_gcs(tmp_path):
    """As in a KubeRay pod, where the agent starts before Ray names the node: the agent asks
    Ray's GCS for the live node on this host that carries the labels rayaccel gave it (the
    head here shares the host but not the labels) and drains that one."""
    fixture, trigger = machine_losing_a_gpu(tmp_path, "d")
    with cluster([("d", start_args(fixture))]) as (c, ids):
        with agent(fixture, tmp_path, "d", "--on-device-loss", "drain", "--gcs-address",
                   c.address) as view:
            worker = Worker.remote()
            assert ray.get(worker.node.remote(), timeout=120) == ids["d"]
            trigger.touch()
            wait_for("Ray to drain node D",
                     lambda: ids["d"] in ray._private.state.state.get_draining_nodes())
            assert len(ray._private.state.state.get_draining_nodes()) == 1
            assert api_ray(view)["drain"]["node_id"] == ids["d"]
            ray.kill(worker)


def rays_tls(tmp_path):
    """RAY_USE_TLS and its three files: one self-signed certificate for this host's addresses as
    IP names (gRPC matches an address only against those), serving as Ray's CA, server and
    client certificate."""
    import datetime
    import ipaddress
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID
    from ray._common.network_utils import node_ip_address_from_perspective
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rayaccel-test")])
    names = [x509.DNSName("localhost")] + [
        x509.IPAddress(ipaddress.ip_address(a))
        for a in sorted({"127.0.0.1", node_ip_address_from_perspective()})]
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    (tmp_path / "ray.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "ray.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return {"RAY_USE_TLS": "1", "RAY_TLS_CA_CERT": str(tmp_path / "ray.crt"),
            "RAY_TLS_SERVER_CERT": str(tmp_path / "ray.crt"),
            "RAY_TLS_SERVER_KEY": str(tmp_path / "ray.key")}


def test_a_gcs_with_tls_is_found_and_drained_with_rays_certificates(tmp_path, monkeypatch):
    """A Ray started with RAY_USE_TLS: its GCS takes mutual TLS alone. The agent, in the same
    environment as Ray's processes, speaks it with Ray's certificates: it finds its node
    (GetAllNodeInfo) and drains it (DrainNode)."""
    fixture, trigger = machine_losing_a_gpu(tmp_path, "t")
    options = start_args(fixture)
    for name, value in rays_tls(tmp_path).items():
        monkeypatch.setenv(name, value)  # for the processes started here; Ray here read its own
    driver = subprocess.Popen(
        [sys.executable, os.path.join(os.path.dirname(__file__), "tls_cluster.py"),
         json.dumps(options)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=dict(os.environ, FAKE_NVML_FIXTURE=fixture), start_new_session=True)
    try:
        started = json.loads(driver.stdout.readline() or "{}")
        assert "gcs" in started, "the TLS cluster did not start"
        with agent(fixture, tmp_path, "t", "--on-device-loss", "drain", "--gcs-address",
                   started["gcs"]) as view:
            trigger.touch()
            wait_for("the agent's drain", lambda: api_ray(view)["drain"]["attempts"] >= 1)
            state = api_ray(view)["drain"]
            assert state["accepted"] is True and state["node_id"] == started["node"], state
            driver.stdin.write("check\n")
            driver.stdin.flush()
            assert json.loads(driver.stdout.readline())["draining"] == [started["node"]]
        assert driver.wait(timeout=120) == 0
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()


def test_tls_without_its_files_is_refused_at_start(tmp_path):
    """RAY_USE_TLS set but a certificate's variable missing, or its file unreadable or empty: the
    agent will not start, naming what is missing, rather than fail the drain when a device is
    lost (or speak plain TCP)."""
    fixture, _ = machine_losing_a_gpu(tmp_path, "n")
    command = [RAYACCEL, "serve", *cuda_args(), "--listen", f"unix:{tmp_path}/n.sock",
               "--on-device-loss", "drain", "--gcs-address", "127.0.0.1:1", "--node-id", "ab" * 28]
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_TLS_")}
    cert = tmp_path / "cert.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")
    for env, says in [({"RAY_USE_TLS": "1"}, "RAY_TLS_CA_CERT"),
                      ({"RAY_USE_TLS": "True", "RAY_TLS_CA_CERT": str(cert),
                        "RAY_TLS_SERVER_CERT": str(cert)}, "RAY_TLS_SERVER_KEY"),
                      ({"RAY_USE_TLS": "1", "RAY_TLS_CA_CERT": str(cert),
                        "RAY_TLS_SERVER_CERT": str(tmp_path / "missing.pem"),
                        "RAY_TLS_SERVER_KEY": str(cert)}, "missing.pem"),
                      ({"RAY_USE_TLS": "true", "RAY_TLS_CA_CERT": os.devnull,
                        "RAY_TLS_SERVER_CERT": str(cert), "RAY_TLS_SERVER_KEY": str(cert)},
                       "is empty")]:
        out = subprocess.run(command, env=dict(base, FAKE_NVML_FIXTURE=fixture, **env),
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and says in out.stderr, (env, out.returncode, out.stderr)
