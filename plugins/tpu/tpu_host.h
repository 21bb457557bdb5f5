// What a TPU host has: its chips (device nodes and the PCI functions behind them) and the
// slice it belongs to (GKE environment, else the GCE metadata server). Pure functions over a
// /dev and /sys root, so tests run them on fixture trees.
#ifndef RAYACCEL_PLUGINS_TPU_TPU_HOST_H_
#define RAYACCEL_PLUGINS_TPU_TPU_HOST_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/sysfs.h"

namespace rayaccel::tpu {

struct Chip {
  uint32_t index = 0;  // what TPU_VISIBLE_CHIPS names: N of /dev/accelN, or the vfio order
  std::string node;    // "/dev/accel0", "/dev/vfio/12"
  std::optional<plugin::PciFunction> pci;
};

struct ChipScan {
  std::vector<Chip> chips;
  std::string source;  // "accel" or "vfio"; empty with no chips
  std::string why_none;
};

// Ray's rule: /dev/accel* entries that are not directories (a /dev/accel/ folder is NVIDIA's);
// else numeric /dev/vfio/<group> entries whose IOMMU group holds a PCI function of vendor
// 0x1ae0.
ChipScan FindChips(const std::string& dev_root, const std::string& sysfs_root);

// The slice this host belongs to, as Ray reads it: each field from its GKE variable when that
// is set and not empty, else from the GCE metadata server.
struct SliceIdentity {
  std::string pod_type;    // normalised ("v4-16", "v7x-8"); empty when unknown or invalid
  std::string topology;    // lower-case ("2x2x2"); empty when unknown
  std::string slice_name;  // TPU_NAME or the instance id
  std::optional<uint32_t> worker_id;
  std::vector<std::string> worker_hostnames;  // TPU_WORKER_HOSTNAMES
  std::vector<std::string> problems;          // what did not check out, for the log
};

using EnvLookup = std::function<std::optional<std::string>(const char* name)>;
// key -> value; called only for what the environment does not say.
using MetadataLookup = std::function<std::optional<std::string>(const std::string& key)>;

SliceIdentity ReadSliceIdentity(const EnvLookup& env, const MetadataLookup& metadata,
                                uint64_t chips_on_host);

}  // namespace rayaccel::tpu

#endif  // RAYACCEL_PLUGINS_TPU_TPU_HOST_H_
