#include "present/render.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "rayaccel/plugin.h"
#include "topology/enrich.h"
#include "util/json.h"

namespace rayaccel::present {
namespace {

// A plain left-aligned text table with two spaces between columns.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string Render(const std::string& indent = "  ") const {
    std::vector<size_t> width(rows_[0].size(), 0);
    for (const auto& row : rows_) {
      for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
        width[i] = std::max(width[i], row[i].size());
      }
    }
    std::string out;
    for (const auto& row : rows_) {
      std::string line = indent;
      for (size_t i = 0; i < row.size(); ++i) {
        line += row[i];
        if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
    return out;
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string Memory(uint64_t bytes) {
  if (bytes == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
  return buf;
}

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

// "450 GB/s" from MB/s (10^6 bytes per second, each direction), "-" when unknown.
std::string Bandwidth(uint64_t mbps) {
  if (mbps == 0) return "-";
  if (mbps % 1000 == 0) return absl::StrCat(mbps / 1000, " GB/s");
  return absl::StrFormat("%.1f GB/s", mbps / 1000.0);
}

std::string LinkLabel(const Link& l) {
  if (l.type == LinkType::kOther && !l.type_name.empty()) {
    return l.count > 1 ? absl::StrCat(l.type_name, l.count) : l.type_name;
  }
  switch (l.type) {
    case LinkType::kPcie:
      return l.pcie_path == PciePath::kUnknown ? "PCIe" : PciePathName(l.pcie_path);
    case LinkType::kNvlink:
      return absl::StrCat("NV", l.count);
    case LinkType::kXgmi:
      return l.count > 1 ? absl::StrCat("XGMI", l.count) : "XGMI";
    default:
      return absl::StrCat(LinkTypeName(l.type), l.count > 1 ? absl::StrCat("x", l.count) : "");
  }
}

void WritePlugin(json::Writer& w, const PluginStatus& p) {
  w.BeginObject();
  w.Key("name").String(p.name);
  w.Key("path").String(p.path);
  w.Key("status").String(PluginStateName(p.state));
  w.Key("message").String(p.message);
  w.Key("abi_version").String(p.abi_version);
  w.Key("vendor").String(p.vendor);
  w.Key("version").String(p.plugin_version);
  w.Key("resource").String(p.resource_name);
  w.Key("visible_devices_env").String(p.visible_devices_env);
  w.Key("device_count").Uint(p.device_count);
  // The optional hooks it declared (plugin.h's RAYACCEL_CAP_*): what bounds its tier.
  w.Key("capabilities").BeginArray();
  static constexpr std::pair<uint64_t, const char*> kCapabilities[] = {
      {RAYACCEL_CAP_TOPOLOGY, "topology"},
      {RAYACCEL_CAP_HEALTH_EVENTS, "health_events"},
      {RAYACCEL_CAP_ALLOCATION, "allocation"},
      {RAYACCEL_CAP_TRANSPORT, "transport"},
      {RAYACCEL_CAP_THREAD_SAFE, "thread_safe"}};
  for (const auto& [bit, name] : kCapabilities) {
    if ((p.capabilities & bit) != 0) w.String(name);
  }
  w.EndArray();
  w.EndObject();
}

void WriteLinks(json::Writer& w, const NodeSnapshot& s) {
  w.Key("links").BeginArray();
  for (const Link& l : s.links) {
    w.BeginObject();
    w.Key("a").Uint(l.a);
    w.Key("b").Uint(l.b);
    w.Key("type").String(LinkTypeName(l.type));
    if (!l.type_name.empty()) w.Key("type_name").String(l.type_name);
    w.Key("count").Uint(l.count);
    w.Key("path").String(PciePathName(l.pcie_path));
    w.Key("bandwidth_mbps").Uint(l.bandwidth_mbps);
    w.Key("min_bandwidth_mbps").Uint(l.min_bandwidth_mbps);
    w.Key("weight").Uint(l.weight);
    w.Key("hops").Uint(l.hops);
    w.Key("source").String(l.source);
    w.EndObject();
  }
  w.EndArray();
}

// A device's name in tables: its resource and the plugin's index, the number a worker's
// visible-devices variable takes ("GPU5"), prefixed by the plugin ("sim:GPU5") where several
// plugins offer that resource.
std::vector<std::string> DeviceLabels(const NodeSnapshot& s) {
  std::map<std::string, std::set<std::string>> plugins_of;
  for (const Device& d : s.devices) plugins_of[d.resource].insert(d.plugin);
  std::vector<std::string> labels;
  for (const Device& d : s.devices) {
    const bool shared = plugins_of[d.resource].size() > 1;
    // A resource name ending in a digit keeps its index apart: "acme_x1-0", not "acme_x10".
    const bool digit = !d.resource.empty() && absl::ascii_isdigit(d.resource.back());
    labels.push_back(
        absl::StrCat(shared ? d.plugin + ":" : "", d.resource, digit ? "-" : "", d.index));
  }
  return labels;
}

// The nvidia-smi style cell for a pair.
std::string Cell(const NodeSnapshot& s, size_t a, size_t b) {
  if (a == b) return "X";
  const Link* l = BestLink(s, a, b);
  if (l == nullptr) return "-";
  if (l->type == LinkType::kNvlink) return l->count > 0 ? absl::StrCat("NV", l->count) : "NV";
  if (l->type == LinkType::kXgmi) return l->count > 1 ? absl::StrCat("XGMI", l->count) : "XGMI";
  if (l->type == LinkType::kIci) return "ICI";
  if (l->type == LinkType::kScaleOut) return "NET";
  if (l->type == LinkType::kOther) return l->type_name.empty() ? "OTHER" : LinkLabel(*l);
  return l->pcie_path == PciePath::kUnknown ? "PCIe" : PciePathName(l->pcie_path);
}

void WriteRay(json::Writer& w, const RayView& ray) {
  w.BeginObject();
  w.Key("resources").BeginObject();
  for (const auto& [name, quantity] : ray.resources) w.Key(name).Double(quantity);
  w.EndObject();
  w.Key("labels").BeginObject();
  for (const auto& [key, value] : ray.labels) w.Key(key).String(value);
  w.EndObject();
  w.EndObject();
}

std::string CompactJson(const std::map<std::string, double>& resources) {
  std::vector<std::string> parts;
  for (const auto& [name, quantity] : resources) {
    json::Writer value;
    std::string number = value.Double(quantity).Finish();
    number.pop_back();  // the writer's newline
    parts.push_back(json::Quote(name) + ": " + number);
  }
  return "{" + absl::StrJoin(parts, ", ") + "}";
}

}  // namespace

std::string ShellQuote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

std::string DiscoverJson(const NodeSnapshot& s) {
  json::Writer w;
  w.BeginObject();
  w.Key("generation").Uint(s.generation);
  w.Key("plugins").BeginArray();
  for (const PluginStatus& p : s.plugins) WritePlugin(w, p);
  w.EndArray();
  w.Key("devices").BeginArray();
  for (size_t i = 0; i < s.devices.size(); ++i) {
    const Device& d = s.devices[i];
    w.BeginObject();
    w.Key("position").Uint(i);
    w.Key("id").String(d.id);
    w.Key("plugin").String(d.plugin);
    w.Key("index").Uint(d.index);
    w.Key("resource").String(d.resource);
    w.Key("name").String(d.name);
    w.Key("vendor").String(d.vendor);
    w.Key("accelerator_type").String(d.accelerator_type);
    w.Key("architecture").String(d.architecture);
    w.Key("memory_bytes").Uint(d.memory_bytes);
    w.Key("pci_bus_id").String(d.pci_bus_id);
    w.Key("pci_vendor_id").Uint(d.pci_vendor_id);
    w.Key("pci_device_id").Uint(d.pci_device_id);
    if (d.numa_node >= 0) {
      w.Key("numa_node").Int(d.numa_node);
    } else {
      w.Key("numa_node").Null();
    }
    w.Key("driver_version").String(d.driver_version);
    w.Key("firmware_version").String(d.firmware_version);
    w.Key("parent_id").String(d.parent_id);
    w.Key("partition_profile").String(d.partition_profile);
    w.Key("health").String(HealthName(d.health));
    w.Key("health_reason").String(d.health_reason);
    w.Key("cpuset").String(d.cpuset);
    w.Key("nearest_nics").BeginArray();
    for (const std::string& nic : d.nearest_nics) w.String(nic);
    w.EndArray();
    w.Key("topology_note").String(d.topology_note);
    w.Key("attributes").BeginObject();
    for (const Attribute& a : d.attributes) {
      w.Key(a.name);
      switch (a.kind) {
        case Attribute::Kind::kInt:
          w.Int(a.int_value);
          break;
        case Attribute::Kind::kBool:
          w.Bool(a.int_value != 0);
          break;
        default:
          w.String(a.string_value);
      }
    }
    w.EndObject();
    w.EndObject();
  }
  w.EndArray();
  WriteLinks(w, s);
  w.Key("domains").BeginArray();
  for (const Domain& d : s.domains) {
    w.BeginObject();
    w.Key("plugin").String(d.plugin);
    w.Key("kind").String(d.kind);
    w.Key("id").String(d.id);
    w.Key("devices").BeginArray();
    for (size_t position : d.devices) w.Uint(position);
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.Key("host_topology").String(s.host_topology);
  w.Key("ray");
  WriteRay(w, s.ray);
  w.EndObject();
  return w.Finish();
}

std::string PluginsText(const NodeSnapshot& s) {
  if (s.plugins.empty()) return "No plugins found (set RAYACCEL_PLUGIN_PATH or --plugin).\n";
  Table t({"PLUGIN", "STATUS", "ABI", "DEVICES", "RESOURCE", "PATH", "MESSAGE"});
  for (const PluginStatus& p : s.plugins) {
    t.Add({p.name, PluginStateName(p.state), OrDash(p.abi_version), std::to_string(p.device_count),
           OrDash(p.resource_name), OrDash(p.path), p.message});
  }
  return t.Render("");
}

std::string PluginsJson(const NodeSnapshot& s) {
  json::Writer w;
  w.BeginObject().Key("plugins").BeginArray();
  for (const PluginStatus& p : s.plugins) WritePlugin(w, p);
  w.EndArray().EndObject();
  return w.Finish();
}

std::string DiscoverText(const NodeSnapshot& s) {
  std::string out = "Plugins\n";
  Table plugins({"NAME", "STATUS", "ABI", "DEVICES", "MESSAGE"});
  for (const PluginStatus& p : s.plugins) {
    plugins.Add({p.name, PluginStateName(p.state), OrDash(p.abi_version),
                 std::to_string(p.device_count), p.message});
  }
  out += s.plugins.empty() ? "  (none found)\n" : plugins.Render();

  out += "\nDevices\n";
  if (s.devices.empty()) {
    out += "  (none)\n";
  } else {
    Table devices(
        {"#", "DEVICE", "PLUGIN", "TYPE", "NAME", "PCI", "NUMA", "MEMORY", "HEALTH", "ID"});
    std::vector<std::string> labels = DeviceLabels(s);
    for (size_t i = 0; i < s.devices.size(); ++i) {
      const Device& d = s.devices[i];
      std::string health = HealthName(d.health);
      if (!d.health_reason.empty()) health += " (" + d.health_reason + ")";
      std::string name = d.name;
      if (!d.partition_profile.empty()) name += " [" + d.partition_profile + "]";
      devices.Add({std::to_string(i), labels[i], d.plugin, OrDash(d.accelerator_type), name,
                   OrDash(d.pci_bus_id), d.numa_node >= 0 ? std::to_string(d.numa_node) : "-",
                   Memory(d.memory_bytes), health, d.id});
    }
    out += devices.Render();
  }

  size_t derived = 0;
  Table links({"A", "B", "LINK", "BANDWIDTH", "SOURCE"});
  for (const Link& l : s.links) {
    if (l.source == "hwloc") {
      ++derived;
      continue;
    }
    links.Add({std::to_string(l.a), std::to_string(l.b), LinkLabel(l), Bandwidth(l.bandwidth_mbps),
               l.source});
  }
  if (s.links.size() > derived) out += "\nLinks\n" + links.Render();
  if (derived > 0) {
    out += absl::StrCat("\n", derived, " links derived from the host topology (", s.host_topology,
                        "): see `rayaccel topo`\n");
  }
  if (!s.domains.empty()) {
    out += "\nDomains\n";
    Table domains({"KIND", "ID", "DEVICES"});
    for (const Domain& d : s.domains) {
      domains.Add({d.kind, d.id, absl::StrJoin(d.devices, ",")});
    }
    out += domains.Render();
  }
  out += "\nRay\n";
  out += "  resources: " + CompactJson(s.ray.resources) + "\n";
  std::vector<std::string> labels;
  for (const auto& [k, v] : s.ray.labels) labels.push_back(k + "=" + v);
  out += "  labels:    " + (labels.empty() ? "-" : absl::StrJoin(labels, ", ")) + "\n";
  return out;
}

std::string ResourcesJson(const RayView& ray) { return CompactJson(ray.resources) + "\n"; }

std::string ResourcesText(const RayView& ray) {
  if (ray.resources.empty()) return "No accelerator resources.\n";
  Table t({"RESOURCE", "QUANTITY"});
  for (const auto& [name, quantity] : ray.resources) {
    json::Writer number;
    std::string q = number.Double(quantity).Finish();
    q.pop_back();
    t.Add({name, q});
  }
  return t.Render("");
}

std::string RayStartArgs(const RayView& ray) {
  std::vector<std::string> args;
  std::map<std::string, double> rest = ray.resources;
  if (auto gpu = rest.find("GPU"); gpu != rest.end()) {
    args.push_back(absl::StrCat("--num-gpus=", static_cast<int64_t>(gpu->second)));
    rest.erase(gpu);
  }
  if (!rest.empty()) args.push_back("--resources=" + ShellQuote(CompactJson(rest)));
  if (!ray.labels.empty()) {
    std::vector<std::string> pairs;
    for (const auto& [k, v] : ray.labels) pairs.push_back(k + "=" + v);
    args.push_back("--labels=" + ShellQuote(absl::StrJoin(pairs, ",")));
  }
  return absl::StrJoin(args, " ") + "\n";
}

std::string TopoText(const NodeSnapshot& s) {
  if (s.devices.empty()) return "No devices.\n";
  std::vector<std::string> labels = DeviceLabels(s);
  std::vector<std::string> header = {""};
  header.insert(header.end(), labels.begin(), labels.end());
  header.insert(header.end(), {"CPU Affinity", "NUMA Affinity", "Nearest NIC"});
  Table t(header);
  for (size_t a = 0; a < s.devices.size(); ++a) {
    const Device& d = s.devices[a];
    std::vector<std::string> row = {labels[a]};
    for (size_t b = 0; b < s.devices.size(); ++b) row.push_back(Cell(s, a, b));
    row.push_back(OrDash(d.cpuset));
    row.push_back(d.numa_node >= 0 ? std::to_string(d.numa_node) : "N/A");
    row.push_back(d.nearest_nics.empty() ? "-" : absl::StrJoin(d.nearest_nics, ","));
    t.Add(row);
  }
  std::string out = t.Render("");
  std::string notes;
  for (size_t i = 0; i < s.devices.size(); ++i) {
    if (!s.devices[i].topology_note.empty()) {
      notes += "  " + labels[i] + ": " + s.devices[i].topology_note + "\n";
    }
  }
  if (!notes.empty()) out += "\nNotes:\n" + notes;
  out += R"(
Legend:

  X      = Self
  SYS    = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes
  NODE   = Connection traversing PCIe as well as the interconnect between PCIe host bridges
           within a NUMA node
  PHB    = Connection traversing PCIe as well as a PCIe host bridge (typically the CPU)
  PXB    = Connection traversing multiple PCIe switches (without traversing the host bridge)
  PIX    = Connection traversing at most a single PCIe switch
  NV#    = Connection traversing a bonded set of # NVLinks (NV: count unknown)
  XGMI   = AMD Infinity Fabric (xGMI) link
  ICI    = TPU inter-chip interconnect
  NET    = Scale-out NIC fabric
  OTHER  = Another interconnect, unnamed by its plugin
  -      = Nothing known about this pair
)";
  // Interconnects plugins named themselves, and the bandwidth of each kind of cell.
  std::map<std::string, std::string> named;                   // name -> source
  std::map<std::pair<std::string, uint64_t>, size_t> speeds;  // (cell, MB/s) -> pairs
  for (size_t a = 0; a < s.devices.size(); ++a) {
    for (size_t b = a + 1; b < s.devices.size(); ++b) {
      const Link* l = BestLink(s, a, b);
      if (l == nullptr) continue;
      if (l->type == LinkType::kOther && !l->type_name.empty()) named[l->type_name] = l->source;
      if (l->bandwidth_mbps > 0) ++speeds[{Cell(s, a, b), l->bandwidth_mbps}];
    }
  }
  for (const auto& [name, source] : named) {
    out += absl::StrFormat("  %-6s = An interconnect named by %s (%s#: # bonded links)\n", name,
                           source, name);
  }
  if (!speeds.empty()) {
    out += "\nBandwidth (each direction, as the plugins state it):\n";
    for (const auto& [cell, pairs] : speeds) {
      out += absl::StrFormat("  %-6s = %s (%d pair%s)\n", cell.first, Bandwidth(cell.second), pairs,
                             pairs == 1 ? "" : "s");
    }
  }
  out += "\nHost topology: " + s.host_topology + "\n";
  return out;
}

std::string TopoJson(const NodeSnapshot& s) {
  std::vector<std::string> labels = DeviceLabels(s);
  json::Writer w;
  w.BeginObject();
  w.Key("host_topology").String(s.host_topology);
  w.Key("devices").BeginArray();
  for (size_t i = 0; i < s.devices.size(); ++i) {
    const Device& d = s.devices[i];
    w.BeginObject();
    w.Key("label").String(labels[i]);
    w.Key("position").Uint(i);
    w.Key("id").String(d.id);
    w.Key("pci_bus_id").String(d.pci_bus_id);
    if (d.numa_node >= 0) {
      w.Key("numa_node").Int(d.numa_node);
    } else {
      w.Key("numa_node").Null();
    }
    w.Key("cpuset").String(d.cpuset);
    w.Key("nearest_nics").BeginArray();
    for (const std::string& nic : d.nearest_nics) w.String(nic);
    w.EndArray();
    w.Key("topology_note").String(d.topology_note);
    w.EndObject();
  }
  w.EndArray();
  w.Key("matrix").BeginArray();
  for (size_t a = 0; a < s.devices.size(); ++a) {
    w.BeginArray();
    for (size_t b = 0; b < s.devices.size(); ++b) w.String(Cell(s, a, b));
    w.EndArray();
  }
  w.EndArray();
  WriteLinks(w, s);
  w.EndObject();
  return w.Finish();
}

std::string TopoDot(const NodeSnapshot& s) {
  std::vector<std::string> labels = DeviceLabels(s);
  std::string out = "graph rayaccel {\n  node [shape=box];\n";
  for (size_t i = 0; i < s.devices.size(); ++i) {
    const Device& d = s.devices[i];
    std::string label = labels[i] + "\n" + d.name;
    if (d.numa_node >= 0) label += absl::StrCat("\nNUMA ", d.numa_node);
    out += absl::StrCat("  d", i, " [label=", json::Quote(label), "];\n");
  }
  for (size_t a = 0; a < s.devices.size(); ++a) {
    for (size_t b = a + 1; b < s.devices.size(); ++b) {
      const Link* l = BestLink(s, a, b);
      if (l == nullptr) continue;
      bool direct = l->type != LinkType::kPcie;
      std::string label = Cell(s, a, b);
      if (l->bandwidth_mbps > 0) label += "\n" + Bandwidth(l->bandwidth_mbps);
      out += absl::StrCat(
          "  d", a, " -- d", b, " [label=", json::Quote(label),
          direct ? absl::StrCat(", penwidth=", 1 + std::min<uint32_t>(l->count, 18) / 3)
                 : ", style=dashed, color=gray",
          "];\n");
    }
  }
  return out + "}\n";
}

namespace {

std::string XmlEscape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        // Control bytes are not allowed in XML 1.0 text: shown as a space.
        out += (static_cast<unsigned char>(c) < 0x20 && c != '\t') ? ' ' : c;
    }
  }
  return out;
}

const char* LinkColour(LinkType type) {
  switch (type) {
    case LinkType::kNvlink:
      return "#76b900";
    case LinkType::kXgmi:
      return "#d7263d";
    case LinkType::kIci:
      return "#1f77b4";
    case LinkType::kScaleOut:
      return "#6f42c1";
    case LinkType::kOther:
      return "#fd7e14";
    default:
      return "#8d99ae";
  }
}

const char* HealthFill(Health health) {
  switch (health) {
    case Health::kHealthy:
      return "#e6f4ea";
    case Health::kUnhealthy:
      return "#fde2e4";
    default:
      return "#eef0f2";
  }
}

}  // namespace

std::string TopoSvg(const NodeSnapshot& s) {
  // Devices on a circle, in NUMA order, so that every pair's link is a chord; NUMA nodes named
  // outside the circle with their CPUs and nearest NICs; a legend counts links by kind.
  constexpr double kBoxW = 104, kBoxH = 44;
  constexpr size_t kMostLines = 400;  // beyond this many links, the legend alone
  const size_t n = s.devices.size();
  std::vector<std::string> labels = DeviceLabels(s);
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return s.devices[a].numa_node < s.devices[b].numa_node;
  });
  const double radius = std::max(170.0, n * (kBoxW + 12) / (2 * 3.14159265358979));
  const double cx = radius + kBoxW + 150, cy = radius + kBoxH + 90;
  std::vector<double> x(n), y(n), angle(n);
  for (size_t k = 0; k < n; ++k) {
    angle[order[k]] = -3.14159265358979 / 2 + 2 * 3.14159265358979 * k / std::max<size_t>(n, 1);
    x[order[k]] = cx + radius * std::cos(angle[order[k]]);
    y[order[k]] = cy + radius * std::sin(angle[order[k]]);
  }
  // The link drawn between each pair: the best one (docs/topology.md), direct links only when
  // there are any, PCIe paths otherwise.
  struct Line {
    size_t a, b;
    const Link* link;
  };
  std::vector<Line> lines;
  bool any_direct = false;
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = a + 1; b < n; ++b) {
      if (const Link* l = BestLink(s, a, b)) {
        lines.push_back({a, b, l});
        any_direct = any_direct || l->type != LinkType::kPcie;
      }
    }
  }
  if (any_direct) {
    lines.erase(std::remove_if(lines.begin(), lines.end(),
                               [](const Line& l) { return l.link->type == LinkType::kPcie; }),
                lines.end());
  }
  auto kind_of = [](const Link& link) {
    std::string kind = LinkLabel(link);
    if (link.bandwidth_mbps > 0) kind += ", " + Bandwidth(link.bandwidth_mbps);
    return kind;
  };
  std::map<std::string, std::pair<size_t, const Link*>> kinds;  // "NV18, 450 GB/s" -> count
  for (const Line& l : lines) {
    auto& entry = kinds[kind_of(*l.link)];
    ++entry.first;
    entry.second = l.link;
  }
  // Past kMostLines the chords would be a solid disc. A kind of link that joins every pair of
  // its devices (an NVL72 rack's NVSwitch fabric: 2556 NV18 chords among 72 GPUs) is then
  // drawn as what it is, a fabric: one hub, and a spoke to each of its devices.
  struct Hub {
    std::string kind;
    const Link* link;
    std::vector<size_t> members;
  };
  std::vector<Hub> hubs;
  if (lines.size() > kMostLines) {
    std::map<std::string, std::set<size_t>> ends;
    for (const Line& l : lines) {
      std::set<size_t>& e = ends[kind_of(*l.link)];
      e.insert(l.a);
      e.insert(l.b);
    }
    std::set<std::string> fabrics;
    for (const auto& [kind, members] : ends) {
      const size_t m = members.size();
      if (m > 2 && kinds[kind].first == m * (m - 1) / 2) {
        hubs.push_back({kind, kinds[kind].second, {members.begin(), members.end()}});
        fabrics.insert(kind);
      }
    }
    lines.erase(std::remove_if(lines.begin(), lines.end(),
                               [&](const Line& l) { return fabrics.count(kind_of(*l.link)); }),
                lines.end());
  }

  std::vector<std::string> notes;
  std::map<int, std::pair<std::string, std::set<std::string>>> numa;  // cpus, nics
  for (const Device& d : s.devices) {
    auto& entry = numa[d.numa_node];
    if (entry.first.empty()) entry.first = d.cpuset;
    entry.second.insert(d.nearest_nics.begin(), d.nearest_nics.end());
  }
  const double legend_y = cy + radius + kBoxH + 40;
  const double height = legend_y + 24 * (kinds.size() + s.domains.size() + numa.size() + 3);
  const double width = 2 * cx;
  std::string out = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
      width, height, width, height);
  absl::StrAppend(
      &out, "<title>",
      XmlEscape(absl::StrCat("rayaccel topology: ", n, " devices, generation ", s.generation)),
      "</title>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  size_t drawn_or_not = lines.size();
  for (const Hub& h : hubs) drawn_or_not += h.members.size() * (h.members.size() - 1) / 2;
  absl::StrAppend(&out, "<text x=\"16\" y=\"28\" font-size=\"16\" font-weight=\"bold\">",
                  XmlEscape(absl::StrCat(n, " devices, ", drawn_or_not, " links (snapshot ",
                                         s.generation, ")")),
                  "</text>\n");
  // NUMA groups: an arc behind their devices, named outside the circle.
  std::map<int, std::vector<size_t>> by_numa;
  for (size_t i = 0; i < n; ++i) by_numa[s.devices[i].numa_node].push_back(i);
  for (const auto& [node, members] : by_numa) {
    double sx = 0, sy = 0;
    for (size_t i : members) {
      sx += std::cos(angle[i]);
      sy += std::sin(angle[i]);
    }
    const double mean = std::atan2(sy, sx);
    const double lx = cx + (radius + kBoxW) * std::cos(mean);
    const double ly = cy + (radius + kBoxH + 20) * std::sin(mean);
    const auto& [cpus, nics] = numa[node];
    std::string text = node >= 0 ? absl::StrCat("NUMA ", node) : "NUMA unknown";
    if (!cpus.empty()) absl::StrAppend(&text, ", CPUs ", cpus);
    if (!nics.empty()) {
      absl::StrAppend(&text, ", NICs ", absl::StrJoin(nics.begin(), nics.end(), " "));
    }
    absl::StrAppendFormat(&out,
                          "<text class=\"numa\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
                          "fill=\"#495057\">%s</text>\n",
                          lx, ly, XmlEscape(text));
  }
  // Links, under the devices.
  if (lines.size() <= kMostLines) {
    for (const Line& l : lines) {
      const Link& link = *l.link;
      const bool direct = link.type != LinkType::kPcie;
      std::string tip = absl::StrCat(labels[l.a], " - ", labels[l.b], ": ", LinkLabel(link));
      if (link.bandwidth_mbps > 0) absl::StrAppend(&tip, ", ", Bandwidth(link.bandwidth_mbps));
      absl::StrAppendFormat(
          &out,
          "<line class=\"link\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
          "stroke-width=\"%.1f\"%s><title>%s</title></line>\n",
          x[l.a], y[l.a], x[l.b], y[l.b], LinkColour(link.type),
          direct ? 1 + std::min<uint32_t>(link.count, 18) / 4.0 : 1.0,
          direct ? "" : " stroke-dasharray=\"4 3\"", XmlEscape(tip));
      if (lines.size() <= 12) {
        absl::StrAppendFormat(&out,
                              "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
                              "fill=\"%s\">%s</text>\n",
                              (x[l.a] + x[l.b]) / 2, (y[l.a] + y[l.b]) / 2 - 4,
                              LinkColour(link.type), XmlEscape(LinkLabel(link)));
      }
    }
  }
  // Fabrics: a hub inside the circle, a spoke to each device it joins.
  for (size_t k = 0; k < hubs.size(); ++k) {
    const Hub& h = hubs[k];
    const double a = 2 * 3.14159265358979 * k / hubs.size();
    const double hx = cx + (hubs.size() > 1 ? radius / 3 * std::cos(a) : 0);
    const double hy = cy + (hubs.size() > 1 ? radius / 3 * std::sin(a) : 0);
    const std::string colour = LinkColour(h.link->type);
    for (size_t i : h.members) {
      absl::StrAppendFormat(&out,
                            "<line class=\"spoke\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
                            "y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.5\" "
                            "stroke-opacity=\"0.6\"/>\n",
                            hx, hy, x[i], y[i], colour);
    }
    const std::string text =
        absl::StrCat(h.kind, " between every pair of ", h.members.size(), " devices");
    absl::StrAppendFormat(&out,
                          "<g class=\"fabric\"><title>%s</title><rect x=\"%.1f\" y=\"%.1f\" "
                          "width=\"240\" height=\"44\" rx=\"8\" fill=\"white\" stroke=\"%s\" "
                          "stroke-width=\"2\"/><text x=\"%.1f\" y=\"%.1f\" "
                          "text-anchor=\"middle\" font-weight=\"bold\">%s</text><text "
                          "x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
                          "fill=\"#495057\">%s</text></g>\n",
                          XmlEscape(text), hx - 120, hy - 22, colour, hx, hy - 4,
                          XmlEscape(absl::StrCat(h.kind, " fabric")), hx, hy + 13,
                          XmlEscape(absl::StrCat(h.members.size(), " devices, every pair")));
  }
  // Devices.
  for (size_t i = 0; i < n; ++i) {
    const Device& d = s.devices[i];
    std::string tip = absl::StrCat(labels[i], ": ", d.name, " (", d.id, "), ", HealthName(d.health),
                                   d.health_reason.empty() ? "" : ": " + d.health_reason);
    absl::StrAppendFormat(
        &out,
        "<g class=\"device %s\"><title>%s</title>"
        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.0f\" height=\"%.0f\" rx=\"6\" fill=\"%s\" "
        "stroke=\"%s\" stroke-width=\"1.5\"/>"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-weight=\"bold\">%s</text>"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#495057\">%s</text></g>\n",
        HealthName(d.health), XmlEscape(tip), x[i] - kBoxW / 2, y[i] - kBoxH / 2, kBoxW, kBoxH,
        HealthFill(d.health), d.health == Health::kUnhealthy ? "#d7263d" : "#495057", x[i],
        y[i] - 3, XmlEscape(labels[i]), x[i], y[i] + 13, XmlEscape(OrDash(d.accelerator_type)));
  }
  // Legend: links by kind, domains.
  double ly = legend_y;
  if (lines.size() > kMostLines) {
    absl::StrAppendFormat(&out, "<text x=\"16\" y=\"%.1f\">%s</text>\n", ly,
                          XmlEscape(absl::StrCat(lines.size(), " links: too many to draw")));
    ly += 20;
  }
  for (const auto& [kind, entry] : kinds) {
    absl::StrAppendFormat(
        &out,
        "<line x1=\"16\" y1=\"%.1f\" x2=\"46\" y2=\"%.1f\" stroke=\"%s\" "
        "stroke-width=\"3\"/><text class=\"legend\" x=\"54\" y=\"%.1f\">%s</text>\n",
        ly - 4, ly - 4, LinkColour(entry.second->type), ly,
        XmlEscape(absl::StrCat(entry.first, " x ", kind)));
    ly += 20;
  }
  for (const Domain& d : s.domains) {
    std::vector<std::string> members;
    for (size_t p : d.devices) {
      if (p < labels.size()) members.push_back(labels[p]);
    }
    if (members.size() > 16) {  // a rack's domain: its size and ends, not 72 names in a line
      members = {
          absl::StrCat(members.size(), " devices: ", members.front(), " ... ", members.back())};
    }
    absl::StrAppendFormat(
        &out, "<text class=\"domain\" x=\"16\" y=\"%.1f\">%s</text>\n", ly,
        XmlEscape(absl::StrCat(d.kind, " domain ", d.id, ": ", absl::StrJoin(members, " "))));
    ly += 20;
  }
  return out + "</svg>\n";
}

std::string AllocationText(const NodeSnapshot& s, const Allocation& a,
                           const std::map<std::string, std::string>& env) {
  if (a.devices.empty()) return "No allocation: " + a.reason + "\n";
  std::vector<std::string> labels = DeviceLabels(s);
  Table t({"POSITION", "DEVICE", "INDEX", "ID", "NUMA", "PCI"});
  for (size_t p : a.devices) {
    const Device& d = s.devices[p];
    t.Add({std::to_string(p), labels[p], std::to_string(d.index), d.id,
           d.numa_node >= 0 ? std::to_string(d.numa_node) : "-", OrDash(d.pci_bus_id)});
  }
  std::string out = t.Render("") + "\nA worker given these devices gets:\n";
  for (const auto& [name, value] : env) absl::StrAppend(&out, "  ", name, "=", value, "\n");
  absl::StrAppend(&out, "\nscore ", a.link_score, ", leftover ", a.leftover_score, " (", a.reason,
                  ")\n",
                  "  (the links inside the set and among the devices left, higher is better; "
                  "docs/topology.md)\n");
  return out;
}

std::string AllocationJson(const NodeSnapshot& s, const Allocation& a,
                           const std::map<std::string, std::string>& env) {
  json::Writer w;
  w.BeginObject();
  w.Key("devices").BeginArray();
  for (size_t p : a.devices) w.Uint(p);
  w.EndArray();
  w.Key("indexes").BeginArray();
  for (size_t p : a.devices) w.Uint(s.devices[p].index);
  w.EndArray();
  w.Key("ids").BeginArray();
  for (size_t p : a.devices) w.String(s.devices[p].id);
  w.EndArray();
  w.Key("env").BeginObject();
  for (const auto& [name, value] : env) w.Key(name).String(value);
  w.EndObject();
  w.Key("reason").String(a.reason);
  w.Key("score").Int(a.link_score);
  w.Key("leftover_score").Int(a.leftover_score);
  w.EndObject();
  return w.Finish();
}

std::string SinkUpdateText(const std::string& node_id, uint64_t generation, const RayView& ray) {
  std::string out = absl::StrCat("node ", node_id, " generation ", generation, "\n");
  out += ResourcesText(ray);
  for (const auto& [key, value] : ray.labels) absl::StrAppend(&out, "  ", key, "=", value, "\n");
  return out;
}

std::string SinkUpdateJson(const std::string& node_id, uint64_t generation, const RayView& ray) {
  std::vector<std::string> labels;
  for (const auto& [key, value] : ray.labels) {
    labels.push_back(json::Quote(key) + ": " + json::Quote(value));
  }
  return absl::StrCat("{\"node_id\": ", json::Quote(node_id), ", \"generation\": ", generation,
                      ", \"resources_total\": ", CompactJson(ray.resources), ", \"labels\": {",
                      absl::StrJoin(labels, ", "), "}}\n");
}

}  // namespace rayaccel::present
