#include "neuron/neuron_host.h"

#include <sys/stat.h>

#include <algorithm>
#include <optional>

#include "common/sysfs.h"

namespace rayaccel::neuron {
namespace {

// The driver's device names: "neuron" and a decimal minor.
std::optional<uint32_t> DeviceNumber(const std::string& name) {
  constexpr std::string_view kPrefix = "neuron";
  if (name.size() <= kPrefix.size() || name.compare(0, kPrefix.size(), kPrefix) != 0) {
    return std::nullopt;
  }
  std::optional<uint64_t> n = plugin::ParseUnsigned(std::string_view(name).substr(kPrefix.size()));
  if (!n || *n > 1023) return std::nullopt;
  return static_cast<uint32_t>(*n);
}

std::string Trimmed(const std::optional<std::string>& line) { return line.value_or(""); }

bool Exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

}  // namespace

std::vector<uint32_t> ParseConnectedDevices(const std::string& text, bool* ok) {
  std::vector<uint32_t> out;
  *ok = true;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string part =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    part.erase(0, part.find_first_not_of(" \t\n"));
    part.erase(part.find_last_not_of(" \t\n") + 1);
    if (!part.empty()) {
      std::optional<uint64_t> n = plugin::ParseUnsigned(part);
      if (!n || *n > 1023) {
        *ok = false;
        return {};
      }
      out.push_back(static_cast<uint32_t>(*n));
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

NeuronScan FindNeuronDevices(const std::string& sysfs_root, const std::string& dev_root) {
  NeuronScan scan;
  const std::string class_dir = sysfs_root + "/class/neuron_device";
  for (const std::string& name : plugin::Entries(class_dir)) {
    std::optional<uint32_t> number = DeviceNumber(name);
    if (!number) continue;
    const std::string dir = class_dir + "/" + name;
    NeuronDevice d;
    d.index = *number;
    const std::string arch = dir + "/info/architecture/";
    d.arch_type = Trimmed(plugin::ReadLine(arch + "arch_type"));
    d.instance_type = Trimmed(plugin::ReadLine(arch + "instance_type"));
    d.device_name = Trimmed(plugin::ReadLine(arch + "device_name"));
    if (std::optional<std::string> cores = plugin::ReadLine(dir + "/core_count")) {
      std::optional<uint64_t> n = plugin::ParseUnsigned(*cores);
      if (n && *n > 0 && *n <= 64) {
        d.core_count = static_cast<uint32_t>(*n);
      } else {
        scan.problems.push_back(name + "/core_count: \"" + *cores + "\" is not a core count");
      }
    }
    if (d.core_count == 0) {
      uint32_t k = 0;
      while (k < 64 && plugin::IsDirectory(dir + "/neuron_core" + std::to_string(k))) ++k;
      d.core_count = k;
    }
    if (d.core_count == 0 && (d.arch_type == "NDv1" || d.arch_type == "NDv2")) d.core_count = 2;
    if (d.core_count == 0) {
      scan.problems.push_back(name +
                              ": no core count (core_count unreadable, no neuron_core "
                              "folders, architecture \"" +
                              d.arch_type + "\" unknown)");
      continue;
    }
    if (std::optional<std::string> text = plugin::ReadFile(dir + "/connected_devices")) {
      bool ok = false;
      d.connected = ParseConnectedDevices(*text, &ok);
      d.connected_known = ok;
      if (!ok) scan.problems.push_back(name + "/connected_devices: \"" + *text + "\" is malformed");
    }
    const std::string node = dev_root + "/" + name;
    if (Exists(node)) d.device_node = node;
    scan.devices.push_back(std::move(d));
  }
  std::sort(scan.devices.begin(), scan.devices.end(),
            [](const NeuronDevice& a, const NeuronDevice& b) { return a.index < b.index; });
  if (scan.devices.empty()) {
    scan.why_none =
        plugin::IsDirectory(class_dir)
            ? "no Neuron devices with a core count in " + class_dir
            : "no Neuron devices: the neuron driver is not loaded (no " + class_dir + ")";
  }
  return scan;
}

std::optional<uint64_t> CoreDeviceMemoryUsed(const std::string& sysfs_root, uint32_t device,
                                             uint32_t core, std::string* why) {
  const std::string dir = sysfs_root + "/class/neuron_device/neuron" + std::to_string(device) +
                          "/neuron_core" + std::to_string(core) + "/stats/memory_usage/device_mem";
  if (!plugin::IsDirectory(dir)) {
    *why = "no neuron_core<k>/stats/memory_usage/device_mem in the driver's sysfs";
    return std::nullopt;
  }
  uint64_t used = 0;
  for (const std::string& category : plugin::Entries(dir)) {
    std::optional<std::string> line = plugin::ReadLine(dir + "/" + category + "/total");
    if (!line) continue;  // not a counter folder
    std::optional<uint64_t> n = plugin::ParseUnsigned(*line);
    if (!n || *n > (uint64_t{1} << 50) || used + *n < used) {
      *why = "device_mem/" + category + "/total: \"" + line->substr(0, 32) + "\" is not a size";
      return std::nullopt;
    }
    used += *n;
  }
  return used;
}

uint64_t DeviceHbmBytes(const std::string& device_name) {
  if (device_name == "Trainium1" || device_name == "Inferentia2") return uint64_t{32} << 30;
  if (device_name == "Trainium2") return uint64_t{96} << 30;
  return 0;
}

}  // namespace rayaccel::neuron
