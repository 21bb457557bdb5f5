#include "rpc/snapshot_proto.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "model/validate.h"

namespace rayaccel::rpc {

v1::NodeSnapshot ToProto(const NodeSnapshot& s) {
  v1::NodeSnapshot out;
  out.set_generation(s.generation);
  for (const PluginStatus& p : s.plugins) {
    v1::PluginStatus* q = out.add_plugins();
    q->set_name(p.name);
    q->set_path(p.path);
    q->set_state(static_cast<v1::PluginStatus::State>(p.state));
    q->set_message(p.message);
    q->set_abi_version(p.abi_version);
    q->set_vendor(p.vendor);
    q->set_plugin_version(p.plugin_version);
    q->set_resource_name(p.resource_name);
    q->set_visible_devices_env(p.visible_devices_env);
    q->set_capabilities(p.capabilities);
    q->set_device_count(p.device_count);
  }
  for (const Device& d : s.devices) {
    v1::Device* q = out.add_devices();
    q->set_id(d.id);
    q->set_plugin(d.plugin);
    q->set_resource(d.resource);
    q->set_index(d.index);
    q->set_name(d.name);
    q->set_vendor(d.vendor);
    q->set_accelerator_type(d.accelerator_type);
    q->set_architecture(d.architecture);
    q->set_memory_bytes(d.memory_bytes);
    q->set_pci_bus_id(d.pci_bus_id);
    q->set_pci_vendor_id(d.pci_vendor_id);
    q->set_pci_device_id(d.pci_device_id);
    q->set_numa_node(d.numa_node);
    q->set_driver_version(d.driver_version);
    q->set_firmware_version(d.firmware_version);
    q->set_parent_id(d.parent_id);
    q->set_partition_profile(d.partition_profile);
    q->set_health(static_cast<v1::Health>(d.health));
    q->set_health_reason(d.health_reason);
    for (const Attribute& a : d.attributes) {
      v1::Attribute& v = (*q->mutable_attributes())[a.name];
      switch (a.kind) {
        case Attribute::Kind::kInt:
          v.set_int_value(a.int_value);
          break;
        case Attribute::Kind::kBool:
          v.set_bool_value(a.int_value != 0);
          break;
        case Attribute::Kind::kVersion:
          v.set_version_value(a.string_value);
          break;
        default:
          v.set_string_value(a.string_value);
      }
    }
    q->set_cpuset(d.cpuset);
    for (const std::string& nic : d.nearest_nics) q->add_nearest_nics(nic);
    q->set_topology_note(d.topology_note);
  }
  for (const Link& l : s.links) {
    v1::Link* q = out.add_links();
    q->set_a(static_cast<uint32_t>(l.a));
    q->set_b(static_cast<uint32_t>(l.b));
    q->set_type(static_cast<v1::LinkType>(l.type));
    q->set_count(l.count);
    q->set_bandwidth_mbps(l.bandwidth_mbps);
    q->set_pcie_path(static_cast<v1::PciePath>(l.pcie_path));
    q->set_source(l.source);
    q->set_weight(l.weight);
    q->set_hops(l.hops);
    q->set_min_bandwidth_mbps(l.min_bandwidth_mbps);
    q->set_type_name(l.type_name);
  }
  for (const Domain& d : s.domains) {
    v1::Domain* q = out.add_domains();
    q->set_plugin(d.plugin);
    q->set_kind(d.kind);
    q->set_id(d.id);
    for (size_t p : d.devices) q->add_devices(static_cast<uint32_t>(p));
  }
  for (const auto& [k, v] : s.plugin_labels) (*out.mutable_plugin_labels())[k] = v;
  out.set_host_topology(s.host_topology);
  for (const auto& [k, v] : s.ray.resources) (*out.mutable_resources_total())[k] = v;
  for (const auto& [k, v] : s.ray.labels) (*out.mutable_labels())[k] = v;
  return out;
}

absl::StatusOr<NodeSnapshot> FromProto(const v1::NodeSnapshot& q) {
  NodeSnapshot s;
  s.generation = q.generation();
  for (const v1::PluginStatus& p : q.plugins()) {
    if (!v1::PluginStatus::State_IsValid(p.state())) {
      return absl::InvalidArgumentError(absl::StrCat("plugin ", p.name(), ": unknown state"));
    }
    PluginStatus o;
    o.name = p.name();
    o.path = p.path();
    o.state = static_cast<PluginStatus::State>(p.state());
    o.message = p.message();
    o.abi_version = p.abi_version();
    o.vendor = p.vendor();
    o.plugin_version = p.plugin_version();
    o.resource_name = p.resource_name();
    o.visible_devices_env = p.visible_devices_env();
    o.capabilities = p.capabilities();
    o.device_count = p.device_count();
    s.plugins.push_back(std::move(o));
  }
  for (const v1::Device& d : q.devices()) {
    if (!v1::Health_IsValid(d.health())) {
      return absl::InvalidArgumentError(absl::StrCat("device ", d.id(), ": unknown health"));
    }
    Device o;
    o.id = d.id();
    o.plugin = d.plugin();
    o.resource = d.resource();
    o.index = d.index();
    o.name = d.name();
    o.vendor = d.vendor();
    o.accelerator_type = d.accelerator_type();
    o.architecture = d.architecture();
    o.memory_bytes = d.memory_bytes();
    o.pci_bus_id = d.pci_bus_id();
    o.pci_vendor_id = d.pci_vendor_id();
    o.pci_device_id = d.pci_device_id();
    o.numa_node = d.numa_node();
    o.driver_version = d.driver_version();
    o.firmware_version = d.firmware_version();
    o.parent_id = d.parent_id();
    o.partition_profile = d.partition_profile();
    o.health = static_cast<Health>(d.health());
    o.health_reason = d.health_reason();
    for (const auto& [name, v] : d.attributes()) {
      Attribute a;
      a.name = name;
      switch (v.value_case()) {
        case v1::Attribute::kIntValue:
          a.kind = Attribute::Kind::kInt;
          a.int_value = v.int_value();
          break;
        case v1::Attribute::kBoolValue:
          a.kind = Attribute::Kind::kBool;
          a.int_value = v.bool_value() ? 1 : 0;
          break;
        case v1::Attribute::kVersionValue:
          a.kind = Attribute::Kind::kVersion;
          a.string_value = v.version_value();
          break;
        default:
          a.kind = Attribute::Kind::kString;
          a.string_value = v.string_value();
      }
      o.attributes.push_back(std::move(a));
    }
    o.cpuset = d.cpuset();
    o.nearest_nics.assign(d.nearest_nics().begin(), d.nearest_nics().end());
    o.topology_note = d.topology_note();
    s.devices.push_back(std::move(o));
  }
  const size_t n = s.devices.size();
  for (const v1::Link& l : q.links()) {
    if (l.a() >= n || l.b() >= n || l.a() >= l.b()) {
      return absl::InvalidArgumentError(
          absl::StrCat("link ", l.a(), "-", l.b(), ": not two distinct devices, a < b"));
    }
    if (!v1::LinkType_IsValid(l.type()) || l.type() == v1::LINK_TYPE_UNSPECIFIED ||
        !v1::PciePath_IsValid(l.pcie_path())) {
      return absl::InvalidArgumentError(absl::StrCat("link ", l.a(), "-", l.b(), ": bad type"));
    }
    s.links.push_back(Link{l.a(), l.b(), static_cast<LinkType>(l.type()), l.count(),
                           l.bandwidth_mbps(), static_cast<PciePath>(l.pcie_path()), l.source(),
                           l.weight(), l.hops(), l.min_bandwidth_mbps(), l.type_name()});
  }
  for (const v1::Domain& d : q.domains()) {
    Domain o{d.plugin(), d.kind(), d.id(), {}};
    for (uint32_t p : d.devices()) {
      if (p >= n)
        return absl::InvalidArgumentError(absl::StrCat("domain ", d.id(), ": bad member"));
      o.devices.push_back(p);
    }
    s.domains.push_back(std::move(o));
  }
  s.plugin_labels.insert(q.plugin_labels().begin(), q.plugin_labels().end());
  s.host_topology = q.host_topology();
  s.ray.resources.insert(q.resources_total().begin(), q.resources_total().end());
  s.ray.labels.insert(q.labels().begin(), q.labels().end());
  return s;
}

v1::Telemetry ToProto(const Telemetry& telemetry) {
  v1::Telemetry out;
  out.set_unix_ms(telemetry.unix_ms);
  for (const DeviceSample& d : telemetry.devices) {
    v1::DeviceSample* s = out.add_devices();
    s->set_device_id(d.device_id);
    s->set_plugin(d.plugin);
    s->set_index(d.index);
    s->set_known(d.known);
    s->set_utilization_percent(d.utilization_percent);
    s->set_power_mw(d.power_mw);
    s->set_memory_used_bytes(d.memory_used_bytes);
    s->set_memory_total_bytes(d.memory_total_bytes);
    s->set_temperature_c(d.temperature_c);
    s->set_ecc_corrected(d.ecc_corrected);
    s->set_ecc_uncorrected(d.ecc_uncorrected);
    s->set_retired_pages(d.retired_pages);
    s->set_link_errors(d.link_errors);
  }
  for (const PluginTelemetry& p : telemetry.plugins) {
    v1::PluginTelemetry* t = out.add_plugins();
    t->set_plugin(p.plugin);
    t->set_error(p.error);
    for (const auto& [bits, why] : p.unknown) (*t->mutable_unknown())[bits] = why;
    for (const std::string& problem : p.problems) t->add_problems(problem);
    t->set_seconds(p.seconds);
  }
  return out;
}

namespace {

bool ShortPrintable(const std::string& s, size_t max) {
  return s.size() <= max &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= ' ' && c != 0x7F; });
}

}  // namespace

absl::StatusOr<Telemetry> FromProto(const v1::Telemetry& proto) {
  constexpr uint32_t kFields = 0x7f;  // RAYACCEL_SAMPLE_*
  if (proto.devices_size() > kMaxTelemetryDevices || proto.plugins_size() > 256) {
    return absl::InvalidArgumentError(absl::StrCat("telemetry of ", proto.devices_size(),
                                                   " devices and ", proto.plugins_size(),
                                                   " plugins is more than a node has"));
  }
  Telemetry out;
  out.unix_ms = proto.unix_ms();
  for (const v1::DeviceSample& d : proto.devices()) {
    const int i = static_cast<int>(out.devices.size());
    if (d.device_id().empty() || !ShortPrintable(d.device_id(), 256) ||
        !ShortPrintable(d.plugin(), 128)) {
      return absl::InvalidArgumentError(
          absl::StrCat("telemetry device ", i, ": an id or plugin that is not short text"));
    }
    if ((d.known() & ~kFields) != 0 || d.utilization_percent() > 100 ||
        d.memory_used_bytes() > d.memory_total_bytes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("telemetry of ", EscapeControl(d.device_id()),
                       ": unknown field bits, a utilization over 100 or more memory used than "
                       "there is"));
    }
    DeviceSample s;
    s.device_id = d.device_id();
    s.plugin = d.plugin();
    s.index = d.index();
    s.known = d.known();
    s.utilization_percent = d.utilization_percent();
    s.power_mw = d.power_mw();
    s.memory_used_bytes = d.memory_used_bytes();
    s.memory_total_bytes = d.memory_total_bytes();
    s.temperature_c = d.temperature_c();
    s.ecc_corrected = d.ecc_corrected();
    s.ecc_uncorrected = d.ecc_uncorrected();
    s.retired_pages = d.retired_pages();
    s.link_errors = d.link_errors();
    out.devices.push_back(std::move(s));
  }
  for (const v1::PluginTelemetry& p : proto.plugins()) {
    if (!ShortPrintable(p.plugin(), 128) || !ShortPrintable(p.error(), 1024) ||
        p.unknown_size() > 16 || p.problems_size() > 64) {
      return absl::InvalidArgumentError(
          "telemetry of a plugin with a name, error or notes "
          "that are not short text");
    }
    PluginTelemetry t;
    t.plugin = p.plugin();
    t.error = p.error();
    t.seconds = p.seconds();
    for (const auto& [bits, why] : p.unknown()) {
      if ((bits & ~kFields) != 0 || !ShortPrintable(why, 1024)) {
        return absl::InvalidArgumentError(
            "telemetry: an unknown field's reason that is not "
            "short text");
      }
      t.unknown[bits] = why;
    }
    for (const std::string& problem : p.problems()) {
      if (!ShortPrintable(problem, 1024)) {
        return absl::InvalidArgumentError("telemetry: a problem that is not short text");
      }
      t.problems.push_back(problem);
    }
    out.plugins.push_back(std::move(t));
  }
  return out;
}

}  // namespace rayaccel::rpc
