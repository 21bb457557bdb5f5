#include "ascend/ascend_host.h"

#include <algorithm>
#include <map>

namespace rayaccel::ascend {
namespace {

constexpr uint32_t kHuawei = 0x19e5;

// Memory per chip where the chip has one size: Ascend 910 (32 GiB HBM2), 910B (64 GiB in the
// Atlas 800T A2's 910B1-B3; the B4 has 32), so 910B says 0 and lets the driver tell.
constexpr Chip kChips[] = {
    {0xd100, "Ascend310", "Ascend 310", 0},
    {0xd500, "Ascend310P", "Ascend 310P", 0},
    {0xd801, "Ascend910", "Ascend 910", uint64_t{32} << 30},
    {0xd802, "Ascend910B", "Ascend 910B", 0},
    {0xd803, "Ascend910_93", "Ascend 910C", 0},
};

std::optional<uint32_t> DavinciNumber(const std::string& name) {
  constexpr std::string_view kPrefix = "davinci";
  if (name.size() <= kPrefix.size() || name.compare(0, kPrefix.size(), kPrefix) != 0) {
    return std::nullopt;
  }
  std::optional<uint64_t> n = plugin::ParseUnsigned(std::string_view(name).substr(kPrefix.size()));
  if (!n || *n > 1023) return std::nullopt;
  return static_cast<uint32_t>(*n);
}

}  // namespace

const Chip* ChipByPciDevice(uint32_t pci_device) {
  for (const Chip& c : kChips) {
    if (c.pci_device == pci_device) return &c;
  }
  return nullptr;
}

NpuScan FindNpus(const std::string& dev_root, const std::string& sysfs_root) {
  NpuScan scan;
  // The chips' PCI functions, by the physical id the driver gives each.
  std::map<uint32_t, plugin::PciFunction> by_physical;
  const std::string pci_dir = sysfs_root + "/bus/pci/devices";
  for (const std::string& bus_id : plugin::Entries(pci_dir)) {
    std::optional<plugin::PciFunction> f = plugin::ReadPciFunction(pci_dir + "/" + bus_id);
    if (!f || f->vendor != kHuawei || ChipByPciDevice(f->device) == nullptr) continue;
    std::optional<std::string> id = plugin::ReadLine(pci_dir + "/" + bus_id + "/davinci_dev_id");
    std::optional<uint64_t> n = id ? plugin::ParseUnsigned(*id) : std::nullopt;
    if (n && *n <= 1023) by_physical.emplace(static_cast<uint32_t>(*n), *f);
  }
  for (const std::string& name : plugin::Entries(dev_root)) {
    std::optional<uint32_t> n = DavinciNumber(name);
    if (!n) continue;
    Npu npu;
    npu.physical_id = *n;
    npu.node = dev_root + "/" + name;
    if (auto f = by_physical.find(*n); f != by_physical.end()) {
      npu.pci = f->second;
      npu.chip = ChipByPciDevice(f->second.device);
    }
    scan.npus.push_back(std::move(npu));
  }
  std::sort(scan.npus.begin(), scan.npus.end(),
            [](const Npu& a, const Npu& b) { return a.physical_id < b.physical_id; });
  for (size_t i = 0; i < scan.npus.size(); ++i) scan.npus[i].logical_id = static_cast<uint32_t>(i);
  if (scan.npus.empty()) {
    scan.why_none = "no Ascend NPUs: no " + dev_root +
                    "/davinci<N> (the Ascend driver is not "
                    "loaded, or no NPU is mounted here)";
  }
  return scan;
}

}  // namespace rayaccel::ascend
