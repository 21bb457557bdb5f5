// The host's own topology, from hwloc: where each PCI device sits relative to CPUs, memory,
// NICs and the other devices. Works on this machine or on an exported XML topology
// (HWLOC_XMLFILE, hwloc's own variable, or an explicit file).
#ifndef RAYACCEL_TOPOLOGY_HOST_TOPOLOGY_H_
#define RAYACCEL_TOPOLOGY_HOST_TOPOLOGY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rayaccel/snapshot.h"

struct hwloc_obj;

namespace rayaccel {

class HostTopology {
 public:
  // `xml_path` empty: hwloc's default (HWLOC_XMLFILE when set, else this machine).
  //
  // XML from outside (a file here, HWLOC_XMLFILE's, a capture bundle's in LoadXml) survives
  // any bytes: hwloc 2.9 asserts, and so aborts its process, on some malformed XML, so such XML
  // is first loaded by the rayaccel-hwloc-check program (installed with this library: next to
  // the running program or in the bin/ beside the library's folder; a few milliseconds); an
  // abort, crash or hang there is an error here naming the source and what hwloc said, and so
  // is that program missing. Only this machine's own cache (hwloc_cache.h) is loaded directly.
  static absl::StatusOr<std::unique_ptr<HostTopology>> Load(const std::string& xml_path = "");
  // From an exported topology held in memory (a capture bundle's); `source` names it in
  // errors and is what source() then says: "XML <path>".
  static absl::StatusOr<std::unique_ptr<HostTopology>> LoadXml(const std::string& xml,
                                                               std::string source);
  // The hwloc library in use, "2.9.0".
  static std::string LibraryVersion();
  // This topology exported as hwloc XML, for a capture bundle.
  absl::StatusOr<std::string> ExportXml() const;
  ~HostTopology();
  HostTopology(const HostTopology&) = delete;
  HostTopology& operator=(const HostTopology&) = delete;

  // Where the topology came from: "this machine" or "XML <path>".
  const std::string& source() const { return source_; }

  struct Placement {
    bool found = false;  // false: hwloc does not know this bus id; the rest is empty
    int numa_node = -1;  // -1 when the device is local to several NUMA nodes or none
    std::string cpuset;  // local CPUs as a list, "0-13,28-41"
    std::vector<std::string> nearest_nics;  // network/OpenFabrics names, nearest level only
  };
  // `pci_bus_id` in "dddd:bb:dd.f" form. Answers here and below are computed once: the
  // topology does not change once loaded, and an agent asks again on every rescan.
  Placement Locate(const std::string& pci_bus_id) const;

  // The PCIe path level between two PCI devices (nvidia-smi's vocabulary); kUnknown when
  // either is not in the topology.
  PciePath PathBetween(const std::string& bus_a, const std::string& bus_b) const;

  // NVLink connectivity between GPUs from hwloc's "NVLinkBandwidth" matrix (NVML backend):
  // direct GPU-GPU links, and GPUs reaching each other through a common NVSwitch fabric.
  struct Nvlink {
    std::string bus_a;
    std::string bus_b;
    uint64_t bandwidth_mbps = 0;
    uint32_t count = 0;  // always 0 (unknown): hwloc gives bandwidth, not link counts
  };
  const std::vector<Nvlink>& NvlinkBandwidth() const;

 private:
  struct Impl;
  explicit HostTopology(std::unique_ptr<Impl> impl, std::string source);
  Placement LocateUncached(const std::string& pci_bus_id) const;
  PciePath PathUncached(hwloc_obj* a, hwloc_obj* b) const;
  std::vector<Nvlink> NvlinkUncached() const;
  std::unique_ptr<Impl> impl_;
  std::string source_;
};

namespace host_topology_internal {

// rayaccel-hwloc-check's whole work (hwloc_check_main.cc): `xml` loaded in this process, with
// the settings of every load here, unguarded.
absl::Status LoadXmlHere(const std::string& xml);

}  // namespace host_topology_internal

}  // namespace rayaccel

#endif  // RAYACCEL_TOPOLOGY_HOST_TOPOLOGY_H_
