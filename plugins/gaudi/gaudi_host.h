// What an Intel Gaudi host has, from the habanalabs driver's sysfs alone: each accelerator's
// module id (its OAM slot, what HABANA_VISIBLE_MODULES names), PCI function, type, firmware,
// status, and the RDMA device of its scale-out ports. Pure functions over a /sys root.
#ifndef RAYACCEL_PLUGINS_GAUDI_GAUDI_HOST_H_
#define RAYACCEL_PLUGINS_GAUDI_GAUDI_HOST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/sysfs.h"

namespace rayaccel::gaudi {

inline constexpr uint32_t kHabanaPciVendor = 0x1da3;

struct Accelerator {
  std::string name;        // "accel3"
  uint32_t module_id = 0;  // the OAM slot
  plugin::PciFunction pci;
  std::string device_type;    // the driver's: "GAUDI2", "GAUDI3", "GAUDI2B"
  std::string status;         // the driver's, as written: "Operational", "In reset", ...
  std::string fw_os_version;  // fw_os_ver
  std::string cpucp_version;  // cpucp_ver
  std::string scale_out_nic;  // "hbl_3" when the RDMA device exists
  uint64_t max_power_mw = 0;  // max_power; 0 when not readable (a non-operational device)
  uint64_t resets = 0;        // hard_reset_cnt + soft_reset_cnt: grows with every reset
};

struct Scan {
  std::vector<Accelerator> accelerators;  // by module id
  std::string driver_version;             // /sys/module/habanalabs/version
  std::vector<std::string> problems;      // devices left out, and why
  std::string why_none;
};

Scan ScanHost(const std::string& sysfs_root);

// The generation behind a PCI device id or a driver device type: 1, 2, 3; 0 when unknown.
int GenerationOf(uint32_t pci_device_id, const std::string& device_type);

// Whether the driver's status means the device can run work ("operational", any case).
bool IsOperational(const std::string& status);

}  // namespace rayaccel::gaudi

#endif  // RAYACCEL_PLUGINS_GAUDI_GAUDI_HOST_H_
