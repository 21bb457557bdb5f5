// The ROCm plugin: AMD Instinct GPUs from the amdgpu driver's KFD topology in sysfs. Needs no
// ROCm user-space library, to build or to run. Config keys:
//   kfd_topology_dir  the KFD topology folder (default /sys/class/kfd/kfd/topology)
//   sysfs_root        where other sysfs reads start (default /sys): RAS counters, driver version
//   hip_library       the HIP runtime the transport copies device memory with (default: the
//                     first of libamdhip64.so, .so.6, .so.5 that loads), loaded on first use
//   device_ipc        true (default): device memory moves device to device between processes
//                     of one host through HIP IPC; false: it is staged through host memory
//   ucx_library       the UCX the transport loads (default libucp.so.0), such as a site's
//                     build with ROCm support
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/gpu_memory.h"
#include "common/plugin_util.h"
#include "common/sysfs.h"
#include "common/ucx_transport.h"
#include "rocm/amdgpu_telemetry.h"
#include "rocm/hip_memory.h"
#include "rocm/kfd_topology.h"

struct rayaccel_plugin_instance {
  const rayaccel_host_api* host = nullptr;
  std::string topology_dir;
  std::string sysfs_root;
  std::string driver_version;
  // Device memory for the transport, through the HIP runtime (loaded on first use).
  std::unique_ptr<rayaccel::plugin::GpuMemory> memory;
  rayaccel::plugin::ucx::DeviceMemoryOps* device_ops() { return memory.get(); }
  std::string ucx_library;  // config ucx_library: a UCX built with ROCm support, say
  std::mutex mu;            // guards `topo`
  rayaccel::rocm::AmdTopology topo;
};

namespace rayaccel::rocm {
namespace {

using plugin::Str;

constexpr char kVersion[] = "1.0.0";

void LogProblems(const rayaccel_plugin_instance* self, const std::vector<std::string>& problems) {
  for (const std::string& p : problems) plugin::Log(self->host, RAYACCEL_LOG_WARN, p);
}

// Health from the RAS error counters the driver exposes on the physical GPU's PCI device
// (<sysfs>/bus/pci/devices/<bdf>/ras/<block>_err_count: "ue: N" and "ce: N" lines), shared
// by all its partitions (their own render nodes have no ras folder). Uncorrectable errors make
// a device unhealthy; no counters at all leave it unknown.
std::pair<rayaccel_health, std::string> RasHealth(const rayaccel_plugin_instance* self,
                                                  const std::string& pci_bus_id) {
  std::string ras = self->sysfs_root + "/bus/pci/devices/" + pci_bus_id + "/ras";
  if (!plugin::IsDirectory(ras)) return {RAYACCEL_HEALTH_UNKNOWN, "no RAS counters in sysfs"};
  static const char* kBlocks[] = {"umc", "gfx", "sdma", "mmhub", "xgmi_wafl", "pcie_bif", "hdp"};
  std::string bad;
  bool any = false;
  for (const char* block : kBlocks) {
    std::optional<std::string> text = plugin::ReadFile(ras + "/" + block + "_err_count");
    if (!text) continue;
    any = true;
    // "ue: N\nce: M": the uncorrectable count, strictly a number (anything else reads as 0).
    uint64_t ue = RasCount(*text, "ue:").value_or(0);
    if (ue > 0) bad += (bad.empty() ? "" : ", ") + std::string(block) + " " + std::to_string(ue);
  }
  if (!any) return {RAYACCEL_HEALTH_UNKNOWN, "no RAS counters in sysfs"};
  if (!bad.empty()) return {RAYACCEL_HEALTH_UNHEALTHY, "uncorrectable RAS errors: " + bad};
  return {RAYACCEL_HEALTH_HEALTHY, ""};
}

// The GPUs whose memory the transport copies, by the plugin's index (the HIP ordinal): whole
// devices with a bus id of their own. Compute partitions of one GPU share theirs, so HIP's bus
// ids cannot tell them apart: they are left out.
plugin::GpuMemory::BusIds CopiedGpus(const AmdTopology& topo) {
  std::map<std::string, int> uses;
  for (const AmdDevice& d : topo.devices) uses[d.pci_bus_id]++;
  plugin::GpuMemory::BusIds out;
  for (const AmdDevice& d : topo.devices) {
    if (d.schedulable && d.parent_id.empty() && uses[d.pci_bus_id] == 1) {
      out[d.index] = d.pci_bus_id;
    }
  }
  return out;
}

rayaccel_status Initialize(rayaccel_initialize_args* args, rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    auto self = std::make_unique<rayaccel_plugin_instance>();
    self->host = args->host;
    self->topology_dir =
        plugin::ConfigValue(args, "kfd_topology_dir", "/sys/class/kfd/kfd/topology");
    self->sysfs_root = plugin::ConfigValue(args, "sysfs_root", "/sys");
    self->ucx_library = plugin::ConfigValue(args, "ucx_library");
    self->driver_version =
        plugin::ReadLine(self->sysfs_root + "/module/amdgpu/version").value_or("");
    std::string hip = plugin::ConfigValue(args, "hip_library", "");
    std::vector<std::string> libraries =
        hip.empty()
            ? std::vector<std::string>{"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"}
            : std::vector<std::string>{hip};
    std::optional<bool> ipc = plugin::ConfigBool(args, "device_ipc", true);
    if (!ipc) {
      return plugin::Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                          "device_ipc must be true or false, not \"" +
                              plugin::ConfigValue(args, "device_ipc") + "\"");
    }
    rayaccel_plugin_instance* instance = self.get();
    self->memory = MakeHipMemory(std::move(libraries), *ipc, [instance] {
      // No discover yet (a transport used alone): read the topology now.
      std::vector<KfdNode> nodes;
      std::vector<std::string> problems;
      if (!ReadKfdNodes(instance->topology_dir, &nodes, &problems))
        return plugin::GpuMemory::BusIds{};
      return CopiedGpus(BuildTopology(nodes, &problems));
    });
    args->instance = self.release();
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status Shutdown(rayaccel_plugin_instance* self, rayaccel_error* /*error*/) {
  delete self;
  return RAYACCEL_STATUS_OK;
}

rayaccel_status GetProperties(rayaccel_plugin_instance* /*self*/, rayaccel_plugin_properties* props,
                              rayaccel_error* /*error*/) {
  // Ray's AMD path sets HIP_VISIBLE_DEVICES (it refuses ROCR_VISIBLE_DEVICES alone).
  plugin::SetProperties(props, "amd", "GPU", "HIP_VISIBLE_DEVICES", kVersion);
  return RAYACCEL_STATUS_OK;
}

// Each whole GPU of the last discover, from amdgpu's sysfs (its partitions share the GPU's
// counters, so they have no sample of their own), and once per field what sysfs lacks on
// every GPU.
rayaccel_status GetTelemetry(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                             rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::vector<std::pair<uint32_t, std::string>> gpus;  // index, PCI bus id
    {
      std::lock_guard<std::mutex> lock(self->mu);
      for (const AmdDevice& d : self->topo.devices) {
        if (d.parent_id.empty() && !d.pci_bus_id.empty()) gpus.emplace_back(d.index, d.pci_bus_id);
      }
    }
    uint32_t known = 0;
    std::map<uint32_t, std::string> why;
    for (const auto& [index, bdf] : gpus) {
      rayaccel_device_sample s{};
      s.struct_size = sizeof(s);
      s.device_index = index;
      SampleAmdgpu(self->sysfs_root + "/bus/pci/devices/" + bdf, &s, &why);
      known |= s.known;
      rayaccel_status rc = sink->add_sample(sink->host_context, &s);
      if (rc == RAYACCEL_STATUS_RESOURCE_EXHAUSTED || rc == RAYACCEL_STATUS_ABORTED) return rc;
    }
    plugin::ExplainUnknownFields(sink, known, why);
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status Discover(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                         rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::vector<KfdNode> nodes;
    std::vector<std::string> problems;
    AmdTopology topo;
    if (!ReadKfdNodes(self->topology_dir, &nodes, &problems)) {
      plugin::ExplainNoDevices(self->host, sink, problems.front());
    } else {
      topo = BuildTopology(nodes, &problems);
      LogProblems(self, problems);
      if (topo.devices.empty()) {
        plugin::ExplainNoDevices(self->host, sink,
                                 "no GPU node in the KFD topology at " + self->topology_dir);
      }
    }
    for (AmdDevice& d : topo.devices) {
      // The kernel's own NUMA node for the PCI device beats KFD's CPU-node order when present.
      if (std::optional<std::string> numa = plugin::ReadLine(
              self->sysfs_root + "/bus/pci/devices/" + d.pci_bus_id + "/numa_node")) {
        int node = std::atoi(numa->c_str());
        if (node >= 0 && !numa->empty()) d.numa_node = node;
      }
      auto [health, reason] = RasHealth(self, d.pci_bus_id);
      char unique[24];
      std::snprintf(unique, sizeof(unique), "0x%016llx",
                    static_cast<unsigned long long>(d.unique_id));
      rayaccel_device_info info{};
      info.struct_size = sizeof(info);
      info.index = d.index;
      info.id = Str(d.id);
      info.name = Str(d.name);
      info.architecture = Str(d.gfx_target);
      info.memory_bytes = d.memory_bytes;
      info.pci_bus_id = Str(d.pci_bus_id);
      info.pci_vendor_id = 0x1002;
      info.pci_device_id = d.pci_device_id;
      info.numa_node = d.numa_node;
      info.driver_version = Str(self->driver_version);
      std::string firmware = d.firmware_version != 0 ? std::to_string(d.firmware_version) : "";
      info.firmware_version = Str(firmware);
      info.parent_id = Str(d.parent_id);
      info.partition_profile = Str(d.partition_profile);
      info.health = health;
      info.health_reason = Str(reason);
      rayaccel_status rc = sink->add_device(sink->host_context, &info);
      if (rc == RAYACCEL_STATUS_RESOURCE_EXHAUSTED || rc == RAYACCEL_STATUS_ABORTED) return rc;
      if (rc != RAYACCEL_STATUS_OK) continue;
      using plugin::AddAttribute;
      AddAttribute(sink, d.index, "kfd_node", d.kfd_node);
      if (d.kfd_gpu_id != 0) AddAttribute(sink, d.index, "kfd_gpu_id", d.kfd_gpu_id);
      if (d.schedulable) AddAttribute(sink, d.index, "render_minor", d.render_minor);
      AddAttribute(sink, d.index, "compute_units", static_cast<int64_t>(d.compute_units));
      if (d.num_xcc != 0) AddAttribute(sink, d.index, "num_xcc", static_cast<int64_t>(d.num_xcc));
      AddAttribute(sink, d.index, "gfx_target", d.gfx_target);
      if (d.unique_id != 0) AddAttribute(sink, d.index, "unique_id", std::string(unique));
    }
    self->memory->SetDevices(CopiedGpus(topo));
    std::lock_guard<std::mutex> lock(self->mu);
    self->topo = std::move(topo);
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status GetTopology(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                            rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    for (const AmdLink& l : self->topo.links) {
      rayaccel_link link{};
      link.struct_size = sizeof(link);
      link.device_a = l.a;
      link.device_b = l.b;
      link.type = l.type == kIoLinkXgmi   ? RAYACCEL_LINK_XGMI
                  : l.type == kIoLinkPcie ? RAYACCEL_LINK_PCIE
                                          : RAYACCEL_LINK_OTHER;
      link.count = 1;
      link.bandwidth_mbps = l.max_bandwidth;
      link.min_bandwidth_mbps = l.min_bandwidth;
      link.weight = l.weight;
      link.hops = l.hops;
      sink->add_link(sink->host_context, &link);
    }
    for (const auto& [hive, members] : self->topo.hives) {
      char id[24];
      std::snprintf(id, sizeof(id), "0x%016llx", static_cast<unsigned long long>(hive));
      plugin::AddDomain(sink, "xgmi", id, members);
    }
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status PrepareAllocation(rayaccel_plugin_instance* self, rayaccel_allocation_args* args,
                                  rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    std::string list;
    for (size_t i = 0; i < args->device_count; ++i) {
      uint32_t index = args->device_indices[i];
      const AmdDevice* device = nullptr;
      for (const AmdDevice& d : self->topo.devices) {
        if (d.index == index) device = &d;
      }
      if (device == nullptr) {
        return plugin::Fail(error, RAYACCEL_STATUS_NOT_FOUND, "no device " + std::to_string(index));
      }
      if (!device->schedulable) {
        return plugin::Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                            "device " + std::to_string(index) +
                                " is not schedulable (a partitioned GPU: use its partitions)");
      }
      list += (i == 0 ? "" : ",") + std::to_string(index);
    }
    return plugin::SetEnv(args->sink, "HIP_VISIBLE_DEVICES", list);
  });
}

// Transfers go through the shared UCX helper; GPU memory registers where UCX was built with
// ROCm support (UNSUPPORTED otherwise), host memory always.
const rayaccel_transport_api kTransport =
    plugin::ucx::Table(&plugin::ucx::OpenEndpointFor<plugin::ucx::DeviceMemory::kRocm>);

constexpr rayaccel_plugin_api kApi = {
    sizeof(rayaccel_plugin_api),
    RAYACCEL_ABI_VERSION_MAJOR,
    RAYACCEL_ABI_VERSION_MINOR,
    {"rocm", 4},
    RAYACCEL_CAP_TOPOLOGY | RAYACCEL_CAP_ALLOCATION | RAYACCEL_CAP_TRANSPORT |
        RAYACCEL_CAP_TELEMETRY,
    &Initialize,
    &Shutdown,
    &GetProperties,
    &Discover,
    /*get_labels=*/nullptr,
    &GetTopology,
    /*get_health=*/nullptr,  // health comes with each device, from RAS counters
    /*wait_health_events=*/nullptr,
    /*validate_quantity=*/nullptr,
    &PrepareAllocation,
    &kTransport,
    &GetTelemetry,
};

}  // namespace
}  // namespace rayaccel::rocm

extern "C" RAYACCEL_PLUGIN_EXPORT rayaccel_status
rayaccel_plugin_entry(rayaccel_negotiation* negotiation, rayaccel_error* error) {
  return rayaccel::plugin::Negotiate(negotiation, &rayaccel::rocm::kApi, error);
}
