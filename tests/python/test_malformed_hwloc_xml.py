"""Malformed hwloc XML from outside, through every surface that reads it: the CLI (`topo
--hwloc-xml`, `discover --replay BUNDLE`), the agent (`serve --hwloc-xml`), the conformance
suite (`--replay BUNDLE`) and this package (Registry(hwloc_xml=...), HWLOC_XMLFILE). hwloc
2.9's XML import asserts on some malformed input (the reproducer: complete_cpuset=",x00004000",
"hwloc_bitmap_sscanf: Assertion `count > 0' failed"), which aborted the process that read it.
Each must now say what was wrong, name the file, and still report the node's devices."""

import json
import os
import random
import re
import signal
import subprocess
import sys
import time

import pytest

import rayaccel
from conftest import BUILD, plugin, source

RAYACCEL = os.path.join(BUILD, "bin", "rayaccel")
SPEC = source("tests", "fixtures", "specs", "xeon-3gpu.json")
GOOD = source("tests", "fixtures", "hwloc", "32em64t-2n8c2t-pci-wholeio.xml")


def reproducer():
    text = open(GOOD).read()
    return re.sub(r'complete_cpuset="[^"]*"', 'complete_cpuset=",x00004000"', text, count=1)


@pytest.fixture
def bad_xml(tmp_path):
    path = tmp_path / "bad.xml"
    path.write_text(reproducer())
    return str(path)


@pytest.fixture
def bad_bundle(tmp_path):
    good = tmp_path / "good.json"
    out = subprocess.run([RAYACCEL, "capture", "--plugin", plugin("sim"), "--config",
                          f"sim.spec={SPEC}", "--hwloc-xml", GOOD, "--out", str(good)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    bundle = json.loads(good.read_text())
    assert "complete_cpuset" in bundle["hwloc_xml"]
    bundle["hwloc_xml"] = reproducer()
    path = tmp_path / "bad-bundle.json"
    path.write_text(json.dumps(bundle))
    return str(path)


def aborted(message, named):
    return message.startswith("unavailable: hwloc aborted reading") and named in message and \
        "hwloc_bitmap_sscanf" in message


def test_cli_topo_and_discover(bad_xml):
    out = subprocess.run([RAYACCEL, "topo", "--plugin", plugin("sim"), "--config",
                          f"sim.spec={SPEC}", "--hwloc-xml", bad_xml],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "GPU2" in out.stdout
    assert f"Host topology: unavailable: hwloc aborted reading XML {bad_xml} (Aborted: " \
        "bitmap.c:" in out.stdout, out.stdout
    out = subprocess.run([RAYACCEL, "discover", "--json", "--plugin", plugin("sim"),
                          "--config", f"sim.spec={SPEC}", "--hwloc-xml", bad_xml],
                         capture_output=True, text=True, timeout=60)
    snap = json.loads(out.stdout)
    assert aborted(snap["host_topology"], bad_xml) and len(snap["devices"]) == 3
    assert snap["ray"]["resources"] == {"GPU": 3, "accelerator_type:A40": 1}


def test_cli_replay_of_a_bundle(bad_bundle):
    out = subprocess.run([RAYACCEL, "discover", "--replay", bad_bundle],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"Host topology: unavailable: the captured hwloc XML (XML {GOOD}): hwloc aborted " \
        f"reading XML {GOOD} (Aborted: bitmap.c:" in out.stdout and "GPU2" in out.stdout, out.stdout


def test_the_agent_serves_the_node_without_the_host_view(tmp_path, bad_xml):
    sock = f"unix:{tmp_path}/agent.sock"
    err = open(tmp_path / "agent.err", "w")
    p = subprocess.Popen([RAYACCEL, "--log-level", "info", "serve", "--plugin", plugin("sim"),
                          "--config", f"sim.spec={SPEC}", "--hwloc-xml", bad_xml,
                          "--rescan-interval", "0", "--listen", sock],
                         stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    try:
        deadline = time.time() + 30
        while "serving generation" not in (tmp_path / "agent.err").read_text():
            assert p.poll() is None and time.time() < deadline, \
                (tmp_path / "agent.err").read_text()
            time.sleep(0.05)
        with rayaccel.AgentClient(sock) as c:
            snap = c.snapshot()
        assert aborted(snap.host_topology, bad_xml) and len(snap.devices) == 3
        assert "hwloc aborted reading" in (tmp_path / "agent.err").read_text()
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=15) == 0


def test_the_suite_replays_the_bundle(bad_bundle):
    out = subprocess.run([os.path.join(BUILD, "bin", "rayaccel-conformance"), "--replay",
                          bad_bundle, "--config", "plugin=sim"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "Tier reached: 2" in out.stdout, out.stdout + out.stderr


def test_this_package_in_process(bad_xml, monkeypatch):
    with rayaccel.Registry(plugins=[plugin("sim")], config={"sim.spec": SPEC},
                           hwloc_xml=bad_xml) as r:
        snap = r.snapshot()
    assert aborted(snap.host_topology, bad_xml) and len(snap.devices) == 3
    monkeypatch.setenv("HWLOC_XMLFILE", bad_xml)
    with rayaccel.Registry(plugins=[plugin("sim")], config={"sim.spec": SPEC}) as r:
        snap = r.snapshot()
    assert aborted(snap.host_topology, f"{bad_xml} (HWLOC_XMLFILE)"), snap.host_topology


def test_truncated_and_bit_flipped_xml_never_take_the_process_down(tmp_path):
    """In one process: every variant is either read or refused with a reason."""
    good = open(GOOD, "rb").read()
    rng = random.Random(60)
    variants = [good] + [good[:n] for n in range(0, len(good), len(good) // 12)]
    for _ in range(24):
        flipped = bytearray(good)
        for _ in range(rng.randint(1, 8)):
            flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        variants.append(bytes(flipped))
    path = tmp_path / "variant.xml"
    outcomes = set()
    for variant in variants:
        path.write_bytes(variant)
        with rayaccel.Registry(plugins=[plugin("sim")], config={"sim.spec": SPEC},
                               hwloc_xml=str(path)) as r:
            snap = r.snapshot()
        assert len(snap.devices) == 3
        assert snap.host_topology == f"hwloc, XML {path}" or \
            (snap.host_topology.startswith("unavailable: ") and str(path) in snap.host_topology)
        outcomes.add(snap.host_topology.split(":")[0])
    assert outcomes == {"hwloc, XML " + str(path).split(":")[0], "unavailable"}
