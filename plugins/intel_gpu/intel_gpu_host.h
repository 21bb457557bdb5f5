// What an Intel GPU host has, as the i915 and xe drivers show it in sysfs: the DRM cards
// (/sys/class/drm/card<N>) whose PCI function is Intel's, and the tiles (stacks) of each, which
// Level Zero makes root devices of under its default flat hierarchy. A pure function over a
// /sys root, so tests run it on fixture trees (tests/fixtures/intel_gpu).
#ifndef RAYACCEL_PLUGINS_INTEL_GPU_INTEL_GPU_HOST_H_
#define RAYACCEL_PLUGINS_INTEL_GPU_INTEL_GPU_HOST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/sysfs.h"

namespace rayaccel::intel_gpu {

// A model by its PCI device id: the name SYCL gives it (Ray's type comes from its last two
// words), the tiles it has and the memory of each.
struct Model {
  uint32_t pci_device = 0;
  const char* name = "";     // "Intel(R) Data Center GPU Max 1550"
  const char* family = "";   // "pvc", "dg2", ...
  uint32_t tiles = 1;        // stacks on the package
  uint64_t tile_memory = 0;  // bytes per tile; 0 when the model comes in several sizes
};
const Model* ModelByPciDevice(uint32_t pci_device);

// Ray's accelerator type for a SYCL device name, as intel_gpu.py makes it: "Intel-GPU-" and
// the name's last two space-separated words joined by '-'.
std::string RayType(const std::string& sycl_name);

struct Card {
  uint32_t card = 0;  // N of card<N>
  plugin::PciFunction pci;
  std::string driver;            // "i915", "xe"; empty when unbound or unreadable
  const Model* model = nullptr;  // null for a device id this plugin does not know
  uint32_t tiles = 1;            // from the driver's tile folders, else the model
  bool integrated = false;       // the processor's graphics (PCI 0000:00:02.0)
};

struct CardScan {
  std::vector<Card> cards;                // in Level Zero's order: discrete first, by PCI bus id
  std::vector<Card> integrated_left_out;  // when integrated graphics are not counted
  std::string why_none;                   // with no cards: what was looked at
  std::vector<std::string> problems;      // what did not read right, for the log
};

// The Intel GPUs under <sysfs_root>/class/drm: card<N> entries (not renderD<N>, controlD<N>
// or card<N>-<connector>) whose `device` is a PCI function of vendor 0x8086 with a display
// class. Tiles come from the xe driver's device/tile<K> folders, or the i915 driver's
// gt/gt<K> folders on a multi-tile model (on other models i915's gt1 is a media GT, not a
// tile), else from the model. Integrated graphics count only when `integrated` is true.
CardScan FindCards(const std::string& sysfs_root, bool integrated);

}  // namespace rayaccel::intel_gpu

#endif  // RAYACCEL_PLUGINS_INTEL_GPU_INTEL_GPU_HOST_H_
