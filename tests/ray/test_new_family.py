"""A family Ray does not know, onboarded as docs/ray-integration.md says: a vendor's plugin in C
(tests/ray/zeta_plugin.c: resource zeta_z1, ZETA_VISIBLE_DEVICES), each node started with
`rayaccel ray-start-args` and in the environment `rayaccel ray-start-args --env` prints. Ray's
raylet tells a task which devices it holds only for the resources it counts by device (GPU and
RAY_custom_unit_instance_resources); without that every task of zeta_z1 was told device 0.

The cluster: a head without accelerators, a GPU node (the sim plugin's DGX H100), zeta node A
(four devices, any request shape) and zeta node B (five devices, device 2 unhealthy, requests
of 1, 2 or 4 devices only). The driver's managers are A's."""

import json
import os
import shlex
import subprocess
import sys
import textwrap
import time

import pytest
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from conftest import BUILD, RAYACCEL, add_node_options, cluster, environment, ray_start_args

ZETA_PLUGINS = os.path.join(BUILD, "tests", "zeta-plugin")
UNIT = "RAY_custom_unit_instance_resources"
A = {"RAYACCEL_ZETA_COUNT": "4"}
B = {"RAYACCEL_ZETA_COUNT": "5", "RAYACCEL_ZETA_UNHEALTHY": "2", "RAYACCEL_ZETA_SHAPES": "1,2,4"}


def zeta_environment(config):
    """What a vendor's node has before rayaccel runs: the plugin's folder and configuration;
    none of the variables rayaccel is to print."""
    return dict({k: v for k, v in os.environ.items()
                 if k not in (UNIT, "RAYACCEL_RAY_MANAGERS") and not k.startswith("RAYACCEL_ZETA_")},
                RAYACCEL_PLUGIN_PATH=ZETA_PLUGINS, **config)


def printed(config, *flags):
    out = subprocess.run([RAYACCEL, "ray-start-args", "--no-host-topology", *flags],
                         env=zeta_environment(config), capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip(), out.stderr


def node(config):
    """(add_node options, the environment its raylet starts in), from what rayaccel printed."""
    args, _ = printed(config)
    env_line, _ = printed(config, "--env")
    env = dict(pair.split("=", 1) for pair in shlex.split(env_line))
    return add_node_options(args), dict(env, RAYACCEL_PLUGIN_PATH=ZETA_PLUGINS, **config)


# rayaccel.ray.install() in a driver that starts its own node: nothing else set.
INSTALLED = """
import json, os, sys, time
import ray, rayaccel.ray
rayaccel.ray.install()
ray.init(num_cpus=1, include_dashboard=False)

@ray.remote(num_cpus=0, resources={"zeta_z1": 1})
def held(barrier):
    open(os.path.join(barrier, str(os.getpid())), "w").close()
    while len(os.listdir(barrier)) < 4:
        time.sleep(0.05)
    return os.environ.get("ZETA_VISIBLE_DEVICES")

print("RESULT " + json.dumps(ray.get([held.remote(sys.argv[1]) for _ in range(4)], timeout=240)))
ray.shutdown()
"""


def test_install_alone_makes_the_node_it_starts_count_by_device(tmp_path):
    """Run first, before this module's cluster: a node of its own."""
    out = subprocess.run([sys.executable, "-c", INSTALLED, str(tmp_path)],
                         env=zeta_environment(A), capture_output=True, text=True, timeout=300)
    lines = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
    assert out.returncode == 0 and lines, out.stdout + out.stderr[-4000:]
    assert sorted(json.loads(lines[-1][len("RESULT "):])) == ["0", "1", "2", "3"]


@pytest.fixture(scope="module")
def nodes():
    a, b = node(A), node(B)
    gpu = add_node_options(ray_start_args("dgx-h100"))
    layout = [("gpu", gpu, {UNIT: None, "RAYACCEL_RAY_MANAGERS": None}),
              ("a", *a), ("b", *b)]
    with cluster(layout) as (_, ids):
        # The driver validates requests with node A's plugin: rayaccel's managers installed
        # here once the nodes run (before, they would count A's devices on every node this
        # process starts).
        with environment(dict(a[1], RAYACCEL_RAY_MANAGERS="1")):
            import rayaccel.ray
            rayaccel.ray.install()
        yield ids


def test_ray_start_args_env_makes_ray_count_the_family_by_device():
    env_line, said = printed(A, "--env")
    env = dict(pair.split("=", 1) for pair in shlex.split(env_line))
    # Ray 2.60's own list, read from the installed _raylet.so, with the new family after it.
    assert env[UNIT] == "neuron_cores,TPU,NPU,HPU,RBLN,FURIOSA,TTNPU,MBLT,zeta_z1"
    assert "_raylet.so" in said and "zeta_z1" in said
    assert env["RAYACCEL_RAY_MANAGERS"] == "1"  # Ray has no manager of its own for zeta_z1
    assert env["ZETA_VISIBLE_DEVICES"] == "0,1,2,3"
    # A list the user set is kept whole, the family appended; one that names it stays as is.
    out = subprocess.run([RAYACCEL, "ray-start-args", "--env", "--no-host-topology"],
                         env=dict(zeta_environment(A), **{UNIT: "TPU,FPGA"}),
                         capture_output=True, text=True, timeout=60)
    assert f"{UNIT}='TPU,FPGA,zeta_z1'" in out.stdout, out
    out = subprocess.run([RAYACCEL, "ray-start-args", "--env", "--no-host-topology"],
                         env=dict(zeta_environment(A), **{UNIT: "zeta_z1,TPU"}),
                         capture_output=True, text=True, timeout=60)
    assert UNIT not in out.stdout, out
    # Plain ray-start-args says what is missing.
    args, said = printed(A)
    assert json.loads(shlex.split(args)[0].split("=", 1)[1]) == \
        {"zeta_z1": 4, "accelerator_type:Zeta-Z1": 1}
    assert "device 0" in said and UNIT in said


@ray.remote(num_cpus=0)
def holding(barrier=None, parties=0, resource="zeta_z1", variable="ZETA_VISIBLE_DEVICES"):
    """The devices of `resource` this task was given, as Ray and as the variable say; with a
    barrier folder, waits until `parties` tasks are inside at once."""
    if barrier:
        open(os.path.join(barrier, str(os.getpid())), "w").close()
        deadline = time.time() + 120
        while len(os.listdir(barrier)) < parties:
            assert time.time() < deadline, "the tasks did not run at once"
            time.sleep(0.05)
    return (sorted(ray.get_runtime_context().get_accelerator_ids().get(resource, [])),
            os.environ.get(variable))


def on(node_id, **resources):
    return holding.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False), **resources)


def concurrently(node_id, n, tmp_path, *args, **resources):
    barrier = tmp_path / f"barrier-{time.monotonic_ns()}"
    barrier.mkdir()
    return ray.get([on(node_id, **resources).remote(str(barrier), n, *args) for _ in range(n)],
                   timeout=240)


def test_four_tasks_at_once_get_four_different_devices(nodes, tmp_path):
    got = concurrently(nodes["a"], 4, tmp_path, resources={"zeta_z1": 1})
    for ids, visible in got:
        assert len(ids) == 1 and visible == ids[0], got  # the variable names Ray's device
    assert sorted(ids[0] for ids, _ in got) == ["0", "1", "2", "3"]


def test_a_two_device_task_gets_two(nodes):
    ids, visible = ray.get(on(nodes["a"], resources={"zeta_z1": 2}).remote())
    assert len(set(ids)) == 2 and sorted(visible.split(",")) == ids
    ids, visible = ray.get(on(nodes["a"], resources={"zeta_z1": 4}).remote())
    assert ids == ["0", "1", "2", "3"] and sorted(visible.split(",")) == ids


def test_an_actor_keeps_its_device_while_tasks_take_the_others(nodes, tmp_path):
    @ray.remote(num_cpus=0, resources={"zeta_z1": 1})
    class Holder:
        def seen(self):
            return (sorted(ray.get_runtime_context().get_accelerator_ids()["zeta_z1"]),
                    os.environ.get("ZETA_VISIBLE_DEVICES"))

    actor = Holder.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(nodes["a"], soft=False)).remote()
    mine, visible = ray.get(actor.seen.remote())
    assert len(mine) == 1 and visible == mine[0]
    others = concurrently(nodes["a"], 3, tmp_path, resources={"zeta_z1": 1})
    assert sorted(ids[0] for ids, _ in others) == sorted({"0", "1", "2", "3"} - set(mine))
    assert ray.get(actor.seen.remote()) == (mine, visible)
    ray.kill(actor)


def test_fractions_follow_the_plugins_validate_quantity(nodes, tmp_path):
    # A: every whole count up to four is accepted, so a fraction is: two halves share devices.
    got = concurrently(nodes["a"], 2, tmp_path, resources={"zeta_z1": 0.5})
    for ids, visible in got:
        assert len(ids) == 1 and visible == ids[0], got
    # B: 1, 2 or 4 devices; no fraction, no three. Asked by a driver with B's plugin.
    script = textwrap.dedent(f"""
        import ray, rayaccel.ray
        rayaccel.ray.install()
        ray.init(address={ray.get_runtime_context().gcs_address!r})
        @ray.remote(num_cpus=0)
        def f():
            return 1
        for q in (0.5, 3):
            try:
                f.options(resources={{"zeta_z1": q}})
                print("ACCEPTED", q)
            except ValueError as e:
                print("REFUSED", q, str(e).replace(chr(10), " "))
        print("TWO", ray.get(f.options(resources={{"zeta_z1": 2}}).remote()))
    """)
    out = subprocess.run([sys.executable, "-c", script],
                         env=dict(zeta_environment(B), RAYACCEL_RAY_MANAGERS="1"),
                         capture_output=True, text=True, timeout=180)
    assert "REFUSED 0.5" in out.stdout and "REFUSED 3" in out.stdout and \
        "TWO 1" in out.stdout, out.stdout + out.stderr[-3000:]
    assert "shapes" in out.stdout  # the plugin's own reason


def test_the_unhealthy_device_is_never_given_out(nodes, tmp_path):
    assert {n["NodeID"]: n for n in ray.nodes()}[nodes["b"]]["Resources"]["zeta_z1"] == 4
    got = concurrently(nodes["b"], 4, tmp_path, resources={"zeta_z1": 1})
    assert sorted(visible for _, visible in got) == ["0", "1", "3", "4"], got
    ids, visible = ray.get(on(nodes["b"], resources={"zeta_z1": 4}).remote())
    assert sorted(visible.split(",")) == ["0", "1", "3", "4"] and ids == ["0", "1", "3", "4"]


def test_the_gpu_node_beside_is_rays_own(nodes, tmp_path):
    """Ray's own NVIDIA manager there: two tasks at once, a GPU each, told apart as ever."""
    got = concurrently(nodes["gpu"], 2, tmp_path, "GPU", "CUDA_VISIBLE_DEVICES", num_gpus=1)
    assert len({visible for _, visible in got}) == 2, got
    for ids, visible in got:
        assert len(ids) == 1 and visible == ids[0], got
