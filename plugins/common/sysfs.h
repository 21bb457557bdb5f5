// Reading sysfs-shaped trees (real /sys, or a captured copy in tests): small files, "key value"
// property files, numbered sub-folders. Shared by the in-tree plugins; no exceptions escape.
#ifndef RAYACCEL_PLUGINS_COMMON_SYSFS_H_
#define RAYACCEL_PLUGINS_COMMON_SYSFS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rayaccel::plugin {

// The file's content (at most 64 KiB), or nullopt when it cannot be read.
std::optional<std::string> ReadFile(const std::string& path);

// The file's first line without surrounding blanks, or nullopt.
std::optional<std::string> ReadLine(const std::string& path);

// A KFD-style property file: one "name value" per line, values unsigned decimal. Lines that
// do not parse are listed in `bad` (as "name: text") and left out of the result.
struct Properties {
  std::map<std::string, uint64_t> values;
  std::vector<std::string> bad;
  uint64_t Get(const std::string& name, uint64_t fallback = 0) const {
    auto it = values.find(name);
    return it == values.end() ? fallback : it->second;
  }
  bool Has(const std::string& name) const { return values.count(name) > 0; }
};
std::optional<Properties> ReadProperties(const std::string& path);
// The same on a properties file's text.
Properties ParseProperties(const std::string& text);

// The names in a folder, sorted, without "." and ".."; empty when it cannot be read.
std::vector<std::string> Entries(const std::string& dir);

// The numeric entries of a folder ("0", "1", "12"), sorted numerically; empty when absent.
std::vector<uint32_t> NumberedEntries(const std::string& dir);

bool IsDirectory(const std::string& path);

// One PCI function as sysfs shows it (/sys/bus/pci/devices/<bus id>, or a link to it such as
// /sys/class/accel/accel0/device): the bus id is the name of the folder the path resolves to.
struct PciFunction {
  std::string bus_id;  // "dddd:bb:dd.f", lower-case
  uint32_t vendor = 0;
  uint32_t device = 0;
  int32_t numa_node = -1;  // -1 when unknown (sysfs says -1 on single-node machines too)
};
// nullopt when the path does not resolve to a folder named like a PCI bus id or has no
// readable vendor file.
std::optional<PciFunction> ReadPciFunction(const std::string& path);

// "0x1ae0\n" -> 0x1ae0; nullopt for anything else.
std::optional<uint32_t> ParseHexId(const std::string& text);

// The whole of `text` as an unsigned number in `base` (10 or 16, no "0x"): digits only, no
// sign, spaces or anything after them, and no overflow. The one number parser of the plugins:
// "  -5" or "12abc" is not 12 or 18446744073709551611, it is nothing.
std::optional<uint64_t> ParseUnsigned(std::string_view text, int base = 10);
// The same for a signed decimal ("-1" is a NUMA node's "none").
std::optional<int64_t> ParseSigned(std::string_view text);

// "dddd:bb:dd.f", lower-case.
std::string FormatPciBusId(uint32_t domain, uint32_t bus, uint32_t device, uint32_t function);

}  // namespace rayaccel::plugin

#endif  // RAYACCEL_PLUGINS_COMMON_SYSFS_H_
