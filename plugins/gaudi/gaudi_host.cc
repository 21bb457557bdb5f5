#include "gaudi/gaudi_host.h"

#include <algorithm>
#include <cctype>
#include <map>

namespace rayaccel::gaudi {
namespace {

// accel<N> entries of a folder, sorted.
std::vector<std::string> AccelEntries(const std::string& dir) {
  std::vector<std::string> out;
  for (const std::string& name : plugin::Entries(dir)) {
    if (name.rfind("accel", 0) == 0 && name.size() > 5 &&
        std::all_of(name.begin() + 5, name.end(),
                    [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; })) {
      out.push_back(name);
    }
  }
  return out;
}

std::string Line(const std::string& path) { return plugin::ReadLine(path).value_or(""); }

}  // namespace

int GenerationOf(uint32_t pci_device_id, const std::string& device_type) {
  switch (pci_device_id) {
    case 0x1000:
    case 0x1001:
    case 0x1010:
    case 0x1011:
      return 1;
    case 0x1020:
    case 0x1021:
      return 2;
    case 0x1030:
    case 0x1060:
    case 0x1061:
    case 0x1062:
    case 0x1063:
      return 3;
    default:
      break;
  }
  if (device_type.rfind("GAUDI3", 0) == 0) return 3;
  if (device_type.rfind("GAUDI2", 0) == 0) return 2;
  if (device_type.rfind("GAUDI", 0) == 0) return 1;
  return 0;
}

bool IsOperational(const std::string& status) {
  std::string s = status;
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s == "operational";
}

Scan ScanHost(const std::string& sysfs_root) {
  Scan scan;
  scan.driver_version = Line(sysfs_root + "/module/habanalabs/version");
  std::map<uint32_t, std::string> by_module;  // module id -> accel name, to catch duplicates
  for (const std::string& name : AccelEntries(sysfs_root + "/class/accel")) {
    std::string dev = sysfs_root + "/class/accel/" + name + "/device";
    std::optional<plugin::PciFunction> pci = plugin::ReadPciFunction(dev);
    if (!pci || pci->vendor != kHabanaPciVendor) continue;  // another vendor's accel device
    Accelerator a;
    a.name = name;
    a.pci = *pci;
    std::string module = Line(dev + "/module_id");
    char* end = nullptr;
    unsigned long id = std::strtoul(module.c_str(), &end, 10);
    if (module.empty() || end == module.c_str() || *end != '\0' || id > 1023) {
      scan.problems.push_back(name + " (" + pci->bus_id + ") left out: module_id '" + module +
                              "' is not a module id");
      continue;
    }
    a.module_id = static_cast<uint32_t>(id);
    if (auto [it, fresh] = by_module.emplace(a.module_id, name); !fresh) {
      scan.problems.push_back(name + " left out: module id " + std::to_string(a.module_id) +
                              " is also " + it->second + "'s");
      continue;
    }
    a.device_type = Line(dev + "/device_type");
    a.status = Line(dev + "/status");
    a.fw_os_version = Line(dev + "/fw_os_ver");
    a.cpucp_version = Line(dev + "/cpucp_ver");
    a.max_power_mw = plugin::ParseUnsigned(Line(dev + "/max_power")).value_or(0);
    a.resets = plugin::ParseUnsigned(Line(dev + "/hard_reset_cnt")).value_or(0) +
               plugin::ParseUnsigned(Line(dev + "/soft_reset_cnt")).value_or(0);
    // The RDMA device of the accelerator's own ports is named after it: hbl_N for accelN.
    std::string nic = "hbl_" + name.substr(5);
    if (plugin::IsDirectory(sysfs_root + "/class/infiniband/" + nic)) a.scale_out_nic = nic;
    scan.accelerators.push_back(std::move(a));
  }
  std::sort(scan.accelerators.begin(), scan.accelerators.end(),
            [](const Accelerator& x, const Accelerator& y) { return x.module_id < y.module_id; });
  if (scan.accelerators.empty()) {
    scan.why_none = scan.driver_version.empty()
                        ? "no Gaudi devices: the habanalabs driver is not loaded"
                        : "no Gaudi devices: habanalabs " + scan.driver_version +
                              " is loaded, but " + sysfs_root + "/class/accel has none";
  }
  return scan;
}

}  // namespace rayaccel::gaudi
