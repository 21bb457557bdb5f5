"""Tier 5 of the conformance suite, "certified in Ray", against a real Ray 2.60 (build/venv):
the sim plugin reaches it with its report; plugins whose faults show only inside Ray (or also
there) fail it at the check named for the fault; without a Python with Ray it is not run, and
not reached."""

import glob
import json
import os
import subprocess

BUILD = os.environ["RAYACCEL_BUILD_DIR"]
SOURCE = os.environ["RAYACCEL_SOURCE_DIR"]
SUITE = os.path.join(BUILD, "bin", "rayaccel-conformance")
SIM = os.path.join(BUILD, "lib", "rayaccel", "plugins", "librayaccel-sim.so")
SPEC = os.path.join(SOURCE, "examples", "dgx-h100.json")


def shim(name):
    return os.path.join(BUILD, "tests", "sim-shims", f"librayaccel-{name}-sim.so")


def suite(plugin, *args, env=None):
    out = subprocess.run([SUITE, plugin, "--config", f"spec={SPEC}", "--json", *args],
                         capture_output=True, text=True, timeout=500,
                         env=dict(os.environ, **(env or {})))
    report = json.loads(out.stdout)
    return out.returncode, report, {c["name"]: c for c in report["checks"]}


def leftovers():
    """Ray processes or folders of the suite's runs still there."""
    # A run's Ray processes name its folder (their session dirs) or the runner's module.
    procs = subprocess.run(["pgrep", "-af", r"rayaccel-tier5-|rayaccel\._certify"],
                           capture_output=True, text=True).stdout.strip()
    return procs, glob.glob("/tmp/rayaccel-tier5-*")


def test_the_sim_plugin_is_certified_in_ray_with_its_report(tmp_path):
    rc, report, checks = suite(SIM, "--tier", "5", "--perf", "--report", str(tmp_path / "r"))
    failed = {c["name"]: c["message"] for c in report["checks"] if c["status"] == "fail"}
    assert rc == 0 and report["tier"] == 5 and report["tier_name"] == "certified in Ray", failed
    assert report["ray_version"] == "2.60.0"
    for name in ("ray.start_accepted", "ray.one_device_per_task", "ray.distributed_workload",
                 "ray.recovery", "ray.perf"):
        assert checks[name]["status"] == "pass", checks[name]
    assert checks["ray.perf"]["figures"]["ray.hop_64mib_gbps"] > 0
    assert "restarted source served the next read" in checks["ray.recovery"]["message"]
    written = json.loads((tmp_path / "r" / "report.json").read_text())
    assert written["tier"] == 5 and written["plugin"]["name"] == "sim"
    assert written["plugin"]["abi_version"] and written["versions"]["ray"] == "2.60.0"
    assert written["versions"]["python"] and written["versions"]["kernel"]
    assert "driver_version=550.54.15" in written["versions"]["drivers"]
    assert len([c for c in written["checks"] if c["tier"] == 5]) == 5
    md = (tmp_path / "r" / "report.md").read_text()
    assert "**Tier reached: 5 (certified in Ray)**" in md and "`ray.recovery`" in md
    assert leftovers() == ("", [])


def test_a_plugin_that_names_another_device_fails_in_ray():
    rc, report, checks = suite(shim("wrong-device"), "--tier", "5", "--perf")
    assert rc == 1 and report["tier"] < 5
    failed = checks["ray.one_device_per_task"]
    assert failed["status"] == "fail"
    assert "Ray assigned GPU" in failed["message"] and "CUDA_VISIBLE_DEVICES=" in \
        failed["message"] and "names another device" in failed["message"]


def test_a_transport_that_never_finishes_a_big_hop_fails_in_ray_alone():
    rc, report, checks = suite(shim("stalls-big"), "--tier", "5", "--perf", "--timeout", "3")
    assert rc == 1 and report["tier"] == 4, report  # tiers 1 to 4 pass: only Ray meets it
    hung = checks["ray.distributed_workload"]
    assert hung["status"] == "fail" and "8388608 bytes" in hung["message"] and \
        "was not done within" in hung["message"], hung
    for name in ("ray.recovery", "ray.perf"):
        assert checks[name]["status"] == "skip" and "transport hung" in checks[name]["message"]
    assert leftovers() == ("", [])


def test_without_a_python_with_ray_tier_5_is_not_run_and_not_reached():
    rc, report, checks = suite(SIM, "--tier", "5", "--ray-python", "/usr/bin/python3",
                               "--only", "ray")
    assert rc == 1
    for name in ("ray.start_accepted", "ray.perf"):
        assert checks[name]["status"] == "skip", checks[name]
        assert "has no Ray" in checks[name]["message"] and \
            "pip install ray==2.60.0" in checks[name]["message"], checks[name]
    # Not asked for (no --tier 5): not run.
    rc, report, checks = suite(SIM, "--only", "ray.start")
    assert checks["ray.start_accepted"]["status"] == "skip" and \
        "--tier 5" in checks["ray.start_accepted"]["message"]
