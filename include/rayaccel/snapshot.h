// rayaccel/snapshot.h: the node's model, the types every layer of rayaccel shares.
//
// A NodeSnapshot is what a scan found on one node: its devices (with their attributes and
// health), the links between them, the domains they form, each plugin's status, and what Ray
// is given (RayView). It is immutable once published; a Registry hands it out as
// std::shared_ptr<const NodeSnapshot> (rayaccel/registry.h). The allocation and capture types
// live here too: the topology, Ray mapping, isolation and transport layers use these types
// without depending on the registry that drives them.
#ifndef RAYACCEL_SNAPSHOT_H_
#define RAYACCEL_SNAPSHOT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rayaccel/plugin.h"  // the RAYACCEL_SAMPLE_* bits of DeviceSample::known

namespace rayaccel {

enum class Health { kUnknown = 0, kHealthy = 1, kUnhealthy = 2 };

// Pinned to the values of rayaccel_link_type and rayaccel_pcie_path in plugin.h.
enum class LinkType { kPcie = 1, kNvlink = 2, kXgmi = 3, kIci = 4, kScaleOut = 5, kOther = 6 };
enum class PciePath { kUnknown = 0, kPix = 1, kPxb = 2, kPhb = 3, kNode = 4, kSys = 5 };

const char* HealthName(Health health);    // "healthy", "unhealthy", "unknown"
const char* LinkTypeName(LinkType type);  // "pcie", "nvlink", "xgmi", ...
const char* PciePathName(PciePath path);  // "PIX", ..., "" for unknown

struct Attribute {
  enum class Kind { kString = 0, kInt = 1, kBool = 2, kVersion = 3 };
  std::string name;
  Kind kind = Kind::kString;
  std::string string_value;  // kString, kVersion
  int64_t int_value = 0;     // kInt; kBool as 0/1
};

struct Device {
  std::string id;        // stable, unique on the node (UUID)
  std::string plugin;    // the plugin that reported it
  std::string resource;  // the Ray resource it counts toward ("GPU")
  uint32_t index = 0;    // the plugin's own index (what the visible-devices variable takes)
  std::string name;
  std::string vendor;
  std::string accelerator_type;  // Ray's type string; derived by the host when not reported
  std::string architecture;
  uint64_t memory_bytes = 0;
  std::string pci_bus_id;  // "dddd:bb:dd.f", or empty
  uint32_t pci_vendor_id = 0;
  uint32_t pci_device_id = 0;
  int numa_node = -1;  // -1 unknown
  std::string driver_version;
  std::string firmware_version;
  std::string parent_id;          // partition parent, empty for a whole device
  std::string partition_profile;  // "1g.10gb", "CPX", ...
  Health health = Health::kUnknown;
  std::string health_reason;
  std::vector<Attribute> attributes;
  // From the host topology (hwloc), for devices with a PCI bus id:
  std::string cpuset;                     // local CPUs, "0-13,28-41"
  std::vector<std::string> nearest_nics;  // network/RDMA devices nearest to it
  std::string topology_note;              // why host data is missing, e.g. bus id unknown
};

struct Link {
  size_t a = 0;  // positions in NodeSnapshot::devices, a < b
  size_t b = 0;
  LinkType type = LinkType::kPcie;
  uint32_t count = 0;
  uint64_t bandwidth_mbps = 0;
  PciePath pcie_path = PciePath::kUnknown;
  // "plugin:<name>" or "hwloc". Plugin-reported links win over derived ones where they
  // disagree; both are kept (see BestLink in docs/topology.md).
  std::string source;
  uint32_t weight = 0;  // the vendor's own distance (AMD KFD link weight), 0 none
  uint32_t hops = 0;    // links traversed, 0 unknown
  uint64_t min_bandwidth_mbps = 0;
  std::string type_name = {};  // kOther: the interconnect's own name ("UB"); empty otherwise
};

struct Domain {
  std::string plugin;
  std::string kind;  // "nvlink", "xgmi", "tpu-slice", ...
  std::string id;
  std::vector<size_t> devices;  // positions in NodeSnapshot::devices
};

struct PluginStatus {
  enum class State {
    kActive = 0,    // loaded and answered; its devices are in the snapshot
    kDegraded = 1,  // loaded, but some answers were rejected (message says which)
    kFailed = 2,    // loaded, but initialize or discover failed; contributes nothing
    kRefused = 3,   // not loaded: unsafe file, bad entry point, incompatible ABI, bad table
  };
  std::string name;  // the plugin's own name, or the file stem when refused before that
  std::string path;
  State state = State::kRefused;
  std::string message;      // why, for anything but kActive; may carry notes otherwise
  std::string abi_version;  // negotiated "1.0", empty when refused before negotiation
  std::string vendor;
  std::string plugin_version;
  std::string resource_name;
  std::string visible_devices_env;
  uint64_t capabilities = 0;
  size_t device_count = 0;
};
const char* PluginStateName(PluginStatus::State state);  // "active", "degraded", ...

// What Ray is given: the same shapes as GcsNodeInfo.resources_total and .labels.
struct RayView {
  std::map<std::string, double> resources;
  std::map<std::string, std::string> labels;
};

// One immutable view of the node. A rescan produces a new snapshot with a higher generation.
struct NodeSnapshot {
  uint64_t generation = 0;
  std::vector<PluginStatus> plugins;
  std::vector<Device> devices;  // grouped by plugin, in each plugin's discovery order
  std::vector<Link> links;
  std::vector<Domain> domains;
  std::map<std::string, std::string> plugin_labels;  // node labels the plugins reported
  std::string host_topology;  // where hwloc's view came from, or why there is none
  RayView ray;
  std::map<std::string, std::string> resource_owners;  // Ray resource -> the plugin giving it
};

// A topology-aware choice of devices (Registry::PreferredAllocation).
struct Allocation {
  std::vector<size_t> devices;  // positions in NodeSnapshot::devices, ascending; empty: none
  std::vector<std::string> device_ids;  // the same devices' ids
  uint64_t generation = 0;              // the snapshot the positions refer to
  std::string reason;                   // why none is possible, or what made this set best
  // The set's score and its parts (docs/topology.md): direct-link bandwidth inside the set,
  // PCIe closeness, NUMA/NIC locality; and the connectivity of the devices left over (the
  // whole-partition objective: the other sets of the split; request-first: every pair left).
  int64_t link_score = 0;
  int64_t leftover_score = 0;
};

// What a preferred allocation optimizes (docs/topology.md).
enum class AllocationObjective {
  // The available devices are split into sets of the requested size (and one set of the rest)
  // with the most connectivity in total; the request gets the split's best set, so what is
  // left stays as usable as it can be for the requests to come (the objective of NVIDIA's
  // go-gpuallocator best-effort policy). The default.
  kWholePartition,
  // The best set for this request alone; the connectivity left over only breaks ties. For a
  // node that serves one request and nothing after it.
  kRequestFirst,
};

// A node as captured (Registry::Capture), to be replayed without its hardware
// (RegistryOptions::replay): each plugin's answers as they crossed the ABI, re-checked by the
// registry's own Collector on replay, and hwloc's view of the host. docs/capture.md.
struct CapturedPlugin {
  PluginStatus status;  // as the capture's snapshot had it (name, path, state, properties, ...)
  bool has_prepare_allocation = false;
  std::string zero_devices_reason;
  std::string report;  // discover and the optional queries, in the plugin host's encoding
  // validate_quantity for 1..N: "" when allowed, else the plugin's refusal.
  std::map<uint32_t, std::string> quantities;
  struct AllocationAnswer {
    std::vector<uint32_t> indices;           // plugin indices, ascending
    std::map<std::string, std::string> env;  // prepare_allocation's answer...
    std::string error;                       // ...or its refusal
  };
  // Each device alone, pairs (small nodes), all, and all but partition parents.
  std::vector<AllocationAnswer> allocations;
};
// What a device is doing now (Registry::SampleTelemetry, a plugin's get_telemetry). A field
// is a value only where its RAYACCEL_SAMPLE_* bit (plugin.h) is set in `known`.
struct DeviceSample {
  std::string device_id;  // the snapshot's device
  std::string plugin;
  uint32_t index = 0;  // the plugin's index
  uint32_t known = 0;
  uint32_t utilization_percent = 0;  // 0-100
  uint32_t power_mw = 0;
  uint64_t memory_used_bytes = 0;
  uint64_t memory_total_bytes = 0;
  int32_t temperature_c = 0;
  uint64_t ecc_corrected = 0;  // counters: since the driver loaded, never down
  uint64_t ecc_uncorrected = 0;
  uint64_t retired_pages = 0;
  uint64_t link_errors = 0;
};
// One plugin's part of a sample.
struct PluginTelemetry {
  std::string plugin;
  std::string error;                        // the call failed or timed out: no samples
  std::map<uint32_t, std::string> unknown;  // RAYACCEL_SAMPLE_* bits -> why the driver cannot
  std::vector<std::string> problems;        // samples refused, and why
  double seconds = 0;                       // how long the plugin took
};
struct Telemetry {
  int64_t unix_ms = 0;  // when it was taken
  std::vector<DeviceSample> devices;
  std::vector<PluginTelemetry> plugins;  // those with the hook
};

struct CapturedNode {
  std::vector<CapturedPlugin> plugins;
  std::string host_topology;  // the snapshot's description of it
  std::string hwloc_xml;      // hwloc's export, when the capture used hwloc
};

}  // namespace rayaccel

#endif  // RAYACCEL_SNAPSHOT_H_
