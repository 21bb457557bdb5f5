"""rayaccel inside a real Ray (the version requirements.txt pins, in build/venv): several
raylets on this host (ray.cluster_utils.Cluster), each given what `rayaccel ray-start-args`
prints for a node the plugins describe. One cluster per test module, one CPU per raylet, no
dashboard: Ray on two cores."""

import contextlib
import json
import os
import shlex
import subprocess

BUILD = os.environ["RAYACCEL_BUILD_DIR"]
SOURCE = os.environ["RAYACCEL_SOURCE_DIR"]
RAYACCEL = os.path.join(BUILD, "bin", "rayaccel")
PLUGINS = os.path.join(BUILD, "lib", "rayaccel", "plugins")
FAKE_NVML = os.path.join(BUILD, "tests", "fake-nvml-current", "libnvidia-ml.so.1")


def source(*parts):
    return os.path.join(SOURCE, *parts)


# The nodes of the tests, each as the plugin that describes it: rayaccel's arguments and the
# environment the plugin reads.
NODES = {
    "dgx-h100": (["--plugin", "sim", "--config", "sim.spec=" + source("examples", "dgx-h100.json")],
                 {}),
    "gb200-tray": (["--plugin", "cuda", "--config", "cuda.nvml_library=" + FAKE_NVML],
                   {"FAKE_NVML_FIXTURE": source("tests", "fixtures", "fake-nvml",
                                                "gb200-tray.json")}),
    "tpu-v4-host": (["--plugin", "sim", "--config",
                     "sim.spec=" + source("examples", "tpu-v4-host.json")], {}),
    "gaudi-hls2": (["--plugin", "gaudi", "--config",
                    "gaudi.sysfs_root=" + source("tests", "fixtures", "gaudi", "hls2", "sys")],
                   {}),
    "trn1-32xlarge": (["--plugin", "neuron", "--config",
                       "neuron.sysfs_root=" + source("tests", "fixtures", "neuron",
                                                     "trn1-32xlarge", "sys"),
                       "--config", "neuron.dev_root=" + source("tests", "fixtures", "neuron",
                                                               "trn1-32xlarge", "dev")], {}),
}


def ray_start_args(node: str) -> str:
    """What `rayaccel ray-start-args` prints for one of NODES."""
    args, env = NODES[node]
    out = subprocess.run([RAYACCEL, "ray-start-args", "--plugin-path", PLUGINS,
                          "--no-host-topology", *args],
                         env=dict(os.environ, **env), capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def add_node_options(start_args: str) -> dict:
    """`ray start` arguments as Cluster.add_node's, read with Ray's own parsers (those
    `ray start` uses: scripts.py), so that what Ray refuses fails here too."""
    from ray._private.label_utils import parse_node_labels_string
    options = {}
    for word in shlex.split(start_args):
        name, _, value = word.partition("=")
        if name == "--num-gpus":
            options["num_gpus"] = int(value)
        elif name == "--resources":
            options["resources"] = json.loads(value)
        elif name == "--labels":
            # ray start's parser, with its syntax check (label_utils.py: keys under ray.io/
            # are the user's to set since labels went beta; only ray.io/node-id is refused).
            options["labels"] = parse_node_labels_string(value)
        else:
            raise AssertionError(f"ray-start-args printed {word!r}, which this test does not "
                                 "know how to give Ray")
    return options


@contextlib.contextmanager
def environment(variables: dict):
    """os.environ with `variables` set (None: removed) while inside, as `env NAME=VALUE ray
    start` gives them to the processes it starts."""
    saved = {name: os.environ.get(name) for name in variables}
    try:
        for name, value in variables.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def cluster(nodes, **head):
    """A head without accelerators and a raylet per (name, add_node options[, environment]);
    yields the Cluster and {name: node id}. The driver is connected. A node's environment is
    what its raylet, and the workers it starts, are started with."""
    import ray
    from ray.cluster_utils import Cluster
    # Ray's workers import the test modules' remote classes by name.
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (here, os.environ.get("PYTHONPATH")) if p)
    c = Cluster(initialize_head=True,
                head_node_args=dict(dict(num_cpus=1, include_dashboard=False), **head))
    try:
        ids = {}
        for name, options, *env in nodes:
            with environment(env[0] if env else {}):
                ids[name] = c.add_node(num_cpus=1, **options).node_id
        ray.init(address=c.address)
        c.wait_for_nodes()
        yield c, ids
    finally:
        ray.shutdown()
        c.shutdown()
