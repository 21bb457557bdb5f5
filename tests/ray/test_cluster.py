"""A cluster of rayaccel nodes in a real Ray: what `rayaccel ray-start-args` printed is what
Ray shows, and Ray schedules tasks, actors and placement groups on it (labels, topology,
each family's resource), as its own accelerator managers would."""

import os

import pytest
import ray
from ray.util.placement_group import placement_group, placement_group_table, \
    remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from conftest import add_node_options, cluster, ray_start_args

# Two trays of one NVL72 rack (the same NVLink domain), and one node of each other family.
LAYOUT = [("dgx-h100", "dgx-h100"), ("gb200-tray-a", "gb200-tray"),
          ("gb200-tray-b", "gb200-tray"), ("tpu-v4-host", "tpu-v4-host"),
          ("gaudi-hls2", "gaudi-hls2"), ("trn1-32xlarge", "trn1-32xlarge")]


@pytest.fixture(scope="module")
def nodes():
    printed = {name: ray_start_args(node) for name, node in LAYOUT}
    options = {name: add_node_options(args) for name, args in printed.items()}
    with cluster([(name, options[name]) for name, _ in LAYOUT]) as (_, ids):
        yield {name: (ids[name], options[name]) for name in ids}


@ray.remote(num_cpus=0)
def where(variable=None):
    return ray.get_runtime_context().get_node_id(), \
        os.environ.get(variable) if variable else None


def test_ray_shows_exactly_what_rayaccel_printed(nodes):
    by_id = {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}
    for name, (node_id, options) in nodes.items():
        node = by_id[node_id]
        resources = dict(options.get("resources", {}))
        if "num_gpus" in options:
            resources["GPU"] = options["num_gpus"]
        theirs = {k: v for k, v in node["Resources"].items()
                  if k not in ("CPU", "memory", "object_store_memory")
                  and not k.startswith("node:")}
        assert theirs == resources, name
        # Every label printed, as printed; Ray adds its node id and nothing else.
        assert node["Labels"] == dict(options["labels"], **{"ray.io/node-id": node_id}), name
    total = ray.cluster_resources()
    assert total["GPU"] == 16 and total["TPU"] == 4 and total["HPU"] == 8
    assert total["neuron_cores"] == 32 and total["accelerator_type:GB200"] == 2


def test_label_selectors_land_on_the_node_rayaccel_described(nodes):
    def run(selector, **resources):
        return ray.get(where.options(label_selector=selector, **resources).remote())[0]

    assert run({"ray.io/accelerator-type": "H100"}, num_gpus=1) == nodes["dgx-h100"][0]
    trays = {nodes["gb200-tray-a"][0], nodes["gb200-tray-b"][0]}
    assert run({"ray.io/accelerator-type": "!H100"}, num_gpus=1) in trays
    assert run({"rayaccel.io/gpu-count": "in(4,2)"}) in trays
    assert run({"rayaccel.io/gpu-count": "!in(4,8)", "rayaccel.io/hpu-vendor": "intel"},
               resources={"HPU": 1}) == nodes["gaudi-hls2"][0]
    assert run({"ray.io/tpu-worker-id": "0"}) == nodes["tpu-v4-host"][0]

    @ray.remote(num_cpus=0, label_selector={"rayaccel.io/neuron_cores-type": "aws-neuron-core"})
    class Pinned:
        def node(self):
            return ray.get_runtime_context().get_node_id()

    actor = Pinned.remote()
    assert ray.get(actor.node.remote()) == nodes["trn1-32xlarge"][0]
    ray.kill(actor)


def test_each_family_is_placed_as_rays_own_managers_place_it(nodes):
    """Ray's managers set each family's variable in the worker: the resource names rayaccel
    gave Ray are the ones Ray's managers own."""
    def run(variable, **resources):
        return ray.get(where.options(**resources).remote(variable))

    node, value = run("CUDA_VISIBLE_DEVICES", num_gpus=2)
    assert node in {nodes[n][0] for n in ("dgx-h100", "gb200-tray-a", "gb200-tray-b")}
    assert len(value.split(",")) == 2
    assert run("NEURON_RT_VISIBLE_CORES", resources={"neuron_cores": 2})[0] == \
        nodes["trn1-32xlarge"][0]
    node, value = run("TPU_VISIBLE_CHIPS", resources={"TPU": 4})
    assert node == nodes["tpu-v4-host"][0]
    node, value = run("HABANA_VISIBLE_MODULES", resources={"HPU": 1})
    assert node == nodes["gaudi-hls2"][0] and len(value.split(",")) == 1
    # And Ray's rules for the quantities: TPU takes 1, 2, 4 or 8 chips, HPU whole ones.
    with pytest.raises(ValueError):
        where.options(resources={"TPU": 3}).remote()
    with pytest.raises(ValueError):
        where.options(resources={"HPU": 0.5}).remote()


def bundle_nodes(pg):
    return set(placement_group_table(pg)["bundles_to_node_id"].values())


def test_a_placement_group_packs_into_one_nvlink_domain(nodes):
    """topology_strategy on ray.io/gpu-domain, the label rayaccel derives from the NVLink
    fabric: 8 GPUs fit only in the rack's two trays together (the DGX H100 has 8 too, but no
    domain label); 9 fit in no domain, and Ray keeps the group pending."""
    domain = {"ray.io/gpu-domain": "STRICT_PACK"}
    pg = placement_group([{"GPU": 1}] * 8, topology_strategy=domain)
    assert pg.wait(60)
    assert bundle_nodes(pg) == {nodes["gb200-tray-a"][0], nodes["gb200-tray-b"][0]}
    remove_placement_group(pg)

    too_big = placement_group([{"GPU": 1}] * 9, topology_strategy=domain)
    assert not too_big.wait(5)
    assert placement_group_table(too_big)["state"] == "PENDING"
    remove_placement_group(too_big)


def test_bundle_label_selectors_choose_the_node(nodes):
    pg = placement_group([{"TPU": 4}, {"GPU": 2}], strategy="SPREAD",
                         bundle_label_selector=[{"ray.io/tpu-pod-type": "v4-16"},
                                                {"ray.io/accelerator-type": "H100"}])
    assert pg.wait(60)
    table = placement_group_table(pg)["bundles_to_node_id"]
    assert table[0] == nodes["tpu-v4-host"][0] and table[1] == nodes["dgx-h100"][0]
    node, chips = ray.get(where.options(
        resources={"TPU": 4}, scheduling_strategy=PlacementGroupSchedulingStrategy(
            pg, placement_group_bundle_index=0)).remote("TPU_VISIBLE_CHIPS"))
    assert node == nodes["tpu-v4-host"][0] and chips == "0,1,2,3"
    remove_placement_group(pg)
