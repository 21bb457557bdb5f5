#include "isolation/report_codec.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace rayaccel::isolation {
namespace {

constexpr uint32_t kMagic = 0x50524152;  // "RARP"

// EncodeReport runs twice over the report: with a Counter to size the buffer, then with a
// Filler that writes into it.
class Counter {
 public:
  size_t size() const { return size_; }
  void U8(uint8_t) { size_ += 1; }
  void U32(uint32_t) { size_ += 4; }
  void U64(uint64_t) { size_ += 8; }
  void Str(absl::string_view s) { size_ += 4 + s.size(); }

 private:
  size_t size_ = 0;
};

class Filler {
 public:
  explicit Filler(char* at) : at_(at) {}
  void U8(uint8_t v) { *at_++ = static_cast<char>(v); }
  void U32(uint32_t v) {
    unsigned char b[4] = {static_cast<unsigned char>(v), static_cast<unsigned char>(v >> 8),
                          static_cast<unsigned char>(v >> 16), static_cast<unsigned char>(v >> 24)};
    std::memcpy(at_, b, 4);
    at_ += 4;
  }
  void U64(uint64_t v) {
    U32(static_cast<uint32_t>(v));
    U32(static_cast<uint32_t>(v >> 32));
  }
  void Str(absl::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    if (!s.empty()) std::memcpy(at_, s.data(), s.size());
    at_ += s.size();
  }

 private:
  char* at_;
};

// Compares the encoding with bytes already encoded, without writing anything.
class Comparer {
 public:
  explicit Comparer(absl::string_view old) : at_(old.data()), left_(old.size()) {}
  bool same() const { return same_ && left_ == 0; }
  void U8(uint8_t v) { Match(&v, 1); }
  void U32(uint32_t v) {
    unsigned char b[4] = {static_cast<unsigned char>(v), static_cast<unsigned char>(v >> 8),
                          static_cast<unsigned char>(v >> 16), static_cast<unsigned char>(v >> 24)};
    Match(b, 4);
  }
  void U64(uint64_t v) {
    U32(static_cast<uint32_t>(v));
    U32(static_cast<uint32_t>(v >> 32));
  }
  void Str(absl::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    Match(s.data(), s.size());
  }

 private:
  void Match(const void* p, size_t n) {
    if (!same_ || n > left_ || (n > 0 && std::memcmp(at_, p, n) != 0)) {
      same_ = false;
      return;
    }
    at_ += n;
    left_ -= n;
  }
  const char* at_;
  size_t left_;
  bool same_ = true;
};

// Reads from untrusted bytes: every read is bounds-checked, and a failed read leaves the
// reader failed (every later read returns zero/empty), checked once per item.
class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  size_t left() const { return in_.size(); }
  uint8_t U8() {
    if (!Need(1)) return 0;
    uint8_t v = static_cast<uint8_t>(in_[0]);
    in_.remove_prefix(1);
    return v;
  }
  uint32_t U32() {
    if (!Need(4)) return 0;
    const auto* p = reinterpret_cast<const unsigned char*>(in_.data());
    uint32_t v = p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
    in_.remove_prefix(4);
    return v;
  }
  uint64_t U64() {
    uint64_t lo = U32();
    return lo | (static_cast<uint64_t>(U32()) << 32);
  }
  rayaccel_string Str() {
    uint32_t n = U32();
    if (!Need(n)) return {nullptr, 0};
    rayaccel_string s{in_.data(), n};
    in_.remove_prefix(n);
    return s;
  }
  // A count of items of at least `min_item_bytes` each, within `limit`: refused before any
  // item is read when the bytes left cannot hold that many.
  uint32_t Count(size_t limit, size_t min_item_bytes, const char* what) {
    uint32_t n = U32();
    if (ok_ && (n > limit || static_cast<uint64_t>(n) * min_item_bytes > in_.size())) {
      ok_ = false;
      error_ = absl::StrCat(n, " ", what, " do not fit the limits or the message");
    }
    return ok_ ? n : 0;
  }
  absl::Status status() const {
    return ok_ ? absl::OkStatus()
               : absl::DataLossError(absl::StrCat("the plugin host sent a malformed report: ",
                                                  error_.empty() ? "truncated" : error_));
  }

 private:
  bool Need(size_t n) {
    if (ok_ && in_.size() >= n) return true;
    ok_ = false;
    return false;
  }
  absl::string_view in_;
  bool ok_ = true;
  std::string error_;
};

template <typename E>
uint32_t Raw(E e) {
  return static_cast<uint32_t>(e);
}

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
absl::Status ReadNotes(Reader& r, const char* what, std::vector<std::string>* out) {
  uint32_t n = r.Count(kMaxNotes, 4, what);
  for (uint32_t i = 0; i < n && r.ok(); ++i) {
    rayaccel_string s = r.Str();
    if (r.ok()) out->emplace_back(View(s).substr(0, kMaxNoteBytes));
  }
  return r.status();
}

}  // namespace

namespace {

template <typename Writer>
void Encode(const PluginReport& report, Writer& w) {
  w.U32(kMagic);
  w.U32(static_cast<uint32_t>(report.devices.size()));
  for (const Device& d : report.devices) {
    w.U32(d.index);
    w.Str(d.id);
    w.Str(d.name);
    w.Str(d.accelerator_type);
    w.Str(d.architecture);
    w.U64(d.memory_bytes);
    w.Str(d.pci_bus_id);
    w.U32(d.pci_vendor_id);
    w.U32(d.pci_device_id);
    w.U32(static_cast<uint32_t>(d.numa_node));
    w.Str(d.driver_version);
    w.Str(d.firmware_version);
    w.Str(d.parent_id);
    w.Str(d.partition_profile);
    w.U32(Raw(d.health));
    w.Str(d.health_reason);
    w.U32(static_cast<uint32_t>(d.attributes.size()));
    for (const Attribute& a : d.attributes) {
      w.Str(a.name);
      w.U32(Raw(a.kind));
      w.Str(a.string_value);
      w.U64(static_cast<uint64_t>(a.int_value));
    }
  }
  w.U32(static_cast<uint32_t>(report.links.size()));
  for (const ReportedLink& l : report.links) {
    w.U32(l.a);
    w.U32(l.b);
    w.U32(Raw(l.type));
    w.U32(l.count);
    w.U64(l.bandwidth_mbps);
    w.U32(Raw(l.pcie_path));
    w.U32(l.weight);
    w.U32(l.hops);
    w.U64(l.min_bandwidth_mbps);
    w.Str(l.type_name);
  }
  w.U32(static_cast<uint32_t>(report.domains.size()));
  for (const ReportedDomain& d : report.domains) {
    w.Str(d.kind);
    w.Str(d.id);
    w.U32(static_cast<uint32_t>(d.devices.size()));
    for (uint32_t m : d.devices) w.U32(m);
  }
  w.U32(static_cast<uint32_t>(report.labels.size()));
  for (const auto& [k, v] : report.labels) {
    w.Str(k);
    w.Str(v);
  }
  w.U32(static_cast<uint32_t>(report.health.size()));
  for (const auto& [index, state] : report.health) {
    w.U32(index);
    w.U32(Raw(state.first));
    w.Str(state.second);
  }
  w.U32(static_cast<uint32_t>(report.env.size()));
  for (const auto& [k, v] : report.env) {
    w.Str(k);
    w.Str(v);
  }
  for (const std::vector<std::string>* notes : {&report.problems, &report.hook_failures}) {
    w.U32(static_cast<uint32_t>(notes->size()));
    for (const std::string& s : *notes) w.Str(s);
  }
  w.U8(report.over_limit ? 1 : 0);
}

}  // namespace

bool EncodesAs(const PluginReport& report, absl::string_view encoding) {
  Comparer compare(encoding);
  Encode(report, compare);
  return compare.same();
}

void EncodeReport(const PluginReport& report, std::string* out) {
  Counter measure;
  Encode(report, measure);
  size_t at = out->size();
  out->resize(at + measure.size());
  Filler fill(out->data() + at);
  Encode(report, fill);
}

namespace {

template <typename Writer>
void EncodeHead(const ReportReply& reply, Writer& w) {
  w.U8('R');
  w.U64(reply.answer_id);
  w.U8(reply.unchanged ? 1 : 0);
  w.Str(absl::string_view(reply.discover_error).substr(0, kMaxNoteBytes));
  w.Str(absl::string_view(reply.zero_devices_reason).substr(0, kMaxNoteBytes));
}

}  // namespace

std::string EncodeReportReply(const ReportReply& reply) {
  Counter measure;
  EncodeHead(reply, measure);
  std::string out(measure.size(), '\0');
  Filler fill(out.data());
  EncodeHead(reply, fill);
  out.append(reply.report.data(), reply.report.size());
  return out;
}

absl::StatusOr<ReportReply> DecodeReportReply(absl::string_view frame) {
  Reader r(frame);
  ReportReply reply;
  bool head = r.U8() == 'R';
  reply.answer_id = r.U64();
  reply.unchanged = r.U8() != 0;
  rayaccel_string error = r.Str(), reason = r.Str();
  if (!head || !r.ok() || error.size > kMaxNoteBytes || reason.size > kMaxNoteBytes) {
    return absl::DataLossError("the plugin host sent a malformed reply");
  }
  reply.discover_error = std::string(View(error));
  reply.zero_devices_reason = std::string(View(reason));
  reply.report = frame.substr(frame.size() - r.left());
  if (reply.unchanged && !reply.report.empty()) {
    return absl::DataLossError("the plugin host sent a malformed reply");
  }
  return reply;
}

absl::Status DecodeReport(absl::string_view bytes, PluginReport* report) {
  Reader r(bytes);
  if (r.U32() != kMagic) return absl::DataLossError("the plugin host sent no report");
  // The sender's notes come first, as they would in-process; the Collector adds its own only
  // if this side disagrees with what the host accepted.
  PluginReport checked;
  Collector collector(&checked);
  const rayaccel_sink* sink = collector.sink();
  void* ctx = sink->host_context;

  // The fewest bytes each item can take (every string empty): 16 four-byte fields and the
  // memory size per device, and so on.
  uint32_t devices = r.Count(kMaxDevicesPerPlugin, 4 * 16 + 8, "devices");
  std::vector<uint32_t> members;
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
    sink->add_device(ctx, &d);
    for (uint32_t k = 0; k < attributes && r.ok(); ++k) {
      rayaccel_attribute a{};
      a.struct_size = sizeof(a);
      a.device_index = d.index;
      a.name = r.Str();
      a.kind = AsEnum<rayaccel_attribute_kind>(r.U32());
      a.string_value = r.Str();
      a.int_value = static_cast<int64_t>(r.U64());
      if (r.ok()) sink->add_attribute(ctx, &a);
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
    if (r.ok()) sink->add_link(ctx, &l);
  }
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
    if (r.ok()) sink->add_domain(ctx, &d);
  }
  uint32_t labels = r.Count(kMaxLabelsPerPlugin, 8, "labels");
  for (uint32_t i = 0; i < labels && r.ok(); ++i) {
    rayaccel_string k = r.Str(), v = r.Str();
    if (r.ok()) sink->add_label(ctx, k, v);
  }
  uint32_t health = r.Count(kMaxDevicesPerPlugin, 12, "health reports");
  for (uint32_t i = 0; i < health && r.ok(); ++i) {
    uint32_t index = r.U32();
    auto state = AsEnum<rayaccel_health>(r.U32());
    rayaccel_string reason = r.Str();
    if (r.ok()) sink->set_health(ctx, index, state, reason);
  }
  uint32_t env = r.Count(kMaxLabelsPerPlugin, 8, "environment variables");
  for (uint32_t i = 0; i < env && r.ok(); ++i) {
    rayaccel_string k = r.Str(), v = r.Str();
    if (r.ok()) sink->set_env(ctx, k, v);
  }
  if (!r.ok()) return r.status();
  if (absl::Status st = ReadNotes(r, "problems", &report->problems); !st.ok()) return st;
  if (absl::Status st = ReadNotes(r, "hook failures", &report->hook_failures); !st.ok()) {
    return st;
  }
  uint8_t over_limit = r.U8();
  if (!r.ok()) return r.status();
  if (r.left() != 0) return absl::DataLossError("the plugin host sent bytes after its report");
  report->devices = std::move(checked.devices);
  report->links = std::move(checked.links);
  report->domains = std::move(checked.domains);
  report->labels = std::move(checked.labels);
  report->health = std::move(checked.health);
  report->env = std::move(checked.env);
  report->problems.insert(report->problems.end(), checked.problems.begin(), checked.problems.end());
  report->over_limit = over_limit != 0 || checked.over_limit;
  return absl::OkStatus();
}

}  // namespace rayaccel::isolation
