#include "tpu/tpu_facts.h"

#include <cctype>
#include <regex>
#include <set>

namespace rayaccel::tpu {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kDefaultChipsPerHost = 4;  // Ray's DEFAULT_TPU_NUM_CHIPS_PER_HOST

bool SingleCore(const std::string& generation) {
  return generation == "v5litepod" || generation == "v6e";
}

// Ray's _get_larger_3d_topologies: every XxYxZ in steps of 4 up to the maxima.
std::set<std::string> Larger3d(int max_x, int max_y, int max_z) {
  std::set<std::string> out;
  for (int x = 4; x <= max_x; x += 4) {
    for (int y = 4; y <= max_y; y += 4) {
      for (int z = 4; z <= max_z; z += 4) {
        out.insert(std::to_string(x) + "x" + std::to_string(y) + "x" + std::to_string(z));
      }
    }
  }
  return out;
}

std::set<std::string> With(std::set<std::string> a, const std::set<std::string>& b) {
  a.insert(b.begin(), b.end());
  return a;
}

}  // namespace

const std::vector<Generation>& Generations() {
  // HBM per chip from Google Cloud's TPU documentation; v2/v3 HBM is per core pair.
  static const std::vector<Generation> kGenerations = {
      {"v2", "TPU v2", 2, 16 * kGiB},         {"v3", "TPU v3", 2, 32 * kGiB},
      {"v4", "TPU v4", 2, 32 * kGiB},         {"v5p", "TPU v5p", 2, 95 * kGiB},
      {"v5litepod", "TPU v5e", 1, 16 * kGiB}, {"v6e", "TPU v6e", 1, 32 * kGiB},
      {"v7x", "TPU7x", 2, 192 * kGiB},
  };
  return kGenerations;
}

const Generation* FindGeneration(const std::string& name) {
  for (const Generation& g : Generations()) {
    if (name == g.name) return &g;
  }
  return nullptr;
}

const Generation* GenerationFromPciDevice(uint32_t pci_device_id) {
  switch (pci_device_id) {
    case 0x005e:
      return FindGeneration("v4");
    case 0x0062:
      return FindGeneration("v5p");
    case 0x0063:
      return FindGeneration("v5litepod");
    case 0x006f:
      return FindGeneration("v6e");
    case 0x0076:
      return FindGeneration("v7x");
    default:
      return nullptr;  // 0x0027 is v2 and v3 alike
  }
}

std::optional<std::string> NormalizePodType(const std::string& raw) {
  std::string s = raw;
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.erase(0, 1);
  static const std::regex kPodType(R"(^(v|tpu)\d+[a-zA-Z]*-\d+$)");
  if (!std::regex_match(s, kPodType)) return std::nullopt;
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::regex kPrefix(R"(^tpu-?v?)");
  s = std::regex_replace(s, kPrefix, "v");
  if (PodSize(s) == 0) return std::nullopt;
  return s;  // a generation Ray does not list yet is accepted, as Ray does
}

std::string PodGeneration(const std::string& pod_type) {
  return pod_type.substr(0, pod_type.find('-'));
}

uint64_t PodSize(const std::string& pod_type) {
  size_t dash = pod_type.rfind('-');
  if (dash == std::string::npos || dash + 1 >= pod_type.size()) return 0;
  uint64_t n = 0;
  for (char c : pod_type.substr(dash + 1)) {
    if (!std::isdigit(static_cast<unsigned char>(c)) || n > (uint64_t{1} << 40)) return 0;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  return n;
}

uint64_t PodChips(const std::string& pod_type) {
  // Ray's DEFAULT_TPU_NUM_CORES_PER_CHIP (2) for a generation it does not single out.
  const Generation* g = FindGeneration(PodGeneration(pod_type));
  return PodSize(pod_type) / (g == nullptr ? 2 : g->cores_per_chip);
}

uint64_t TopologyChips(const std::string& topology) {
  static const std::regex kTopology(R"(^\d{1,4}(x\d{1,4}){1,2}$)");
  if (!std::regex_match(topology, kTopology)) return 0;
  uint64_t chips = 1;
  size_t start = 0;
  while (start <= topology.size()) {
    size_t x = topology.find('x', start);
    if (x == std::string::npos) x = topology.size();
    chips *= std::stoull(topology.substr(start, x - start));
    start = x + 1;
  }
  return chips;
}

bool IsValidTopology(const std::string& generation, const std::string& topology) {
  static const std::set<std::string> kSmall3d = {"2x2x1", "2x2x2", "2x2x4", "2x4x4"};
  static const std::set<std::string> kV4 = With(kSmall3d, Larger3d(12, 12, 16));
  static const std::set<std::string> kV5p = With(kSmall3d, Larger3d(16, 16, 24));
  static const std::set<std::string> kLite = {"1x1", "2x2", "2x4",  "2x8",  "4x4",
                                              "4x8", "8x8", "8x16", "16x16"};
  static const std::set<std::string> kV2 = {"4x4", "4x8", "8x8", "8x16", "16x16"};
  static const std::set<std::string> kV3 = {"4x4", "4x8", "8x8", "8x16", "16x16", "16x32", "32x32"};
  static const std::set<std::string> kV7x = {"2x2x1", "2x2x2", "2x2x4", "2x4x4",  "4x4x4",
                                             "4x4x8", "4x8x8", "8x8x8", "8x8x16", "8x16x16"};
  const std::set<std::string>* valid = generation == "v2"       ? &kV2
                                       : generation == "v3"     ? &kV3
                                       : generation == "v4"     ? &kV4
                                       : generation == "v5p"    ? &kV5p
                                       : SingleCore(generation) ? &kLite
                                       : generation == "v7x"    ? &kV7x
                                                                : nullptr;
  return valid != nullptr && valid->count(topology) > 0;
}

uint64_t ChipsPerHost(const std::string& pod_type) {
  uint64_t chips = PodChips(pod_type);
  if (SingleCore(PodGeneration(pod_type)) && chips > 0 && chips <= 8) return chips;
  return kDefaultChipsPerHost;
}

uint64_t PodHosts(const std::string& pod_type) {
  uint64_t chips = PodChips(pod_type), per_host = ChipsPerHost(pod_type);
  return chips == 0 ? 0 : (chips + per_host - 1) / per_host;
}

std::string RayAcceleratorType(const std::string& pod_type) {
  std::string g = PodGeneration(pod_type);
  for (char& c : g) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return "TPU-" + g;
}

HostGrid GridFor(uint64_t chips) {
  switch (chips) {
    case 1:
      return {1, 1};
    case 2:
      return {2, 1};
    case 4:
      return {2, 2};
    case 8:
      return {2, 4};
    default:
      return {};
  }
}

}  // namespace rayaccel::tpu
