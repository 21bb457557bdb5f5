#include "rocm/kfd_topology.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <set>
#include <tuple>

namespace rayaccel::rocm {
namespace {

constexpr uint32_t kParentIndexBase = 65536;

// KFD memory heap types that are device frame buffer (kfd_crat.h: 1 FB public, 2 FB private).
bool IsFrameBuffer(uint64_t heap_type) { return heap_type == 1 || heap_type == 2; }

std::vector<KfdLink> ReadLinks(const std::string& dir, bool p2p, uint32_t node,
                               std::vector<std::string>* problems) {
  std::vector<KfdLink> links;
  for (uint32_t k : plugin::NumberedEntries(dir)) {
    std::string path = dir + "/" + std::to_string(k) + "/properties";
    std::optional<plugin::Properties> p = plugin::ReadProperties(path);
    if (!p || !p->Has("type") || !p->Has("node_to")) {
      problems->push_back("KFD node " + std::to_string(node) + ": " + path +
                          " is unreadable or incomplete; link ignored");
      continue;
    }
    KfdLink l;
    l.type = static_cast<uint32_t>(p->Get("type"));
    l.node_to = static_cast<uint32_t>(p->Get("node_to"));
    l.weight = static_cast<uint32_t>(p->Get("weight"));
    l.min_bandwidth = p->Get("min_bandwidth");
    l.max_bandwidth = p->Get("max_bandwidth");
    l.p2p = p2p;
    links.push_back(l);
  }
  return links;
}

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Links traversed between two KFD nodes over io_links, breadth-first; 0 when unreachable.
// io_links are followed both ways: the kernel lists a CPU-to-GPU link only for large-BAR GPUs.
uint32_t Hops(const std::vector<KfdNode>& nodes, uint32_t from, uint32_t to) {
  std::map<uint32_t, std::set<uint32_t>> next;
  for (const KfdNode& n : nodes) {
    for (const KfdLink& l : n.links) {
      if (l.p2p) continue;
      next[n.id].insert(l.node_to);
      next[l.node_to].insert(n.id);
    }
  }
  std::map<uint32_t, uint32_t> dist = {{from, 0}};
  std::deque<uint32_t> queue = {from};
  while (!queue.empty()) {
    uint32_t at = queue.front();
    queue.pop_front();
    if (at == to) return dist[at];
    for (uint32_t n : next[at]) {
      if (dist.count(n) > 0) continue;
      dist[n] = dist[at] + 1;
      queue.push_back(n);
    }
  }
  return 0;
}

}  // namespace

std::string GfxTarget(uint64_t v) {
  if (v == 0) return "";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "gfx%llu%llx%llx", static_cast<unsigned long long>(v / 10000),
                static_cast<unsigned long long>((v / 100) % 100),
                static_cast<unsigned long long>(v % 100));
  return buf;
}

std::string AmdProductName(uint32_t id, const std::string& gfx_target) {
  static const std::map<uint32_t, const char*> kNames = {
      {0x66a1, "AMD Instinct MI50"},   {0x738c, "AMD Instinct MI100"},
      {0x7408, "AMD Instinct MI250X"}, {0x740c, "AMD Instinct MI250X / MI250"},
      {0x740f, "AMD Instinct MI210"},  {0x74a0, "AMD Instinct MI300A"},
      {0x74a1, "AMD Instinct MI300X"}, {0x74a2, "AMD Instinct MI308X"},
      {0x74a5, "AMD Instinct MI325X"}, {0x74a9, "AMD Instinct MI300X HF"},
      {0x75a0, "AMD Instinct MI350X"}, {0x75a3, "AMD Instinct MI355X"},
  };
  auto it = kNames.find(id);
  if (it != kNames.end()) return it->second;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "AMD GPU 0x%04x%s%s", id, gfx_target.empty() ? "" : " ",
                gfx_target.c_str());
  return buf;
}

bool ReadKfdNodes(const std::string& topology_dir, std::vector<KfdNode>* nodes,
                  std::vector<std::string>* problems) {
  std::string nodes_dir = topology_dir + "/nodes";
  if (!plugin::IsDirectory(nodes_dir)) {
    problems->push_back("no KFD topology at " + nodes_dir + " (is the amdgpu driver loaded?)");
    return false;
  }
  for (uint32_t id : plugin::NumberedEntries(nodes_dir)) {
    std::string dir = nodes_dir + "/" + std::to_string(id);
    std::optional<plugin::Properties> props = plugin::ReadProperties(dir + "/properties");
    if (!props) {
      problems->push_back("KFD node " + std::to_string(id) +
                          ": properties unreadable (node gone?); skipped");
      continue;
    }
    KfdNode node;
    node.id = id;
    node.props = *std::move(props);
    if (!node.props.bad.empty()) {
      std::string list;
      for (const std::string& b : node.props.bad) list += (list.empty() ? "" : ", ") + b;
      problems->push_back("KFD node " + std::to_string(id) + ": unparsable properties (" + list +
                          "); skipped");
      continue;
    }
    if (std::optional<std::string> gpu_id = plugin::ReadLine(dir + "/gpu_id")) {
      node.gpu_id = static_cast<uint32_t>(std::strtoul(gpu_id->c_str(), nullptr, 10));
    }
    node.name = plugin::ReadLine(dir + "/name").value_or("");
    for (uint32_t bank : plugin::NumberedEntries(dir + "/mem_banks")) {
      std::optional<plugin::Properties> mem =
          plugin::ReadProperties(dir + "/mem_banks/" + std::to_string(bank) + "/properties");
      if (mem && IsFrameBuffer(mem->Get("heap_type"))) node.vram_bytes += mem->Get("size_in_bytes");
    }
    node.links = ReadLinks(dir + "/io_links", false, id, problems);
    std::vector<KfdLink> p2p = ReadLinks(dir + "/p2p_links", true, id, problems);
    node.links.insert(node.links.end(), p2p.begin(), p2p.end());
    nodes->push_back(std::move(node));
  }
  return true;
}

AmdTopology BuildTopology(const std::vector<KfdNode>& nodes, std::vector<std::string>* problems) {
  AmdTopology out;
  // NUMA: KFD lists one CPU node per NUMA node, first; a GPU's io_link to one gives affinity.
  std::map<uint32_t, int32_t> numa_of_cpu;
  for (const KfdNode& n : nodes) {
    if (!n.is_gpu()) {
      int32_t ordinal = static_cast<int32_t>(numa_of_cpu.size());
      numa_of_cpu[n.id] = ordinal;
    }
  }
  std::set<uint32_t> known;
  for (const KfdNode& n : nodes) known.insert(n.id);

  // Group GPU nodes into physical devices: same PCI domain:bus:device and unique_id.
  using Key = std::tuple<uint64_t, uint64_t, uint64_t, uint64_t>;
  std::map<Key, std::vector<const KfdNode*>> physical;
  std::vector<Key> order;
  for (const KfdNode& n : nodes) {
    if (!n.is_gpu()) continue;
    uint64_t loc = n.props.Get("location_id");
    Key key{n.props.Get("domain"), (loc >> 8) & 0xFF, (loc >> 3) & 0x1F, n.props.Get("unique_id")};
    if (physical.count(key) == 0) order.push_back(key);
    physical[key].push_back(&n);
  }

  std::map<uint32_t, uint32_t> index_of_node;  // KFD node -> schedulable device index
  std::vector<AmdDevice> parents;
  // Schedulable devices take HIP's order: GPU nodes by KFD node id.
  std::vector<const KfdNode*> gpus;
  for (const KfdNode& n : nodes) {
    if (n.is_gpu()) gpus.push_back(&n);
  }
  auto key_of = [&](const KfdNode* n) {
    for (const auto& [key, members] : physical) {
      if (std::find(members.begin(), members.end(), n) != members.end()) return key;
    }
    return Key{};
  };
  auto physical_id = [](const Key& key, const std::string& bus_id) {
    uint64_t unique = std::get<3>(key);
    return unique != 0 ? "GPU-" + Hex(unique) : "AMD-PCI-" + bus_id;
  };
  auto profile = [](size_t partitions, uint64_t num_xcc) -> std::string {
    if (partitions <= 1) return "";
    if (num_xcc == 1) return "CPX";
    if (partitions == 2) return "DPX";
    if (partitions == 4) return "QPX";
    return std::to_string(partitions) + "-way";
  };

  for (const KfdNode* n : gpus) {
    const Key key = key_of(n);
    const std::vector<const KfdNode*>& members = physical[key];
    uint64_t loc = n->props.Get("location_id");
    AmdDevice d;
    d.index = static_cast<uint32_t>(out.devices.size());
    d.kfd_node = n->id;
    d.kfd_gpu_id = n->gpu_id;
    d.pci_device_id = static_cast<uint32_t>(n->props.Get("device_id"));
    d.gfx_target = GfxTarget(n->props.Get("gfx_target_version"));
    d.name = AmdProductName(d.pci_device_id, d.gfx_target);
    // Partitions share the physical function's address; the function bits number them.
    std::string physical_bus = plugin::FormatPciBusId(static_cast<uint32_t>(std::get<0>(key)),
                                                      static_cast<uint32_t>(std::get<1>(key)),
                                                      static_cast<uint32_t>(std::get<2>(key)), 0);
    d.pci_bus_id = members.size() > 1
                       ? physical_bus
                       : plugin::FormatPciBusId(static_cast<uint32_t>(std::get<0>(key)),
                                                static_cast<uint32_t>(std::get<1>(key)),
                                                static_cast<uint32_t>(std::get<2>(key)),
                                                static_cast<uint32_t>(loc & 0x7));
    d.memory_bytes = n->vram_bytes != 0 ? n->vram_bytes : n->props.Get("local_mem_size");
    d.render_minor = static_cast<uint32_t>(n->props.Get("drm_render_minor"));
    uint64_t simd_per_cu = n->props.Get("simd_per_cu");
    d.compute_units = simd_per_cu != 0 ? n->props.Get("simd_count") / simd_per_cu : 0;
    d.num_xcc = n->props.Get("num_xcc");
    d.unique_id = n->props.Get("unique_id");
    d.hive_id = n->props.Get("hive_id");
    d.firmware_version = n->props.Get("fw_version");
    for (const KfdLink& l : n->links) {
      auto cpu = numa_of_cpu.find(l.node_to);
      if (!l.p2p && cpu != numa_of_cpu.end()) {
        d.numa_node = cpu->second;
        break;
      }
    }
    std::string parent = physical_id(key, physical_bus);
    if (members.size() > 1) {
      size_t position =
          static_cast<size_t>(std::find(members.begin(), members.end(), n) - members.begin());
      d.parent_id = parent;
      d.partition_profile = profile(members.size(), d.num_xcc);
      d.id = parent + "-part" + std::to_string(position);
      if (position == 0) {
        AmdDevice p = d;
        p.schedulable = false;
        p.id = parent;
        p.parent_id.clear();
        p.partition_profile.clear();
        p.index = kParentIndexBase + static_cast<uint32_t>(parents.size());
        p.memory_bytes = 0;
        for (const KfdNode* m : members) {
          p.memory_bytes += m->vram_bytes != 0 ? m->vram_bytes : m->props.Get("local_mem_size");
        }
        p.compute_units = 0;
        p.num_xcc = 0;
        for (const KfdNode* m : members) {
          uint64_t spc = m->props.Get("simd_per_cu");
          p.compute_units += spc != 0 ? m->props.Get("simd_count") / spc : 0;
          p.num_xcc += m->props.Get("num_xcc");
        }
        parents.push_back(p);
      }
    } else {
      d.id = parent;
    }
    index_of_node[n->id] = d.index;
    if (d.hive_id != 0) out.hives[d.hive_id].push_back(d.index);
    out.devices.push_back(std::move(d));
  }
  out.devices.insert(out.devices.end(), parents.begin(), parents.end());

  // Links between schedulable devices, each pair once (the first report wins: io_links come
  // before p2p_links, and the lower node first).
  std::set<std::pair<uint32_t, uint32_t>> seen;
  for (const KfdNode* n : gpus) {
    for (const KfdLink& l : n->links) {
      if (known.count(l.node_to) == 0) {
        problems->push_back("KFD node " + std::to_string(n->id) + ": link to node " +
                            std::to_string(l.node_to) + ", which does not exist; ignored");
        continue;
      }
      auto to = index_of_node.find(l.node_to);
      if (to == index_of_node.end()) continue;  // a CPU node
      uint32_t a = index_of_node[n->id], b = to->second;
      if (a == b) continue;
      std::pair<uint32_t, uint32_t> pair{std::min(a, b), std::max(a, b)};
      if (!seen.insert(pair).second) continue;
      AmdLink link{pair.first,
                   pair.second,
                   l.type,
                   l.weight,
                   l.p2p ? Hops(nodes, n->id, l.node_to) : 1,
                   l.min_bandwidth,
                   l.max_bandwidth};
      out.links.push_back(link);
    }
  }
  return out;
}

}  // namespace rayaccel::rocm
