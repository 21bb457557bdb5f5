"""A Ray cluster started with TLS (RAY_USE_TLS and its files in this process's environment
from its start: Ray reads them once, so a test process that already imported Ray cannot turn it
on). A head and one node with the `ray start` options in argv[1] (options as Cluster.add_node
takes them, JSON); an actor holds one of the node's GPUs. Prints {"gcs", "node"} as a line, then
waits for a line on stdin and prints {"draining": [node ids Ray drains]} within 60 s of it."""

import json
import sys
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from conftest import cluster


@ray.remote(num_gpus=1, num_cpus=0)
class Worker:
    def node(self):
        return ray.get_runtime_context().get_node_id()


def main():
    with cluster([("t", json.loads(sys.argv[1]))]) as (c, ids):
        worker = Worker.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            ids["t"], soft=False)).remote()
        assert ray.get(worker.node.remote(), timeout=120) == ids["t"]
        print(json.dumps({"gcs": c.address, "node": ids["t"]}), flush=True)
        sys.stdin.readline()
        deadline = time.time() + 60
        while ids["t"] not in ray._private.state.state.get_draining_nodes() and \
                time.time() < deadline:
            time.sleep(0.2)
        print(json.dumps({"draining": list(ray._private.state.state.get_draining_nodes())}),
              flush=True)
        ray.kill(worker)


if __name__ == "__main__":
    main()
