#include "present/labels.h"

#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rayaccel::present {

std::string Memory(uint64_t bytes) {
  if (bytes == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
  return buf;
}

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

}  // namespace rayaccel::present
