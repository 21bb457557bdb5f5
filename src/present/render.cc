#include "present/render.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "present/labels.h"
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
  if (absl::StartsWith(s.host_topology, "unavailable")) {
    out += "\nHost topology: " + s.host_topology + "\n";
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

namespace {

// The RAYACCEL_SAMPLE_* names, as `telemetry` and its JSON say them.
std::string SampleFields(uint32_t fields) {
  static const std::pair<uint32_t, const char*> kNames[] = {
      {RAYACCEL_SAMPLE_UTILIZATION, "utilization"},
      {RAYACCEL_SAMPLE_MEMORY, "memory"},
      {RAYACCEL_SAMPLE_POWER, "power"},
      {RAYACCEL_SAMPLE_TEMPERATURE, "temperature"},
      {RAYACCEL_SAMPLE_ECC, "ecc"},
      {RAYACCEL_SAMPLE_RETIRED_PAGES, "retired_pages"},
      {RAYACCEL_SAMPLE_LINK_ERRORS, "link_errors"}};
  std::vector<std::string> names;
  for (const auto& [bit, name] : kNames) {
    if ((fields & bit) != 0) names.push_back(name);
  }
  return absl::StrJoin(names, ", ");
}

}  // namespace

std::string TelemetryText(const NodeSnapshot& s, const Telemetry& t) {
  std::map<std::string, std::string> label;
  std::vector<std::string> labels = DeviceLabels(s);
  for (size_t i = 0; i < s.devices.size(); ++i) label[s.devices[i].id] = labels[i];
  std::string out = "Devices\n";
  Table table({"DEVICE", "PLUGIN", "UTIL", "MEMORY USED", "POWER", "TEMP", "ECC CORR/UNCORR",
               "RETIRED", "LINK ERRORS"});
  for (const DeviceSample& d : t.devices) {
    auto known = [&](uint32_t bit) { return (d.known & bit) != 0; };
    auto it = label.find(d.device_id);
    table.Add(
        {it != label.end() ? it->second : d.device_id, d.plugin,
         known(RAYACCEL_SAMPLE_UTILIZATION) ? absl::StrCat(d.utilization_percent, "%") : "-",
         known(RAYACCEL_SAMPLE_MEMORY)
             ? absl::StrFormat("%.1f of %.1f GiB", d.memory_used_bytes / 1073741824.0,
                               d.memory_total_bytes / 1073741824.0)
             : "-",
         known(RAYACCEL_SAMPLE_POWER) ? absl::StrFormat("%.1f W", d.power_mw / 1000.0) : "-",
         known(RAYACCEL_SAMPLE_TEMPERATURE) ? absl::StrCat(d.temperature_c, " C") : "-",
         known(RAYACCEL_SAMPLE_ECC) ? absl::StrCat(d.ecc_corrected, "/", d.ecc_uncorrected) : "-",
         known(RAYACCEL_SAMPLE_RETIRED_PAGES) ? std::to_string(d.retired_pages) : "-",
         known(RAYACCEL_SAMPLE_LINK_ERRORS) ? std::to_string(d.link_errors) : "-"});
  }
  out += t.devices.empty() ? "  (none: no plugin with telemetry has devices)\n" : table.Render();
  std::string notes;
  for (const PluginTelemetry& p : t.plugins) {
    if (!p.error.empty()) absl::StrAppend(&notes, "  ", p.plugin, ": failed: ", p.error, "\n");
    for (const auto& [fields, why] : p.unknown) {
      absl::StrAppend(&notes, "  ", p.plugin, ": ", SampleFields(fields), " unknown: ", why, "\n");
    }
    for (const std::string& problem : p.problems) {
      absl::StrAppend(&notes, "  ", p.plugin, ": refused: ", problem, "\n");
    }
  }
  if (!notes.empty()) out += "\nNotes\n" + notes;
  return out;
}

std::string TelemetryJson(const NodeSnapshot& /*s*/, const Telemetry& t) {
  json::Writer w;
  w.BeginObject().Key("unix_ms").Int(t.unix_ms);
  w.Key("devices").BeginArray();
  for (const DeviceSample& d : t.devices) {
    auto known = [&](uint32_t bit) { return (d.known & bit) != 0; };
    w.BeginObject().Key("id").String(d.device_id).Key("plugin").String(d.plugin);
    w.Key("index").Uint(d.index);
    if (known(RAYACCEL_SAMPLE_UTILIZATION))
      w.Key("utilization_percent").Uint(d.utilization_percent);
    if (known(RAYACCEL_SAMPLE_MEMORY)) {
      w.Key("memory_used_bytes").Uint(d.memory_used_bytes);
      w.Key("memory_total_bytes").Uint(d.memory_total_bytes);
    }
    if (known(RAYACCEL_SAMPLE_POWER)) w.Key("power_mw").Uint(d.power_mw);
    if (known(RAYACCEL_SAMPLE_TEMPERATURE)) w.Key("temperature_c").Int(d.temperature_c);
    if (known(RAYACCEL_SAMPLE_ECC)) {
      w.Key("ecc_corrected").Uint(d.ecc_corrected);
      w.Key("ecc_uncorrected").Uint(d.ecc_uncorrected);
    }
    if (known(RAYACCEL_SAMPLE_RETIRED_PAGES)) w.Key("retired_pages").Uint(d.retired_pages);
    if (known(RAYACCEL_SAMPLE_LINK_ERRORS)) w.Key("link_errors").Uint(d.link_errors);
    w.EndObject();
  }
  w.EndArray();
  w.Key("plugins").BeginArray();
  for (const PluginTelemetry& p : t.plugins) {
    w.BeginObject().Key("name").String(p.plugin).Key("seconds").Double(p.seconds);
    if (!p.error.empty()) w.Key("error").String(p.error);
    w.Key("unknown").BeginObject();
    for (const auto& [fields, why] : p.unknown) w.Key(SampleFields(fields)).String(why);
    w.EndObject();
    w.Key("problems").BeginArray();
    for (const std::string& problem : p.problems) w.String(problem);
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return w.Finish() + "\n";
}

}  // namespace rayaccel::present
