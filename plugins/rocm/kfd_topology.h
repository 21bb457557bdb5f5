// AMD GPUs as the amdgpu kernel driver describes them in the KFD topology
// (/sys/class/kfd/kfd/topology/nodes/N/{properties,gpu_id,name,mem_banks,io_links,p2p_links}),
// turned into devices, partitions, links and xGMI hives. No ROCm user-space library needed.
// Field meanings follow the kernel's drivers/gpu/drm/amd/amdkfd/kfd_topology.c and kfd_crat.h.
#ifndef RAYACCEL_PLUGINS_ROCM_KFD_TOPOLOGY_H_
#define RAYACCEL_PLUGINS_ROCM_KFD_TOPOLOGY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/sysfs.h"

namespace rayaccel::rocm {

// CRAT io-link types (kfd_crat.h).
inline constexpr uint32_t kIoLinkPcie = 2;
inline constexpr uint32_t kIoLinkXgmi = 11;

struct KfdLink {
  uint32_t type = 0;
  uint32_t node_to = 0;
  uint32_t weight = 0;
  uint64_t min_bandwidth = 0;  // MB/s
  uint64_t max_bandwidth = 0;  // MB/s
  bool p2p = false;            // from p2p_links (indirect), else io_links
};

struct KfdNode {
  uint32_t id = 0;
  plugin::Properties props;
  uint32_t gpu_id = 0;
  std::string name;
  uint64_t vram_bytes = 0;  // frame-buffer memory banks (heap types 1 and 2)
  std::vector<KfdLink> links;
  bool is_gpu() const { return props.Get("simd_count") > 0; }
};

// Reads every node under `topology_dir`/nodes. A node whose properties cannot be read (it
// vanished, or its file is garbage) is skipped with a line in `problems`. Returns false when
// there is no KFD topology at all (no amdgpu driver): `problems` then says why.
bool ReadKfdNodes(const std::string& topology_dir, std::vector<KfdNode>* nodes,
                  std::vector<std::string>* problems);

struct AmdDevice {
  uint32_t index = 0;       // HIP ordinal for schedulable devices; 65536+ for partition parents
  bool schedulable = true;  // false for the physical parent of partitions
  std::string id;
  std::string name;
  std::string gfx_target;  // "gfx90a"
  uint64_t memory_bytes = 0;
  std::string pci_bus_id;
  uint32_t pci_device_id = 0;
  int32_t numa_node = -1;
  std::string parent_id;
  std::string partition_profile;  // "CPX", "DPX", "QPX"; empty for a whole device
  uint32_t kfd_node = 0;
  uint32_t kfd_gpu_id = 0;
  uint32_t render_minor = 0;
  uint64_t compute_units = 0;
  uint64_t num_xcc = 0;
  uint64_t unique_id = 0;
  uint64_t hive_id = 0;
  uint64_t firmware_version = 0;
};

struct AmdLink {
  uint32_t a = 0;  // device indices, a < b
  uint32_t b = 0;
  uint32_t type = 0;  // kIoLinkPcie, kIoLinkXgmi, ...
  uint32_t weight = 0;
  uint32_t hops = 0;
  uint64_t min_bandwidth = 0;
  uint64_t max_bandwidth = 0;
};

struct AmdTopology {
  std::vector<AmdDevice> devices;  // schedulable first (by KFD node), then parents
  std::vector<AmdLink> links;
  std::map<uint64_t, std::vector<uint32_t>> hives;  // hive id -> schedulable device indices
};

// GPU nodes become devices: several KFD nodes with one PCI domain:bus:device and one
// unique_id are compute partitions of one physical GPU (a parent device plus one device per
// partition); CPU nodes give NUMA affinity. Problems (a link to a node that does not exist,
// ...) are listed, never fatal.
AmdTopology BuildTopology(const std::vector<KfdNode>& nodes, std::vector<std::string>* problems);

// "gfx90a" from gfx_target_version 90010 (major*10000 + minor*100 + stepping).
std::string GfxTarget(uint64_t gfx_target_version);

// The marketing name for an AMD PCI device id, or a descriptive fallback.
std::string AmdProductName(uint32_t pci_device_id, const std::string& gfx_target);

}  // namespace rayaccel::rocm

#endif  // RAYACCEL_PLUGINS_ROCM_KFD_TOPOLOGY_H_
