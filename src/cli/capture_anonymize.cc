#include "cli/capture_anonymize.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "isolation/report_codec.h"
#include "loader/collector.h"

namespace rayaccel::cli {
namespace {

// Values shorter than this are replaced only where they are a whole field: inside free text a
// short serial could match something else.
constexpr size_t kMinEmbeddedLength = 6;

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t Hash(uint64_t key, const std::string& text, uint64_t salt) {
  uint64_t h = Mix(key ^ salt);
  for (unsigned char c : text) h = Mix(h ^ c);
  return h;
}

bool IsHex(char c) { return absl::ascii_isxdigit(static_cast<unsigned char>(c)); }

// "GPU-", "MIG-": a family prefix says what the id is and is kept.
size_t PrefixLength(const std::string& value) {
  size_t n = 0;
  while (n < value.size() && n < 8 && absl::ascii_isalpha(static_cast<unsigned char>(value[n]))) {
    ++n;
  }
  return n > 0 && n < value.size() && value[n] == '-' ? n + 1 : 0;
}

class Scrubber {
 public:
  explicit Scrubber(uint64_t key) : key_(key) {}

  // An identifying value; its stand-in is chosen by Seal, once every value is known.
  void Add(const std::string& value) {
    if (!value.empty()) originals_.insert(value);
  }

  // Gives each value its stand-in: of the same shape, and neither another value nor holding
  // one (a stand-in that happened to be another device's id would leave that id in the file).
  void Seal() {
    for (const std::string& value : originals_) {
      std::string out;
      for (uint64_t attempt = 0;; ++attempt) {
        out = StandIn(value, attempt);
        if (out != value && taken_.count(out) == 0 && !HoldsAnOriginal(out)) break;
        if (attempt > 64) break;  // a value of no replaceable characters ("--") stays
      }
      taken_.insert(out);
      stand_ins_[value] = out;
      if (value.size() >= kMinEmbeddedLength) embedded_.push_back(value);
    }
    std::sort(embedded_.begin(), embedded_.end(), [](const std::string& a, const std::string& b) {
      return a.size() != b.size() ? a.size() > b.size() : a < b;
    });
  }

  // Every UUID-shaped token (8-4-4-4-12 hex digits) in `text`.
  void AddUuidsIn(const std::string& text) {
    static constexpr int kGroups[] = {8, 4, 4, 4, 12};
    for (size_t start = 0; start + 36 <= text.size(); ++start) {
      if (start > 0 && IsHex(text[start - 1])) continue;
      size_t at = start;
      bool match = true;
      for (int g = 0; g < 5 && match; ++g) {
        for (int k = 0; k < kGroups[g]; ++k, ++at) match = match && IsHex(text[at]);
        if (g < 4) match = match && text[at++] == '-';
      }
      if (match && (at == text.size() || !IsHex(text[at]))) Add(text.substr(start, 36));
    }
  }

  // `text` with every value added replaced: a whole-field match, or any value long enough
  // to be recognised inside free text.
  std::string Apply(const std::string& text) const {
    if (auto it = stand_ins_.find(text); it != stand_ins_.end()) return it->second;
    std::string out = text;
    for (const std::string& value : embedded_) {
      if (out.size() < value.size()) continue;
      const std::string& with = stand_ins_.at(value);
      for (size_t at = out.find(value); at != std::string::npos;
           at = out.find(value, at + with.size())) {
        out.replace(at, value.size(), with);
      }
    }
    return out;
  }

  size_t size() const { return stand_ins_.size(); }

 private:
  std::string StandIn(const std::string& value, uint64_t attempt) const {
    std::string out = value;
    const uint64_t base = Hash(key_, value, attempt);
    for (size_t i = PrefixLength(value); i < out.size(); ++i) {
      const uint64_t h = Mix(base + i);
      char& c = out[i];
      if (c >= '0' && c <= '9') {
        c = static_cast<char>('0' + h % 10);
      } else if (c >= 'a' && c <= 'f') {
        c = static_cast<char>('a' + h % 6);
      } else if (c >= 'A' && c <= 'F') {
        c = static_cast<char>('A' + h % 6);
      } else if (c >= 'g' && c <= 'z') {
        c = static_cast<char>('g' + h % 20);
      } else if (c >= 'G' && c <= 'Z') {
        c = static_cast<char>('G' + h % 20);
      }
    }
    return out;
  }

  bool HoldsAnOriginal(const std::string& text) const {
    if (originals_.count(text) > 0) return true;
    for (const std::string& value : originals_) {
      if (value.size() >= kMinEmbeddedLength && absl::StrContains(text, value)) return true;
    }
    return false;
  }

  uint64_t key_;
  std::set<std::string> originals_;
  std::map<std::string, std::string> stand_ins_;
  std::set<std::string> taken_;
  std::vector<std::string> embedded_;  // longest first: a value inside another goes after it
};

// Attributes that identify one piece of hardware.
bool IsIdentifying(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  return absl::StrContains(lower, "serial") || absl::StrContains(lower, "uuid") ||
         absl::StrContains(lower, "unique_id") || absl::StrContains(lower, "guid");
}

// hwloc's <info name="..." value="..."/> pairs that identify the host: DMI serials, UUIDs and
// asset tags, InfiniBand GUIDs and GIDs, network addresses.
bool IsIdentifyingHwlocInfo(const std::string& name) {
  for (const char* part : {"Serial", "UUID", "GUID", "GID", "AssetTag", "Address"}) {
    if (absl::StrContains(name, part)) return true;
  }
  return false;
}

// Calls `fn(name, value)` for each <info name="..." value="..."/> of hwloc's XML and puts
// back what it returns as the value.
template <typename Fn>
std::string RewriteHwlocInfos(const std::string& xml, Fn fn) {
  const std::string tag = "<info name=\"";
  const std::string value_tag = "\" value=\"";
  std::string out;
  size_t done = 0;
  for (size_t at = xml.find(tag); at != std::string::npos; at = xml.find(tag, at + 1)) {
    const size_t name_start = at + tag.size();
    const size_t name_end = xml.find('"', name_start);
    if (name_end == std::string::npos) break;
    if (xml.compare(name_end, value_tag.size(), value_tag) != 0) continue;
    const size_t value_start = name_end + value_tag.size();
    const size_t value_end = xml.find('"', value_start);
    if (value_end == std::string::npos) break;
    out.append(xml, done, value_start - done);
    out += fn(xml.substr(name_start, name_end - name_start),
              xml.substr(value_start, value_end - value_start));
    done = value_end;
  }
  out.append(xml, done, std::string::npos);
  return out;
}

}  // namespace

absl::Status Anonymize(uint64_t key, CapturedNode* node, Manifest* manifest, size_t* replaced) {
  Scrubber scrub(key);
  std::vector<PluginReport> reports(node->plugins.size());
  // First every identifying value, so that each gets one stand-in however it is met.
  for (size_t p = 0; p < node->plugins.size(); ++p) {
    CapturedPlugin& plugin = node->plugins[p];
    if (!plugin.report.empty()) {
      if (absl::Status s = isolation::DecodeReport(plugin.report, &reports[p]); !s.ok()) {
        return absl::DataLossError(
            absl::StrCat("plugin ", plugin.status.name, ": report unreadable: ", s.message()));
      }
    }
    for (const Device& d : reports[p].devices) {
      scrub.Add(d.id);
      scrub.Add(d.parent_id);
      for (const Attribute& a : d.attributes) {
        if (!IsIdentifying(a.name)) continue;
        scrub.Add(a.kind == Attribute::Kind::kInt ? std::to_string(a.int_value) : a.string_value);
      }
    }
    for (const ReportedDomain& d : reports[p].domains) scrub.AddUuidsIn(d.id);
    for (const auto& [k, v] : reports[p].labels) scrub.AddUuidsIn(v);
  }
  RewriteHwlocInfos(node->hwloc_xml, [&](const std::string& name, const std::string& value) {
    // Placeholders ("Not Specified", "To Be Filled By O.E.M.") identify nothing.
    if (IsIdentifyingHwlocInfo(name) && !absl::StrContains(value, ' ')) scrub.Add(value);
    scrub.AddUuidsIn(value);
    return value;
  });
  for (const auto& [name, value] : manifest->environment) scrub.AddUuidsIn(value);
  scrub.Seal();

  // Then every text the bundle carries.
  for (size_t p = 0; p < node->plugins.size(); ++p) {
    CapturedPlugin& plugin = node->plugins[p];
    PluginReport& r = reports[p];
    for (Device& d : r.devices) {
      for (std::string* s : {&d.id, &d.name, &d.parent_id, &d.health_reason, &d.driver_version,
                             &d.firmware_version, &d.partition_profile}) {
        *s = scrub.Apply(*s);
      }
      for (Attribute& a : d.attributes) {
        if (a.kind == Attribute::Kind::kInt) {
          int64_t n = 0;
          if (IsIdentifying(a.name) &&
              absl::SimpleAtoi(scrub.Apply(std::to_string(a.int_value)), &n)) {
            a.int_value = n;
          }
        } else {
          a.string_value = scrub.Apply(a.string_value);
        }
      }
    }
    for (ReportedDomain& d : r.domains) d.id = scrub.Apply(d.id);
    std::map<std::string, std::string> labels;
    for (const auto& [k, v] : r.labels) labels[k] = scrub.Apply(v);
    r.labels = std::move(labels);
    for (auto& [index, health] : r.health) health.second = scrub.Apply(health.second);
    for (auto& [name, value] : r.env) value = scrub.Apply(value);
    for (std::string& s : r.problems) s = scrub.Apply(s);
    for (std::string& s : r.hook_failures) s = scrub.Apply(s);
    if (!plugin.report.empty()) {
      plugin.report.clear();
      isolation::EncodeReport(r, &plugin.report);
    }
    plugin.status.message = scrub.Apply(plugin.status.message);
    plugin.zero_devices_reason = scrub.Apply(plugin.zero_devices_reason);
    for (auto& [quantity, refusal] : plugin.quantities) refusal = scrub.Apply(refusal);
    for (CapturedPlugin::AllocationAnswer& a : plugin.allocations) {
      for (auto& [name, value] : a.env) value = scrub.Apply(value);
      a.error = scrub.Apply(a.error);
    }
  }
  // In the XML only the <info> values change: a pass over the whole text could rewrite a
  // cpuset or a PCI id that happens to read like a serial.
  node->hwloc_xml = RewriteHwlocInfos(
      node->hwloc_xml,
      [&](const std::string&, const std::string& value) { return scrub.Apply(value); });
  for (auto& [name, value] : manifest->environment) value = scrub.Apply(value);
  if (replaced != nullptr) *replaced = scrub.size();
  return absl::OkStatus();
}

}  // namespace rayaccel::cli
