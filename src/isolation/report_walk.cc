#include "isolation/report_walk.h"

#include "model/validate.h"

namespace rayaccel::isolation {
namespace {

constexpr uint32_t kMagic = 0x50524152;  // "RARP", as report_codec.cc writes it

// An enum field with whatever bits the sender gave: plugin.h gives the enums a fixed
// underlying type in C++, so any value is representable until the Collector refuses it.
template <typename E>
E AsEnum(uint32_t raw) {
  return static_cast<E>(raw);
}

std::string_view View(rayaccel_string s) {
  return s.data == nullptr ? std::string_view() : std::string_view(s.data, s.size);
}

// Notes (refusals, a hook's failure with the plugin's own message) stay as an in-process
// registry has them, bounded; whoever prints them escapes them, in either mode.
void ReadNotes(ByteReader& r, const char* what, std::vector<std::string>* out) {
  uint32_t n = r.Count(kMaxNotes, 4, what);
  for (uint32_t i = 0; i < n && r.ok(); ++i) {
    rayaccel_string s = r.Str();
    if (r.ok()) out->emplace_back(View(s).substr(0, kMaxNoteBytes));
  }
}

}  // namespace

bool ByteReader::Need(size_t n) {
  if (ok_ && in_.size() >= n) return true;
  ok_ = false;
  return false;
}

uint8_t ByteReader::U8() {
  if (!Need(1)) return 0;
  uint8_t v = static_cast<uint8_t>(in_[0]);
  in_.remove_prefix(1);
  return v;
}

uint32_t ByteReader::U32() {
  if (!Need(4)) return 0;
  const auto* p = reinterpret_cast<const unsigned char*>(in_.data());
  uint32_t v = p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
  in_.remove_prefix(4);
  return v;
}

uint64_t ByteReader::U64() {
  uint64_t lo = U32();
  return lo | (static_cast<uint64_t>(U32()) << 32);
}

rayaccel_string ByteReader::Str() {
  uint32_t n = U32();
  if (!Need(n)) return {nullptr, 0};
  rayaccel_string s{in_.data(), n};
  in_.remove_prefix(n);
  return s;
}

uint32_t ByteReader::Count(size_t limit, size_t min_item_bytes, const char* what) {
  uint32_t n = U32();
  if (ok_ && (n > limit || static_cast<uint64_t>(n) * min_item_bytes > in_.size())) {
    ok_ = false;
    error_ = std::to_string(n) + " " + what + " do not fit the limits or the message";
  }
  return ok_ ? n : 0;
}

std::string WalkReport(std::string_view bytes, const ReportSinks& sinks, ReportNotes* notes) {
  ByteReader r(bytes);
  if (r.U32() != kMagic) return "no report";
  auto failed = [&r] { return r.error().empty() ? std::string("truncated") : r.error(); };

  // The fewest bytes each item can take (every string empty): 16 four-byte fields and the
  // memory size per device, and so on.
  uint32_t devices = r.Count(kMaxDevicesPerPlugin, 4 * 16 + 8, "devices");
  for (uint32_t i = 0; i < devices && r.ok(); ++i) {
    rayaccel_device_info d{};
    d.struct_size = sizeof(d);
    d.index = r.U32();
    d.id = r.Str();
    d.name = r.Str();
    d.accelerator_type = r.Str();
    d.architecture = r.Str();
    d.memory_bytes = r.U64();
    d.pci_bus_id = r.Str();
    d.pci_vendor_id = r.U32();
    d.pci_device_id = r.U32();
    d.numa_node = static_cast<int32_t>(r.U32());
    d.driver_version = r.Str();
    d.firmware_version = r.Str();
    d.parent_id = r.Str();
    d.partition_profile = r.Str();
    d.health = AsEnum<rayaccel_health>(r.U32());
    d.health_reason = r.Str();
    uint32_t attributes = r.Count(kMaxAttributesPerDevice, 4 * 3 + 8, "attributes");
    if (!r.ok()) break;
    if (sinks.devices != nullptr) sinks.devices->add_device(sinks.devices->host_context, &d);
    for (uint32_t k = 0; k < attributes && r.ok(); ++k) {
      rayaccel_attribute a{};
      a.struct_size = sizeof(a);
      a.device_index = d.index;
      a.name = r.Str();
      a.kind = AsEnum<rayaccel_attribute_kind>(r.U32());
      a.string_value = r.Str();
      a.int_value = static_cast<int64_t>(r.U64());
      if (r.ok() && sinks.devices != nullptr) {
        sinks.devices->add_attribute(sinks.devices->host_context, &a);
      }
    }
  }
  uint32_t links = r.Count(kMaxLinksPerPlugin, 8 * 4 + 2 * 8, "links");
  for (uint32_t i = 0; i < links && r.ok(); ++i) {
    rayaccel_link l{};
    l.struct_size = sizeof(l);
    l.device_a = r.U32();
    l.device_b = r.U32();
    l.type = AsEnum<rayaccel_link_type>(r.U32());
    l.count = r.U32();
    l.bandwidth_mbps = r.U64();
    l.pcie_path = AsEnum<rayaccel_pcie_path>(r.U32());
    l.weight = r.U32();
    l.hops = r.U32();
    l.min_bandwidth_mbps = r.U64();
    l.type_name = r.Str();
    if (r.ok() && sinks.topology != nullptr) {
      sinks.topology->add_link(sinks.topology->host_context, &l);
    }
  }
  std::vector<uint32_t> members;
  uint32_t domains = r.Count(kMaxDomainsPerPlugin, 12, "domains");
  for (uint32_t i = 0; i < domains && r.ok(); ++i) {
    rayaccel_domain d{};
    d.struct_size = sizeof(d);
    d.kind = r.Str();
    d.id = r.Str();
    uint32_t n = r.Count(kMaxDevicesPerPlugin, 4, "domain members");
    members.clear();
    for (uint32_t k = 0; k < n && r.ok(); ++k) members.push_back(r.U32());
    d.devices = members.data();
    d.device_count = members.size();
    if (r.ok() && sinks.topology != nullptr) {
      sinks.topology->add_domain(sinks.topology->host_context, &d);
    }
  }
  uint32_t labels = r.Count(kMaxLabelsPerPlugin, 8, "labels");
  for (uint32_t i = 0; i < labels && r.ok(); ++i) {
    rayaccel_string k = r.Str(), v = r.Str();
    if (r.ok() && sinks.labels != nullptr)
      sinks.labels->add_label(sinks.labels->host_context, k, v);
  }
  uint32_t health = r.Count(kMaxDevicesPerPlugin, 12, "health reports");
  for (uint32_t i = 0; i < health && r.ok(); ++i) {
    uint32_t index = r.U32();
    auto state = AsEnum<rayaccel_health>(r.U32());
    rayaccel_string reason = r.Str();
    if (r.ok() && sinks.health != nullptr) {
      sinks.health->set_health(sinks.health->host_context, index, state, reason);
    }
  }
  uint32_t env = r.Count(kMaxLabelsPerPlugin, 8, "environment variables");
  for (uint32_t i = 0; i < env && r.ok(); ++i) {
    rayaccel_string k = r.Str(), v = r.Str();
    if (r.ok() && sinks.env != nullptr) sinks.env->set_env(sinks.env->host_context, k, v);
  }
  if (!r.ok()) return failed();
  ReadNotes(r, "problems", &notes->problems);
  ReadNotes(r, "hook failures", &notes->hook_failures);
  notes->over_limit = r.U8() != 0;
  if (!r.ok()) return failed();
  if (r.left() != 0) return "bytes after the report";
  return "";
}

}  // namespace rayaccel::isolation
