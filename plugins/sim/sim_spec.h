// The sim plugin's JSON spec: a described machine, read into plain structs.
// Format: docs/sim-spec.md. Errors read "FILE:LINE:COLUMN: FIELD: problem".
#ifndef RAYACCEL_PLUGINS_SIM_SIM_SPEC_H_
#define RAYACCEL_PLUGINS_SIM_SIM_SPEC_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "rayaccel/plugin.h"

namespace rayaccel::sim {

struct SimDevice {
  std::string uuid;
  std::string name;
  std::string accelerator_type;  // may be empty: the host derives it
  std::string architecture;
  uint64_t memory_bytes = 0;
  std::string pci_bus_id;
  uint32_t pci_vendor_id = 0;
  uint32_t pci_device_id = 0;
  int32_t numa_node = -1;
  std::string driver_version;
  std::string firmware_version;
  std::string parent;  // uuid of the partition parent
  std::string partition_profile;
  rayaccel_health health = RAYACCEL_HEALTH_HEALTHY;
  std::string health_reason;
};

struct SimLink {
  uint32_t a = 0;
  uint32_t b = 0;
  rayaccel_link_type type = RAYACCEL_LINK_PCIE;
  uint32_t count = 1;
  uint64_t bandwidth_mbps = 0;
  rayaccel_pcie_path path = RAYACCEL_PCIE_PATH_UNKNOWN;
  std::string type_name;  // "other" links: the interconnect's name
};

struct SimDomain {
  std::string kind;
  std::string id;
  std::vector<uint32_t> devices;
};

struct SimSpec {
  std::string resource_name = "GPU";
  std::string visible_devices_env;
  std::string vendor;  // all devices share it
  std::vector<SimDevice> devices;
  std::vector<SimLink> links;
  std::vector<SimDomain> domains;
  std::map<std::string, std::string> labels;
  std::vector<uint32_t> valid_quantities;  // empty: any quantity
};

// Parses spec text; `source` names it in errors. On failure returns false with `error` set.
bool ParseSpec(std::string_view text, const std::string& source, SimSpec* spec, std::string* error);

// Reads and parses a spec file.
bool LoadSpec(const std::string& path, SimSpec* spec, std::string* error);

}  // namespace rayaccel::sim

#endif  // RAYACCEL_PLUGINS_SIM_SIM_SPEC_H_
