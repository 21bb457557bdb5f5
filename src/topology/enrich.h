// Adds the host's topology to a snapshot: per-device NUMA node, CPUs and nearest NICs, PCIe
// path levels between every pair of PCI devices, and NVLink bandwidth hwloc knows.
#ifndef RAYACCEL_TOPOLOGY_ENRICH_H_
#define RAYACCEL_TOPOLOGY_ENRICH_H_

#include "rayaccel/snapshot.h"
#include "topology/host_topology.h"

namespace rayaccel {

// Plugin data wins: a NUMA node the plugin reported is kept; derived links are added with
// source "hwloc" next to the plugin's own. A device whose bus id hwloc does not know keeps
// its plugin data and gets a topology_note.
void EnrichWithHostTopology(const HostTopology& host, NodeSnapshot* snapshot);

// The link that describes a pair best, or nullptr when there is none: a direct link (NVLink,
// xGMI, ICI, ...), then a PCIe link with a known path level, then one without; of the same
// kind, the plugin's before hwloc's.
const Link* BestLink(const NodeSnapshot& snapshot, size_t a, size_t b);

}  // namespace rayaccel

#endif  // RAYACCEL_TOPOLOGY_ENRICH_H_
