#include "isolation/report_codec.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "isolation/report_walk.h"

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

template <typename E>
uint32_t Raw(E e) {
  return static_cast<uint32_t>(e);
}

std::string_view View(rayaccel_string s) {
  return s.data == nullptr ? std::string_view() : std::string_view(s.data, s.size);
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
  ByteReader r(std::string_view(frame.data(), frame.size()));
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
  // The sender's notes come first, as they would in-process; the Collector adds its own only
  // if this side disagrees with what the host accepted.
  PluginReport checked;
  Collector collector(&checked);
  const rayaccel_sink* sink = collector.sink();
  ReportNotes notes;
  std::string error = WalkReport(std::string_view(bytes.data(), bytes.size()),
                                 {sink, sink, sink, sink, sink}, &notes);
  if (error == "no report") return absl::DataLossError("the plugin host sent no report");
  if (error == "bytes after the report") {
    return absl::DataLossError("the plugin host sent bytes after its report");
  }
  if (!error.empty()) {
    return absl::DataLossError("the plugin host sent a malformed report: " + error);
  }
  report->problems.insert(report->problems.end(), notes.problems.begin(), notes.problems.end());
  report->hook_failures.insert(report->hook_failures.end(), notes.hook_failures.begin(),
                               notes.hook_failures.end());
  report->devices = std::move(checked.devices);
  report->links = std::move(checked.links);
  report->domains = std::move(checked.domains);
  report->labels = std::move(checked.labels);
  report->health = std::move(checked.health);
  report->env = std::move(checked.env);
  report->problems.insert(report->problems.end(), checked.problems.begin(), checked.problems.end());
  report->over_limit = notes.over_limit || checked.over_limit;
  return absl::OkStatus();
}

}  // namespace rayaccel::isolation
