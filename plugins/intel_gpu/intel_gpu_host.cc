#include "intel_gpu/intel_gpu_host.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>

namespace rayaccel::intel_gpu {
namespace {

constexpr uint32_t kIntel = 0x8086;
// More tiles than any Intel package has: a folder list past it is not a driver's.
constexpr uint32_t kMaxTiles = 8;
constexpr uint64_t kGiB = uint64_t{1} << 30;

// Names as the SYCL runtime (the Level Zero device name) gives them; memory per tile as Intel
// publishes it (Max 1550: 128 GB HBM2e on two stacks; Flex 140: 12 GB on its two GPUs, each
// a PCI function of its own).
constexpr Model kModels[] = {
    {0x0bd5, "Intel(R) Data Center GPU Max 1550", "pvc", 2, 64 * kGiB},
    {0x0bd6, "Intel(R) Data Center GPU Max 1550", "pvc", 2, 64 * kGiB},
    {0x0bd9, "Intel(R) Data Center GPU Max 1100", "pvc", 1, 48 * kGiB},
    {0x0bda, "Intel(R) Data Center GPU Max 1100", "pvc", 1, 48 * kGiB},
    {0x0bdb, "Intel(R) Data Center GPU Max 1100", "pvc", 1, 48 * kGiB},
    {0x56c0, "Intel(R) Data Center GPU Flex 170", "dg2", 1, 16 * kGiB},
    {0x56c1, "Intel(R) Data Center GPU Flex 140", "dg2", 1, 6 * kGiB},
    {0x56a0, "Intel(R) Arc(TM) A770 Graphics", "dg2", 1, 0},  // 8 or 16 GB
    {0xa780, "Intel(R) UHD Graphics 770", "rpl-s", 1, 0},     // system memory
};

// N of "<prefix><N>", N at most `max`; nothing for "card0-HDMI-A-1", "cardX" or "renderD128".
std::optional<uint32_t> Numbered(const std::string& name, std::string_view prefix, uint64_t max) {
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) {
    return std::nullopt;
  }
  std::optional<uint64_t> n = plugin::ParseUnsigned(std::string_view(name).substr(prefix.size()));
  if (!n || *n > max) return std::nullopt;
  return static_cast<uint32_t>(*n);
}

// The numbered sub-folders "<prefix><K>" of `dir`, as a count; `bad` names the rest that look
// like them.
uint32_t CountNumbered(const std::string& dir, std::string_view prefix,
                       std::vector<std::string>* bad) {
  uint32_t count = 0;
  for (const std::string& name : plugin::Entries(dir)) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    std::optional<uint32_t> k = Numbered(name, prefix, kMaxTiles - 1);
    if (k && plugin::IsDirectory(dir + "/" + name)) {
      ++count;
    } else {
      bad->push_back(name);
    }
  }
  return count;
}

std::string DriverOf(const std::string& device_dir) {
  char resolved[PATH_MAX];
  const std::string link = device_dir + "/driver";
  if (realpath(link.c_str(), resolved) == nullptr) return "";
  std::string path(resolved);
  return path.substr(path.rfind('/') + 1);
}

}  // namespace

const Model* ModelByPciDevice(uint32_t pci_device) {
  for (const Model& m : kModels) {
    if (m.pci_device == pci_device) return &m;
  }
  return nullptr;
}

std::string RayType(const std::string& sycl_name) {
  // Python's str.split(" "): empty words between repeated spaces count as words.
  std::vector<std::string> words;
  size_t start = 0;
  while (true) {
    size_t space = sycl_name.find(' ', start);
    words.push_back(
        sycl_name.substr(start, space == std::string::npos ? std::string::npos : space - start));
    if (space == std::string::npos) break;
    start = space + 1;
  }
  std::string type = "Intel-GPU-";
  const size_t first = words.size() >= 2 ? words.size() - 2 : 0;
  for (size_t i = first; i < words.size(); ++i) {
    if (i > first) type += '-';
    type += words[i];
  }
  return type;
}

CardScan FindCards(const std::string& sysfs_root, bool integrated) {
  CardScan scan;
  const std::string class_dir = sysfs_root + "/class/drm";
  std::set<std::string> seen;  // one card per PCI function
  std::vector<Card> found;
  for (const std::string& name : plugin::Entries(class_dir)) {
    std::optional<uint32_t> number = Numbered(name, "card", 4095);
    if (!number) continue;
    const std::string dir = class_dir + "/" + name;
    std::optional<plugin::PciFunction> f = plugin::ReadPciFunction(dir + "/device");
    if (!f) {
      // A virtual or platform display (vkms, simple-framebuffer) is no PCI function; a PCI
      // function whose vendor file lies is reported.
      if (plugin::IsDirectory(dir + "/device") &&
          plugin::ReadLine(dir + "/device/vendor").has_value()) {
        scan.problems.push_back(name + ": its PCI function's vendor does not read as a PCI id");
      }
      continue;
    }
    if (f->vendor != kIntel) continue;  // NVIDIA, AMD, a BMC's VGA: other plugins' or none
    if (std::optional<std::string> cls = plugin::ReadLine(dir + "/device/class")) {
      std::optional<uint32_t> c = plugin::ParseHexId(*cls);
      if (c && (*c >> 16) != 0x03) continue;  // not a display controller
    }
    if (!seen.insert(f->bus_id).second) continue;
    Card card;
    card.card = *number;
    card.pci = *f;
    card.driver = DriverOf(dir + "/device");
    card.model = ModelByPciDevice(f->device);
    card.integrated = f->bus_id == "0000:00:02.0";
    std::vector<std::string> bad;
    uint32_t tiles = CountNumbered(dir + "/device", "tile", &bad);
    if (tiles == 0 && card.model != nullptr && card.model->tiles > 1) {
      tiles = CountNumbered(dir + "/gt", "gt", &bad);
    }
    for (const std::string& b : bad) {
      scan.problems.push_back(name + ": \"" + b + "\" is not a tile folder");
    }
    if (tiles == 0) tiles = card.model != nullptr ? card.model->tiles : 1;
    card.tiles = tiles;
    if (card.model == nullptr && f->device == 0) {
      scan.problems.push_back(name + ": its device id does not read as a PCI id (model unknown)");
    } else if (card.model == nullptr) {
      char id[8];
      std::snprintf(id, sizeof(id), "0x%04x", f->device & 0xffff);
      scan.problems.push_back(name + ": Intel device " + id +
                              " is not a model this plugin knows (no type, memory unknown)");
    }
    found.push_back(std::move(card));
  }
  // Level Zero's order: discrete devices first, each group by PCI bus id.
  std::sort(found.begin(), found.end(), [](const Card& a, const Card& b) {
    if (a.integrated != b.integrated) return !a.integrated;
    return a.pci.bus_id < b.pci.bus_id;
  });
  for (Card& c : found) {
    if (c.integrated && !integrated) {
      scan.integrated_left_out.push_back(std::move(c));
    } else {
      scan.cards.push_back(std::move(c));
    }
  }
  if (scan.cards.empty()) {
    if (!scan.integrated_left_out.empty()) {
      scan.why_none = "only integrated graphics (" + scan.integrated_left_out[0].pci.bus_id +
                      "), not counted (config integrated=true counts them)";
    } else if (!plugin::IsDirectory(class_dir)) {
      scan.why_none = "no Intel GPUs: no " + class_dir + " (no DRM driver is loaded)";
    } else {
      scan.why_none = "no Intel GPUs: no card in " + class_dir + " is an Intel PCI display device";
    }
  }
  return scan;
}

}  // namespace rayaccel::intel_gpu
