// What is known about Google TPU generations, and Ray's rules for TPU pod types and
// topologies (python/ray/_private/accelerators/tpu.py), in one place.
#ifndef RAYACCEL_PLUGINS_TPU_TPU_FACTS_H_
#define RAYACCEL_PLUGINS_TPU_TPU_FACTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rayaccel::tpu {

inline constexpr uint32_t kGooglePciVendor = 0x1ae0;

struct Generation {
  const char* name;         // Ray's generation: "v4", "v5litepod", "v6e", "v7x"
  const char* marketing;    // "TPU v4", "TPU v5e"
  uint32_t cores_per_chip;  // TensorCores per chip, as Ray counts them
  uint64_t hbm_bytes;       // per chip; 0 when not published
};

// Ray's generations, in Ray's order: v2, v3, v4, v5p, v5litepod, v6e, v7x.
const std::vector<Generation>& Generations();
const Generation* FindGeneration(const std::string& name);

// The generation a PCI device id names, or null. 0x0027 is v2 and v3 alike: null.
const Generation* GenerationFromPciDevice(uint32_t pci_device_id);

// Ray's pod type rule: "v4-16" and "tpu7x-8" match ^(v|tpu)\d+[a-zA-Z]*-\d+$ and normalise to
// "v4-16" and "v7x-8"; anything else is nullopt. A generation Ray does not list passes too.
std::optional<std::string> NormalizePodType(const std::string& raw);

// "v4-16" -> "v4"; "v4-16" -> 16.
std::string PodGeneration(const std::string& pod_type);
uint64_t PodSize(const std::string& pod_type);

// Chips in a whole pod of this type: size / cores per chip ("v4-16" -> 8).
uint64_t PodChips(const std::string& pod_type);

// The chips a topology names ("2x2x2" -> 8), or 0 when it is not a topology.
uint64_t TopologyChips(const std::string& topology);

// Whether Ray lists `topology` for the generation (VALID_TPU_TOPOLOGY).
bool IsValidTopology(const std::string& generation, const std::string& topology);

// Chips on one host of a pod of this type (Ray's get_num_tpu_visible_chips_per_host).
uint64_t ChipsPerHost(const std::string& pod_type);

// Hosts in a pod of this type: ceil(chips / chips per host).
uint64_t PodHosts(const std::string& pod_type);

// Ray's accelerator type for a pod type: "TPU-V4", "TPU-V5LITEPOD".
std::string RayAcceleratorType(const std::string& pod_type);

// The chip grid on one host: 1 -> 1x1, 2 -> 2x1, 4 -> 2x2, 8 -> 2x4; chip i sits at
// (i % width, i / width). Width 0 for a count that is no grid.
struct HostGrid {
  uint32_t width = 0, height = 0;
};
HostGrid GridFor(uint64_t chips);

}  // namespace rayaccel::tpu

#endif  // RAYACCEL_PLUGINS_TPU_TPU_FACTS_H_
