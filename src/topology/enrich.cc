#include "topology/enrich.h"

#include <algorithm>
#include <map>

namespace rayaccel {

void EnrichWithHostTopology(const HostTopology& host, NodeSnapshot* snap) {
  std::vector<size_t> located;  // devices hwloc knows
  for (size_t i = 0; i < snap->devices.size(); ++i) {
    Device& d = snap->devices[i];
    if (d.pci_bus_id.empty()) continue;
    HostTopology::Placement place = host.Locate(d.pci_bus_id);
    if (!place.found) {
      d.topology_note =
          "PCI " + d.pci_bus_id + " is not in the host topology (" + host.source() + ")";
      continue;
    }
    located.push_back(i);
    if (d.numa_node < 0) d.numa_node = place.numa_node;
    d.cpuset = place.cpuset;
    d.nearest_nics = place.nearest_nics;
  }
  for (size_t x = 0; x < located.size(); ++x) {
    for (size_t y = x + 1; y < located.size(); ++y) {
      size_t a = located[x], b = located[y];
      const Device& da = snap->devices[a];
      const Device& db = snap->devices[b];
      // Partitions of one physical device share its bus id: no PCIe path between them.
      if (da.pci_bus_id == db.pci_bus_id) continue;
      PciePath path = host.PathBetween(da.pci_bus_id, db.pci_bus_id);
      if (path == PciePath::kUnknown) continue;
      snap->links.push_back(Link{a, b, LinkType::kPcie, 1, 0, path, "hwloc"});
    }
  }
  std::map<std::string, std::vector<size_t>> by_bus;
  for (size_t i : located) by_bus[snap->devices[i].pci_bus_id].push_back(i);
  for (const HostTopology::Nvlink& n : host.NvlinkBandwidth()) {
    auto a = by_bus.find(n.bus_a), b = by_bus.find(n.bus_b);
    if (a == by_bus.end() || b == by_bus.end()) continue;
    for (size_t i : a->second) {
      for (size_t j : b->second) {
        snap->links.push_back(Link{std::min(i, j), std::max(i, j), LinkType::kNvlink, n.count,
                                   n.bandwidth_mbps, PciePath::kUnknown, "hwloc"});
      }
    }
  }
}

const Link* BestLink(const NodeSnapshot& snap, size_t a, size_t b) {
  if (a > b) std::swap(a, b);
  const Link* best = nullptr;
  auto rank = [](const Link& l) {
    bool plugin = l.source != "hwloc";
    bool direct = l.type != LinkType::kPcie;
    bool path_known = l.pcie_path != PciePath::kUnknown;
    return (direct ? 4 : path_known ? 2 : 0) + (plugin ? 1 : 0);
  };
  for (const Link& l : snap.links) {
    if (l.a != a || l.b != b) continue;
    if (best == nullptr || rank(l) > rank(*best)) best = &l;
  }
  return best;
}

}  // namespace rayaccel
