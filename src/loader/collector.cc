#include "loader/collector.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/validate.h"
#include "ray/ray_mapping.h"

namespace rayaccel {
namespace {

// Copies a plugin string after checking it; `prefix` and `field` name it in errors (joined
// only then: a rescan reads thousands of strings).
absl::Status ReadString(rayaccel_string s, absl::string_view prefix, absl::string_view field,
                        std::string* out) {
  if (s.size == 0) {
    out->clear();
    return absl::OkStatus();
  }
  if (s.size <= kMaxStringBytes && s.data != nullptr &&
      CheckText(absl::string_view(s.data, s.size), "").ok()) {
    out->assign(s.data, s.size);
    return absl::OkStatus();
  }
  std::string what = absl::StrCat(prefix, field);
  if (s.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has a size but a NULL pointer"));
  }
  if (s.size > kMaxStringBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ", s.size, " bytes long (limit ", kMaxStringBytes, ")"));
  }
  absl::string_view view(s.data, s.size);
  if (absl::Status st = CheckText(view, what); !st.ok()) return st;
  *out = std::string(view);
  return absl::OkStatus();
}

// Copies a plugin struct of any size >= min_size into a zeroed host-sized struct: fields a
// smaller (older) struct lacks read as zero; a larger (newer) struct's tail is ignored.
template <typename T>
bool CopyStruct(const T* in, size_t min_size, T* out) {
  if (in == nullptr || in->struct_size < min_size) return false;
  std::memset(static_cast<void*>(out), 0, sizeof(T));
  std::memcpy(static_cast<void*>(out), in, std::min(in->struct_size, sizeof(T)));
  return true;
}

// An enum field's bits as a number: a plugin may send values outside the enum, and reading
// those as the enum type is undefined in C++.
template <typename E>
uint32_t Raw(const E& value) {
  static_assert(sizeof(E) == sizeof(uint32_t), "C enums are 32-bit here");
  uint32_t raw = 0;
  std::memcpy(&raw, &value, sizeof(raw));
  return raw;
}

bool IsHealth(uint32_t raw) { return raw <= RAYACCEL_HEALTH_UNHEALTHY; }

}  // namespace

Collector::Collector(PluginReport* report) : report_(report) {
  sink_.struct_size = sizeof(sink_);
  sink_.host_context = this;
  sink_.add_device = &Safe<&AddDevice, const rayaccel_device_info*>;
  sink_.add_attribute = &Safe<&AddAttribute, const rayaccel_attribute*>;
  sink_.add_label = &Safe<&AddLabel, rayaccel_string, rayaccel_string>;
  sink_.add_link = &Safe<&AddLink, const rayaccel_link*>;
  sink_.add_domain = &Safe<&AddDomain, const rayaccel_domain*>;
  sink_.set_health = &Safe<&SetHealth, uint32_t, rayaccel_health, rayaccel_string>;
  sink_.set_env = &Safe<&SetEnv, rayaccel_string, rayaccel_string>;
  sink_.last_refusal = &LastRefusal;
  sink_.explain_no_devices = &Safe<&ExplainNoDevices, rayaccel_string>;
}

rayaccel_status Collector::ExplainNoDevices(void* ctx, rayaccel_string reason) {
  absl::string_view text(reason.data != nullptr ? reason.data : "",
                         reason.data != nullptr ? std::min(reason.size, kMaxStringBytes) : 0);
  static_cast<Collector*>(ctx)->report_->no_devices_reason =
      IsValidUtf8(text) ? EscapeControl(text) : std::string("<non-UTF-8 reason>");
  return RAYACCEL_STATUS_OK;
}

rayaccel_string Collector::LastRefusal(void* ctx) noexcept {
  const std::string& text = static_cast<Collector*>(ctx)->last_refusal_;
  return rayaccel_string{text.data(), text.size()};
}

rayaccel_status Collector::Refuse(std::string problem) {
  refused_any_ = true;
  last_refusal_ = problem;
  // The same problem again is counted on its first line, not listed again.
  if (auto seen = repeats_.find(problem); seen != repeats_.end()) {
    auto& [at, count] = seen->second;
    report_->problems[at] = absl::StrCat(problem, " (", ++count, " times)");
    return RAYACCEL_STATUS_INVALID_ARGUMENT;
  }
  // Keep the list bounded: a plugin that sends a million bad items gets a count, not a log.
  constexpr size_t kMaxProblems = 64;
  if (report_->problems.size() < kMaxProblems) {
    repeats_[problem] = {report_->problems.size(), 1};
    report_->problems.push_back(std::move(problem));
  } else if (report_->problems.size() == kMaxProblems) {
    report_->problems.push_back("... further problems not listed");
  }
  return RAYACCEL_STATUS_INVALID_ARGUMENT;
}

rayaccel_status Collector::OverLimit(const std::string& what, size_t limit) {
  refused_any_ = true;
  last_refusal_ = absl::StrCat("more than ", limit, " ", what, " reported");
  if (!report_->over_limit) {
    report_->over_limit = true;
    report_->problems.push_back(last_refusal_);
  }
  return RAYACCEL_STATUS_RESOURCE_EXHAUSTED;
}

absl::Status Collector::Text(rayaccel_string s, absl::string_view prefix, absl::string_view field,
                             std::string* out) {
  absl::Status st = ReadString(s, prefix, field, out);
  if (st.ok()) text_bytes_ += out->size();
  return st;
}

Device* Collector::FindDevice(uint32_t index) {
  if (index < dense_.size()) {
    return dense_[index] == 0 ? nullptr : &report_->devices[dense_[index] - 1];
  }
  auto it = sparse_.find(index);
  return it == sparse_.end() ? nullptr : &report_->devices[it->second];
}

rayaccel_status Collector::AddDevice(void* ctx, const rayaccel_device_info* in) {
  auto* self = static_cast<Collector*>(ctx);
  PluginReport* r = self->report_;
  if (r->devices.size() >= kMaxDevicesPerPlugin)
    return self->OverLimit("devices", kMaxDevicesPerPlugin);
  if (self->text_bytes_ > kMaxTextBytesPerReport) {
    return self->OverLimit("bytes of text", kMaxTextBytesPerReport);
  }
  rayaccel_device_info info;
  constexpr size_t kMin = RAYACCEL_STRUCT_SIZE(rayaccel_device_info, name);
  if (!CopyStruct(in, kMin, &info)) {
    self->refused_device_ = true;
    const size_t size = in == nullptr ? 0 : in->struct_size;
    if (size == sizeof(void*)) {
      return self->Refuse(absl::StrCat(
          "device: set rayaccel_device_info.struct_size to sizeof(rayaccel_device_info) (",
          sizeof(rayaccel_device_info), " bytes): it is ", size,
          ", the size of a pointer (sizeof(&info)?), so no device was read"));
    }
    return self->Refuse(absl::StrCat("device: struct_size ", size,
                                     " is smaller than the smallest 1.0 device_info (", kMin,
                                     " bytes): set it to sizeof(rayaccel_device_info)"));
  }
  if (!RAYACCEL_HAS_FIELD(in, rayaccel_device_info, numa_node)) info.numa_node = -1;

  Device d;
  d.index = info.index;
  std::string where = absl::StrCat("device ", info.index);
  struct Field {
    rayaccel_string value;
    const char* name;
    std::string* out;
  };
  std::string pci;
  const Field fields[] = {
      {info.id, "id", &d.id},
      {info.name, "name", &d.name},
      {info.accelerator_type, "accelerator_type", &d.accelerator_type},
      {info.architecture, "architecture", &d.architecture},
      {info.pci_bus_id, "pci_bus_id", &pci},
      {info.driver_version, "driver_version", &d.driver_version},
      {info.firmware_version, "firmware_version", &d.firmware_version},
      {info.parent_id, "parent_id", &d.parent_id},
      {info.partition_profile, "partition_profile", &d.partition_profile},
      {info.health_reason, "health_reason", &d.health_reason},
  };
  const std::string prefix = absl::StrCat(where, ": ");
  for (const Field& f : fields) {
    if (absl::Status st = self->Text(f.value, prefix, f.name, f.out); !st.ok()) {
      return self->Refuse(std::string(st.message()));
    }
  }
  if (d.id.empty()) return self->Refuse(absl::StrCat(where, ": id is required"));
  if (d.name.empty()) return self->Refuse(absl::StrCat(where, ": name is required"));
  if (self->FindDevice(d.index) != nullptr) {
    return self->Refuse(absl::StrCat(where, ": index reported twice"));
  }
  if (self->device_ids_.count(d.id) > 0) {
    return self->Refuse(absl::StrCat(where, ": duplicate id \"", d.id, "\""));
  }
  if (!pci.empty()) {
    std::optional<std::string> normal = NormalizePciBusId(pci);
    if (!normal) {
      return self->Refuse(
          absl::StrCat(where, ": pci_bus_id \"", pci, "\" is not of the form dddd:bb:dd.f"));
    }
    d.pci_bus_id = *normal;
  }
  if (info.memory_bytes > kMaxMemoryBytes) {
    return self->Refuse(
        absl::StrCat(where, ": memory_bytes ", info.memory_bytes, " is absurd (limit 1 PiB)"));
  }
  if (info.numa_node < -1 || info.numa_node > 4095) {
    return self->Refuse(absl::StrCat(where, ": numa_node ", info.numa_node, " out of range"));
  }
  if (info.pci_vendor_id > 0xFFFF || info.pci_device_id > 0xFFFF) {
    return self->Refuse(absl::StrCat(where, ": PCI vendor/device ids are 16-bit"));
  }
  if (!IsHealth(Raw(info.health))) {
    return self->Refuse(
        absl::StrCat(where, ": health ", Raw(info.health), " is not a rayaccel_health value"));
  }
  d.memory_bytes = info.memory_bytes;
  d.pci_vendor_id = info.pci_vendor_id;
  d.pci_device_id = info.pci_device_id;
  d.numa_node = info.numa_node;
  d.health = static_cast<Health>(info.health);
  if (d.index < kDenseIndices) {
    if (self->dense_.size() <= d.index) {
      self->dense_.resize(std::max<size_t>(d.index + 1, 2 * self->dense_.size()), 0);
    }
    self->dense_[d.index] = static_cast<uint32_t>(r->devices.size() + 1);
  } else {
    self->sparse_[d.index] = r->devices.size();
  }
  self->device_ids_.insert(d.id);
  r->devices.push_back(std::move(d));
  return RAYACCEL_STATUS_OK;
}

rayaccel_status Collector::AddAttribute(void* ctx, const rayaccel_attribute* in) {
  auto* self = static_cast<Collector*>(ctx);
  rayaccel_attribute attr;
  if (!CopyStruct(in, RAYACCEL_STRUCT_SIZE(rayaccel_attribute, int_value), &attr)) {
    return self->Refuse("attribute: struct_size too small");
  }
  Device* d = self->FindDevice(attr.device_index);
  if (d == nullptr) {
    // Where devices were refused, their attributes follow them: one line, counted.
    return self->Refuse(self->refused_device_
                            ? std::string("attributes for devices refused above")
                            : absl::StrCat("attribute for unknown device ", attr.device_index));
  }
  if (d->attributes.size() >= kMaxAttributesPerDevice) {
    return self->OverLimit("attributes on one device", kMaxAttributesPerDevice);
  }
  if (self->text_bytes_ > kMaxTextBytesPerReport) {
    return self->OverLimit("bytes of text", kMaxTextBytesPerReport);
  }
  Attribute a;
  std::string where = absl::StrCat("device ", attr.device_index, ": attribute");
  if (absl::Status st = self->Text(attr.name, where, "", &a.name); !st.ok()) {
    return self->Refuse(std::string(st.message()));
  }
  if (absl::Status st = CheckLabelKey(a.name); !st.ok()) {
    return self->Refuse(absl::StrCat(where, ": ", st.message()));
  }
  if (Raw(attr.kind) > RAYACCEL_ATTRIBUTE_VERSION) {
    return self->Refuse(absl::StrCat(where, " ", a.name, ": unknown kind ", Raw(attr.kind)));
  }
  a.kind = static_cast<Attribute::Kind>(attr.kind);
  if (a.kind == Attribute::Kind::kString || a.kind == Attribute::Kind::kVersion) {
    if (absl::Status st = self->Text(attr.string_value, where, " " + a.name, &a.string_value);
        !st.ok()) {
      return self->Refuse(std::string(st.message()));
    }
  } else if (a.kind == Attribute::Kind::kBool && attr.int_value != 0 && attr.int_value != 1) {
    return self->Refuse(absl::StrCat(where, " ", a.name, ": a bool must be 0 or 1"));
  }
  a.int_value = attr.int_value;
  for (Attribute& existing : d->attributes) {
    if (existing.name == a.name) {
      existing = a;  // the last report of a name wins
      return RAYACCEL_STATUS_OK;
    }
  }
  d->attributes.push_back(std::move(a));
  return RAYACCEL_STATUS_OK;
}

rayaccel_status Collector::AddLabel(void* ctx, rayaccel_string key_in, rayaccel_string value_in) {
  auto* self = static_cast<Collector*>(ctx);
  if (self->text_bytes_ > kMaxTextBytesPerReport) {
    return self->OverLimit("bytes of text", kMaxTextBytesPerReport);
  }
  if (self->report_->labels.size() >= kMaxLabelsPerPlugin) {
    return self->OverLimit("labels", kMaxLabelsPerPlugin);
  }
  std::string key, value;
  absl::Status st = self->Text(key_in, "label key", "", &key);
  if (st.ok()) st = self->Text(value_in, "label value", "", &value);
  if (st.ok()) st = CheckLabelKey(key);
  if (st.ok()) st = CheckLabelValue(value);
  if (!st.ok()) return self->Refuse(std::string(st.message()));
  if (absl::StartsWith(key, "ray.io/") && (!IsRayDefinedLabelKey(key) || key == "ray.io/node-id")) {
    return self->Refuse(absl::StrCat("label key \"", key,
                                     "\": the ray.io/ prefix is reserved for keys Ray defines"));
  }
  self->report_->labels[key] = value;
  return RAYACCEL_STATUS_OK;
}

rayaccel_status Collector::AddLink(void* ctx, const rayaccel_link* in) {
  auto* self = static_cast<Collector*>(ctx);
  if (self->report_->links.size() >= kMaxLinksPerPlugin) {
    return self->OverLimit("links", kMaxLinksPerPlugin);
  }
  rayaccel_link link;
  if (!CopyStruct(in, RAYACCEL_STRUCT_SIZE(rayaccel_link, type), &link)) {
    return self->Refuse("link: struct_size too small");
  }
  // Built only for a refusal: a rescan checks thousands of links.
  auto where = [&link] { return absl::StrCat("link ", link.device_a, "-", link.device_b); };
  if (self->FindDevice(link.device_a) == nullptr || self->FindDevice(link.device_b) == nullptr) {
    return self->Refuse(absl::StrCat(where(), ": endpoint is not a reported device"));
  }
  if (link.device_a == link.device_b) return self->Refuse(absl::StrCat(where(), ": self link"));
  if (Raw(link.type) < RAYACCEL_LINK_PCIE || Raw(link.type) > RAYACCEL_LINK_OTHER) {
    return self->Refuse(absl::StrCat(where(), ": unknown type ", Raw(link.type)));
  }
  if (Raw(link.pcie_path) > RAYACCEL_PCIE_PATH_SYS) {
    return self->Refuse(absl::StrCat(where(), ": unknown pcie_path ", Raw(link.pcie_path)));
  }
  if (link.count > kMaxLinkCount) {
    return self->Refuse(absl::StrCat(where(), ": count ", link.count, " is absurd"));
  }
  if (link.bandwidth_mbps > kMaxLinkBandwidthMbps ||
      link.min_bandwidth_mbps > kMaxLinkBandwidthMbps) {
    return self->Refuse(
        absl::StrCat(where(), ": bandwidth over ", kMaxLinkBandwidthMbps, " MB/s is absurd"));
  }
  std::string type_name;
  if (link.type == RAYACCEL_LINK_OTHER && RAYACCEL_HAS_FIELD(&link, rayaccel_link, type_name) &&
      link.type_name.size > 0) {
    if (self->text_bytes_ > kMaxTextBytesPerReport) {
      return self->OverLimit("bytes of text", kMaxTextBytesPerReport);
    }
    constexpr size_t kMaxTypeName = 16;
    if (link.type_name.size <= kMaxTypeName) {
      absl::Status st =
          self->Text(link.type_name, absl::StrCat(where(), ": "), "type_name", &type_name);
      if (!st.ok()) return self->Refuse(std::string(st.message()));
    }
    if (type_name.empty() || !std::all_of(type_name.begin(), type_name.end(), [](char c) {
          return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-';
        })) {
      return self->Refuse(absl::StrCat(where(), ": type_name is not 1-16 of [A-Za-z0-9-]"));
    }
  }
  ReportedLink r{std::min(link.device_a, link.device_b),
                 std::max(link.device_a, link.device_b),
                 static_cast<LinkType>(link.type),
                 link.count,
                 link.bandwidth_mbps,
                 static_cast<PciePath>(link.pcie_path),
                 link.weight,
                 link.hops,
                 link.min_bandwidth_mbps,
                 std::move(type_name)};
  uint64_t key = (uint64_t{r.a} << 32 | r.b) * 8 + Raw(link.type);  // type < 8: a unique key
  if (!self->link_keys_.insert(key).second) {
    return self->Refuse(absl::StrCat(where(), ": reported twice for the same type"));
  }
  self->report_->links.push_back(std::move(r));
  return RAYACCEL_STATUS_OK;
}

rayaccel_status Collector::AddDomain(void* ctx, const rayaccel_domain* in) {
  auto* self = static_cast<Collector*>(ctx);
  if (self->text_bytes_ > kMaxTextBytesPerReport) {
    return self->OverLimit("bytes of text", kMaxTextBytesPerReport);
  }
  if (self->report_->domains.size() >= kMaxDomainsPerPlugin) {
    return self->OverLimit("domains", kMaxDomainsPerPlugin);
  }
  rayaccel_domain dom;
  if (!CopyStruct(in, RAYACCEL_STRUCT_SIZE(rayaccel_domain, device_count), &dom)) {
    return self->Refuse("domain: struct_size too small");
  }
  ReportedDomain r;
  absl::Status st = self->Text(dom.kind, "domain kind", "", &r.kind);
  if (st.ok()) st = self->Text(dom.id, "domain id", "", &r.id);
  if (!st.ok()) return self->Refuse(std::string(st.message()));
  std::string where = absl::StrCat("domain ", r.kind, "/", r.id);
  if (r.kind.empty() || r.id.empty())
    return self->Refuse(absl::StrCat(where, ": kind and id are required"));
  if (dom.device_count > kMaxDevicesPerPlugin || (dom.device_count > 0 && dom.devices == nullptr)) {
    return self->Refuse(absl::StrCat(where, ": bad device list"));
  }
  if (self->domain_members_ + dom.device_count > kMaxDomainMembersPerPlugin) {
    return self->OverLimit("domain members", kMaxDomainMembersPerPlugin);
  }
  absl::flat_hash_set<uint32_t> seen;
  for (size_t i = 0; i < dom.device_count; ++i) {
    uint32_t index = dom.devices[i];
    if (self->FindDevice(index) == nullptr) {
      return self->Refuse(absl::StrCat(where, ": member ", index, " is not a reported device"));
    }
    if (!seen.insert(index).second) {
      return self->Refuse(absl::StrCat(where, ": member ", index, " listed twice"));
    }
    r.devices.push_back(index);
  }
  if (!self->domain_keys_.insert({r.kind, r.id}).second) {
    return self->Refuse(absl::StrCat(where, ": reported twice"));
  }
  self->domain_members_ += r.devices.size();
  self->report_->domains.push_back(std::move(r));
  return RAYACCEL_STATUS_OK;
}

rayaccel_status Collector::SetHealth(void* ctx, uint32_t device_index, rayaccel_health health,
                                     rayaccel_string reason_in) {
  auto* self = static_cast<Collector*>(ctx);
  if (self->text_bytes_ > kMaxTextBytesPerReport) {
    return self->OverLimit("bytes of text", kMaxTextBytesPerReport);
  }
  if (!IsHealth(Raw(health))) {
    return self->Refuse(
        absl::StrCat("health of device ", device_index, ": unknown state ", Raw(health)));
  }
  std::string reason;
  if (absl::Status st = self->Text(reason_in, "health reason", "", &reason); !st.ok()) {
    return self->Refuse(std::string(st.message()));
  }
  if (self->report_->health.size() >= kMaxDevicesPerPlugin &&
      self->report_->health.count(device_index) == 0) {
    return self->OverLimit("health reports", kMaxDevicesPerPlugin);
  }
  self->report_->health[device_index] = {static_cast<Health>(health), reason};
  return RAYACCEL_STATUS_OK;
}

rayaccel_status Collector::SetEnv(void* ctx, rayaccel_string name_in, rayaccel_string value_in) {
  auto* self = static_cast<Collector*>(ctx);
  if (self->text_bytes_ > kMaxTextBytesPerReport) {
    return self->OverLimit("bytes of text", kMaxTextBytesPerReport);
  }
  std::string name, value;
  absl::Status st = self->Text(name_in, "environment name", "", &name);
  if (st.ok()) st = self->Text(value_in, "environment value", "", &value);
  if (!st.ok()) return self->Refuse(std::string(st.message()));
  bool valid_name = !name.empty() && !(name[0] >= '0' && name[0] <= '9') &&
                    std::all_of(name.begin(), name.end(), [](char c) {
                      return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                             (c >= '0' && c <= '9') || c == '_';
                    });
  if (!valid_name) return self->Refuse(absl::StrCat("environment name \"", name, "\" is invalid"));
  if (self->report_->env.size() >= kMaxLabelsPerPlugin) {
    return self->OverLimit("environment variables", kMaxLabelsPerPlugin);
  }
  self->report_->env.emplace_back(std::move(name), std::move(value));
  return RAYACCEL_STATUS_OK;
}

}  // namespace rayaccel
