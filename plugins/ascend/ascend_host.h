// What an Ascend host has: its NPUs as the driver shows them (/dev/davinci<N>, N the chip's
// physical id) and the PCI functions of vendor 0x19e5 behind them (the driver's davinci_dev_id
// attribute names the chip). A pure function over a /dev and /sys root, so tests run it on
// fixture trees (tests/fixtures/ascend).
#ifndef RAYACCEL_PLUGINS_ASCEND_ASCEND_HOST_H_
#define RAYACCEL_PLUGINS_ASCEND_ASCEND_HOST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/sysfs.h"

namespace rayaccel::ascend {

// A chip family by its PCI device id (the driver's HISI_EP_DEVICE_ID_* and CANN's tables).
struct Chip {
  uint32_t pci_device = 0;
  const char* soc = "";    // CANN's SoC family: "Ascend910", "Ascend910B", "Ascend310P"
  const char* name = "";   // marketing name
  uint64_t hbm_bytes = 0;  // memory per chip; 0 when it varies by model
};
const Chip* ChipByPciDevice(uint32_t pci_device);

struct Npu {
  uint32_t physical_id = 0;  // N of /dev/davinci<N>
  uint32_t logical_id = 0;   // what ASCEND_RT_VISIBLE_DEVICES names: its rank among the nodes
  std::string node;          // "/dev/davinci3"
  std::optional<plugin::PciFunction> pci;
  const Chip* chip = nullptr;  // from the PCI function; null when none was matched
};

struct NpuScan {
  std::vector<Npu> npus;  // by physical id
  std::string why_none;
};

// /dev/davinci<N> (not davinci_manager), each matched to the PCI function whose
// davinci_dev_id is N. Logical ids are the ranks of the physical ids present, as the driver
// numbers what a container sees from 0.
NpuScan FindNpus(const std::string& dev_root, const std::string& sysfs_root);

}  // namespace rayaccel::ascend

#endif  // RAYACCEL_PLUGINS_ASCEND_ASCEND_HOST_H_
