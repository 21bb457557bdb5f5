"""What rayaccel finds on a node, from Python: the snapshot, the best two devices and what a
worker given them needs, an error as Python sees it, and Ray's view through the
AcceleratorManager rayaccel makes for each family.

    python3 examples/python/discover.py [SIM_SPEC]

With a sim spec (examples/dgx-h100.json) it describes that simulated node; without, this one.
"""

import sys

import rayaccel
import rayaccel.ray


def main():
    if len(sys.argv) > 1:
        registry = rayaccel.Registry(plugins=["sim"], config={"sim.spec": sys.argv[1]},
                                     host_topology=False)
    else:
        registry = rayaccel.Registry()
    with registry as r:
        snap = r.snapshot()
        print(f"generation {snap.generation}: {len(snap.devices)} devices, "
              f"resources {dict(snap.resources)}")
        for p in snap.plugins:
            print(f"  plugin {p.name}: {p.state}, {p.device_count} devices"
                  + (f" ({p.message})" if p.message else ""))
        families = sorted({d.resource for d in snap.devices})
        for family in families:
            best = r.preferred_allocation(2, resource=family)
            if best.device_ids:
                print(f"best 2 {family}s: {', '.join(best.device_ids)} ({best.reason})")
                print(f"  a worker given them gets {r.prepare_allocation(best.device_ids)}")
            m = rayaccel.ray.accelerator_manager(family, r)
            print(f"Ray's {family} manager: {m.get_current_node_num_accelerators()} x "
                  f"{m.get_current_node_accelerator_type()}, "
                  f"visible through {m.get_visible_accelerator_ids_env_var()}, "
                  f"3 allowed: {m.validate_resource_request_quantity(3)}")
        try:
            r.prepare_allocation(["GPU-unknown"])
        except rayaccel.NotFoundError as e:
            print(f"an unknown device: {type(e).__name__} {e.code}: {e}")


if __name__ == "__main__":
    main()
