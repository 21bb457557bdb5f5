#include "cli/render.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/json.h"

namespace rayaccel::cli {
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

std::string LinkLabel(const Link& l) {
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
  w.EndObject();
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

// 'text' quoted for a POSIX shell.
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
  w.Key("links").BeginArray();
  for (const Link& l : s.links) {
    w.BeginObject();
    w.Key("a").Uint(l.a);
    w.Key("b").Uint(l.b);
    w.Key("type").String(LinkTypeName(l.type));
    w.Key("count").Uint(l.count);
    w.Key("path").String(PciePathName(l.pcie_path));
    w.Key("bandwidth_mbps").Uint(l.bandwidth_mbps);
    w.Key("source").String(l.source);
    w.EndObject();
  }
  w.EndArray();
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
        {"#", "PLUGIN", "RESOURCE", "TYPE", "NAME", "PCI", "NUMA", "MEMORY", "HEALTH", "ID"});
    for (size_t i = 0; i < s.devices.size(); ++i) {
      const Device& d = s.devices[i];
      std::string health = HealthName(d.health);
      if (!d.health_reason.empty()) health += " (" + d.health_reason + ")";
      std::string name = d.name;
      if (!d.partition_profile.empty()) name += " [" + d.partition_profile + "]";
      devices.Add({std::to_string(i), d.plugin, d.resource, OrDash(d.accelerator_type), name,
                   OrDash(d.pci_bus_id), d.numa_node >= 0 ? std::to_string(d.numa_node) : "-",
                   Memory(d.memory_bytes), health, d.id});
    }
    out += devices.Render();
  }

  if (!s.links.empty()) {
    out += "\nLinks\n";
    Table links({"A", "B", "LINK", "BANDWIDTH", "SOURCE"});
    for (const Link& l : s.links) {
      links.Add({std::to_string(l.a), std::to_string(l.b), LinkLabel(l),
                 l.bandwidth_mbps > 0 ? absl::StrCat(l.bandwidth_mbps / 1000, " GB/s") : "-",
                 l.source});
    }
    out += links.Render();
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

}  // namespace rayaccel::cli
