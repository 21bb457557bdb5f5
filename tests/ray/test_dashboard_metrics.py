"""Ray's own per-device metrics for families Ray's dashboard does not know: a Gaudi node (the
tests' libhlml.so, whose busy devices' values move) and a Trainium node (the Neuron driver's
per-core memory counters), each started with what `rayaccel ray-start-args` printed and
RAYACCEL_RAY_MANAGERS=1 in its environment. Ray's dashboard agent on each node then exports
ray_node_gpus_utilization, ray_node_gram_used, ... for their devices on the node's
--metrics-export-port, as it does for NVIDIA GPUs, and the values follow the devices; Ray's
dashboard (its Cluster page, in Chromium) shows them in its GPUs and GRAM columns."""

import os
import re
import shutil
import socket
import time
import urllib.request

import pytest

from conftest import FAKE_NVML, PLUGINS, add_node_options, cluster, ray_start_args, source

FAKE_HLML = os.path.join(os.path.dirname(os.path.dirname(FAKE_NVML)), "fake-hlml",
                         "libhlml.so")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def only(plugin, tmp_path):
    """A plugin folder holding one plugin: the node's registry loads that one alone."""
    folder = tmp_path / f"plugins-{plugin}"
    folder.mkdir()
    shutil.copy(os.path.join(PLUGINS, f"librayaccel-{plugin}.so"), folder)
    return str(folder)


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def series(text, name):
    """{(GpuIndex, GpuDeviceName): value} of one metric."""
    out = {}
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line[len(name):line.rindex("}")]))
        out[(labels.get("GpuIndex"), labels.get("GpuDeviceName"))] = float(line.split()[-1])
    return out


def wait_for(what, condition, timeout=90):
    deadline = time.time() + timeout
    while True:
        got = condition()
        if got:
            return got
        assert time.time() < deadline, what
        time.sleep(1)


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dashboard")
    neuron = tmp / "trn1"
    shutil.copytree(source("tests", "fixtures", "neuron", "trn1-32xlarge"), neuron,
                    symlinks=True)
    ports = {"gaudi": free_port(), "neuron": free_port(), "dashboard": free_port()}
    environments = {
        "gaudi": {"RAYACCEL_RAY_MANAGERS": "1", "RAYACCEL_PLUGIN_PATH": only("gaudi", tmp),
                  "RAYACCEL_GAUDI_SYSFS_ROOT": source("tests", "fixtures", "gaudi", "hls2",
                                                      "sys"),
                  "RAYACCEL_GAUDI_HLML_LIBRARY": FAKE_HLML,
                  "FAKE_HLML_FIXTURE": source("tests", "fixtures", "fake-hlml", "hls2.json")},
        "neuron": {"RAYACCEL_RAY_MANAGERS": "1", "RAYACCEL_PLUGIN_PATH": only("neuron", tmp),
                   "RAYACCEL_NEURON_SYSFS_ROOT": str(neuron / "sys"),
                   "RAYACCEL_NEURON_DEV_ROOT": str(neuron / "dev")},
    }
    printed = {"gaudi": "gaudi-hls2", "neuron": "trn1-32xlarge"}
    layout = [(name, dict(add_node_options(ray_start_args(printed[name])),
                          metrics_export_port=ports[name]), environments[name])
              for name in ("gaudi", "neuron")]
    with cluster(layout, include_dashboard=True, dashboard_port=ports["dashboard"]) as (_, ids):
        yield ports, neuron


def test_a_gaudi_nodes_devices_are_in_rays_gpu_metrics_and_move(nodes):
    ports, _ = nodes
    first = wait_for("Ray's reporter to export the Gaudi node's devices",
                     lambda: series(metrics(ports["gaudi"]), "ray_node_gpus_utilization"))
    assert len(first) == 8, first
    assert {name for _, name in first} == {"Intel Gaudi 2"}, first
    assert {index for index, _ in first} == {str(i) for i in range(8)}, first
    text = metrics(ports["gaudi"])
    memory = series(text, "ray_node_gram_used")
    available = series(text, "ray_node_gram_available")
    power = series(text, "ray_node_gpu_power_milliwatts")
    assert len(memory) == 8 and len(available) == 8
    # HLML's busy devices (fixture): memory in use and power above an idle device's.
    assert max(memory.values()) >= 8 * 1024 and min(memory.values()) == 0, memory
    assert all(m + a == 96 * 1024 for m, a in
               zip(sorted(memory.values()), sorted(available.values(), reverse=True))), available
    assert len(power) == 7, power  # one device's library call is not supported
    assert series(text, "ray_node_gpu_temperature_celsius")
    # The values follow the devices (the busy ones' utilization moves 3% a second).
    later = wait_for("the Gaudi utilization to move",
                     lambda: (lambda now: now if now != first else None)(
                         series(metrics(ports["gaudi"]), "ray_node_gpus_utilization")))
    assert set(later) == set(first)


def test_a_trainium_nodes_cores_are_in_rays_gpu_metrics_and_follow_the_driver(nodes):
    ports, neuron = nodes
    used = wait_for("Ray's reporter to export the Neuron node's cores",
                    lambda: series(metrics(ports["neuron"]), "ray_node_gram_used"))
    assert len(used) == 32, used
    assert used[("0", "Trainium1 NeuronCore")] == 4672  # MB: 4 GiB + 512 + 64 MiB in use
    assert used[("1", "Trainium1 NeuronCore")] == 2624
    available = series(metrics(ports["neuron"]), "ray_node_gram_available")
    assert available[("0", "Trainium1 NeuronCore")] == 16 * 1024 - 4672
    # No utilization in the driver: Ray records 0 for it, as for a GPU that does not say.
    assert set(series(metrics(ports["neuron"]), "ray_node_gpus_utilization").values()) == {0.0}

    # A model loads on core 0: its tensors grow, and Ray's metric follows.
    counter = neuron / "sys" / "devices" / "virtual" / "neuron_device" / "neuron0" / \
        "neuron_core0" / "stats" / "memory_usage" / "device_mem" / "tensors" / "total"
    counter.write_text(f"{8 << 30}\n")
    wait_for("Ray's metric to follow the driver",
             lambda: series(metrics(ports["neuron"]), "ray_node_gram_used").get(
                 ("0", "Trainium1 NeuronCore")) == 8 * 1024 + 576)


def test_rays_dashboard_shows_the_gaudi_nodes_devices_in_a_browser(nodes):
    """Ray's Cluster page, as a user opens it: the Gaudi node's row lists its eight devices
    under GPUs (utilization) and GRAM (used of 96 GB), and the numbers change as it refreshes."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    ports, _ = nodes
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1600,1000", "--no-first-run"):
        options.add_argument(a)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        driver.get(f"http://127.0.0.1:{ports['dashboard']}/#/cluster")

        def gaudi_row():
            for row in driver.find_elements(By.CSS_SELECTOR, "tr"):
                text = row.text
                if "96.00GB" in text and "[7]:" in text:
                    return text
            return None
        first = wait_for("the Gaudi node's devices on Ray's Cluster page", gaudi_row)
        assert all(f"[{i}]:" in first for i in range(8)), first
        assert first.count("/96.00GB") == 8, first
        assert len(re.findall(r"\d+\.\d%", first)) >= 8, first  # utilization, and CPU
        driver.save_screenshot(os.path.join(os.environ["RAYACCEL_BUILD_DIR"],
                                            "ray-dashboard-gaudi.png"))
        wait_for("Ray's page to show new values", lambda: (gaudi_row() or first) != first)
    finally:
        driver.quit()
