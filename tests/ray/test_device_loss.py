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
