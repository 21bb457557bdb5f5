// Ray's accelerator type strings, derived exactly as Ray derives them today, in one place so
// that no plugin has to know Ray's naming. Sources: Ray's python/ray/_private/accelerators/
// (nvidia_gpu.py, amd_gpu.py, tpu.py, hpu.py); see docs/ray-integration.md.
#ifndef RAYACCEL_RAY_ACCELERATOR_TYPE_H_
#define RAYACCEL_RAY_ACCELERATOR_TYPE_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace rayaccel {

inline constexpr uint32_t kPciVendorNvidia = 0x10de;
inline constexpr uint32_t kPciVendorAmd = 0x1002;
inline constexpr uint32_t kPciVendorGoogle = 0x1ae0;
inline constexpr uint32_t kPciVendorHabana = 0x1da3;

// From an NVIDIA device name: "NVIDIA H100 80GB HBM3" -> "H100", "Tesla V100-SXM2-16GB" ->
// "V100", "NVIDIA RTX PRO 6000 Blackwell Server Edition" -> "RTX-PRO-6000",
// "NVIDIA GeForce RTX 4090" -> "GeForce-RTX-4090". Empty for an empty name.
std::string NvidiaAcceleratorType(absl::string_view device_name);

// From an AMD PCI device id: 0x74a1 -> "AMD-Instinct-MI300X-OAM". Empty when Ray has no name.
std::string AmdAcceleratorType(uint32_t pci_device_id);

// From a Google TPU PCI device id: 0x005e -> "TPU-V4". Empty when unknown.
std::string TpuAcceleratorType(uint32_t pci_device_id);

// From a Habana/Intel Gaudi PCI device id: 0x1020 -> "Intel-GAUDI2". Empty when unknown.
std::string GaudiAcceleratorType(uint32_t pci_device_id);

// Picks the rule by PCI vendor id, else by the vendor string ("nvidia", "amd", "google",
// "intel"/"habana"). Empty when no rule applies.
std::string DeriveAcceleratorType(absl::string_view vendor, absl::string_view device_name,
                                  uint32_t pci_vendor_id, uint32_t pci_device_id);

}  // namespace rayaccel

#endif  // RAYACCEL_RAY_ACCELERATOR_TYPE_H_
