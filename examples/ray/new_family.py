"""Four tasks of a family Ray does not know, at once, on a node started from `rayaccel
ray-start-args` and `ray-start-args --env` (docs/ray-integration.md, "A family Ray does not
know"): each is told a device of its own, and the family's variable names it.

    python new_family.py RESOURCE VARIABLE    # e.g. zeta_z1 ZETA_VISIBLE_DEVICES
"""

import os
import sys
import time

import ray

resource, variable = sys.argv[1], sys.argv[2]
ray.init(address="auto")
if ray.cluster_resources().get(resource, 0) < 4:
    sys.exit(f"no node with 4 {resource}: {ray.cluster_resources()}")


@ray.remote(num_cpus=0)
def held(started_at):
    time.sleep(max(0.0, started_at + 2 - time.time()))  # hold the device a while: all at once
    ids = ray.get_runtime_context().get_accelerator_ids()[resource]
    return ids, os.environ.get(variable)


tasks = [held.options(resources={resource: 1}).remote(time.time()) for _ in range(4)]
for ids, visible in sorted(ray.get(tasks, timeout=120)):
    print(f"a task given {resource} {ids} sees {variable}={visible}")
ray.shutdown()
