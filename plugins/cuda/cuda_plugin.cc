// The CUDA plugin: NVIDIA GPUs through NVML, loaded at run time with dlopen (config key
// `nvml_library`, default libnvidia-ml.so.1), so it builds without the CUDA toolkit and loads
// on hosts without a driver, reporting zero devices with the reason.
// Config keys: nvml_library; visible_devices_by = index (default, what Ray sets) | uuid;
// cuda_library (default libcuda.so.1): the driver the transport copies device memory with;
// device_ipc (default true): device memory moves device to device between processes of one
// host through CUDA IPC (false: it is staged through host memory); ucx_library (default
// libucp.so.0): the UCX the transport loads, such as a site's build with CUDA support.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/plugin_util.h"
#include "common/sysfs.h"
#include "common/ucx_transport.h"
#include "cuda/cuda_memory.h"
#include "cuda/nvml.h"
#include "cuda/nvml_library.h"
#include "cuda/nvml_telemetry.h"

namespace rayaccel::cuda {
namespace {

using plugin::Str;

struct Gpu {
  uint32_t index = 0;  // the plugin's index: the NVML index, or kVanishedIndexBase + k
  nvmlDevice_t handle = nullptr;
  std::string uuid, name, pci_bus_id, architecture, compute_capability, lost;
  uint32_t vendor_id = 0, device_id = 0, minor = 0;
  uint64_t memory = 0;
  int32_t numa = -1;           // the NUMA node nearest the GPU (its CPUs' memory)
  int32_t gpu_numa = -1;       // the NUMA node that is the GPU's own memory (coherent platforms)
  std::string fabric_domain;   // "<clusterUUID>.<cliqueId>" when the fabric is complete
  bool vanished = false;       // seen by an earlier scan, gone from NVML now
  int recovery_action = -1;    // what the driver says the GPU needs; -1: it cannot say
  bool name_readable = false;  // nvmlDeviceGetName answered: what the recovery probe compares
};

// A fault learned from an NVML event. It outlives rescans and clears only on evidence that the
// GPU was reset: the driver asked for a recovery action and no longer does, or the GPU was lost
// and reads again.
struct Fault {
  std::string reason;  // "XID 94", "double-bit ECC error"
  bool reset_pending = false;
};

// A MIG device: schedulable on its own, carved out of `parent` (an index into gpus).
struct MigDevice {
  size_t parent = 0;
  std::string uuid, name, profile;
  uint64_t memory = 0;
};

// MIG devices get plugin indices from here on; CUDA_VISIBLE_DEVICES names them by UUID.
constexpr uint32_t kMigIndexBase = 1u << 16;
// GPUs NVML no longer lists keep indices from here, so that the NVML indices of the GPUs still
// there (what CUDA_VISIBLE_DEVICES takes) never shift.
constexpr uint32_t kVanishedIndexBase = 1u << 17;

}  // namespace
}  // namespace rayaccel::cuda

struct rayaccel_plugin_instance {
  const rayaccel_host_api* host = nullptr;
  std::string library;
  // Device memory for the transport, through the CUDA driver (loaded on first use).
  std::unique_ptr<rayaccel::plugin::GpuMemory> memory;
  rayaccel::plugin::ucx::DeviceMemoryOps* device_ops() { return memory.get(); }
  std::string ucx_library;  // config ucx_library: a UCX built with CUDA support, say
  bool by_uuid = false;
  std::set<unsigned long long> ignored_xids;  // application faults, not the GPU's
  // Faults learned from events, by GPU UUID: kept across rescans (guarded by mu).
  std::map<std::string, rayaccel::cuda::Fault> faults;
  std::mutex events_mu;  // guards the three below; never held together with mu while waiting
  nvmlEventSet_t events = nullptr;
  std::set<nvmlDevice_t> registered;  // handles whose events go to `events`
  std::chrono::steady_clock::time_point next_probe;
  std::mutex mu;  // guards everything below
  rayaccel::cuda::Nvml nvml;
  bool ready = false;
  std::string why_not;  // when !ready
  std::string driver_version;
  std::vector<rayaccel::cuda::Gpu> gpus;  // by NVML index
  std::vector<rayaccel::cuda::MigDevice> migs;
  std::map<std::string, rayaccel::cuda::Gpu> seen;  // every GPU ever enumerated, by UUID
};

namespace rayaccel::cuda {
namespace {

constexpr char kVersion[] = "0.1.0";

void Scan(rayaccel_plugin_instance* self);

// The GPUs whose memory the transport copies, by the plugin's index: the ones NVML reads now.
// MIG instances are not among them (CUDA addresses their memory through the parent's context
// only from a process that sees the instance alone). mu held.
std::map<uint32_t, std::string> CopiedGpus(const rayaccel_plugin_instance* self) {
  std::map<uint32_t, std::string> out;
  for (const Gpu& g : self->gpus) {
    if (!g.vanished && g.lost.empty()) out[g.index] = g.pci_bus_id;
  }
  return out;
}

rayaccel_status Initialize(rayaccel_initialize_args* args, rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    auto self = std::make_unique<rayaccel_plugin_instance>();
    self->host = args->host;
    self->library = plugin::ConfigValue(args, "nvml_library", "libnvidia-ml.so.1");
    self->ucx_library = plugin::ConfigValue(args, "ucx_library");
    rayaccel_plugin_instance* instance = self.get();
    std::optional<bool> ipc = plugin::ConfigBool(args, "device_ipc", true);
    if (!ipc) {
      return plugin::Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                          "device_ipc must be true or false, not \"" +
                              plugin::ConfigValue(args, "device_ipc") + "\"");
    }
    self->memory =
        MakeCudaMemory(plugin::ConfigValue(args, "cuda_library", "libcuda.so.1"), *ipc, [instance] {
          std::lock_guard<std::mutex> lock(instance->mu);
          if (instance->ready) Scan(instance);
          return CopiedGpus(instance);
        });
    std::string by = plugin::ConfigValue(args, "visible_devices_by", "index");
    if (by != "index" && by != "uuid") {
      return plugin::Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                          "visible_devices_by must be index or uuid, not \"" + by + "\"");
    }
    self->by_uuid = by == "uuid";
    // NVIDIA's device plugin ignores these by default: faults of the application, not the GPU.
    for (const std::string& x :
         plugin::SplitList(plugin::ConfigValue(args, "ignored_xids", "13,31,43,45,68,109"))) {
      std::optional<uint64_t> xid = plugin::ParseUnsigned(x);
      if (!xid) {
        return plugin::Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                            "ignored_xids takes XID numbers, not \"" + x + "\"");
      }
      self->ignored_xids.insert(*xid);
    }
    self->ready = Open(self->library, &self->nvml, &self->why_not);
    if (self->ready && self->nvml.DriverVersion != nullptr) {
      char v[96] = {};
      if (self->nvml.DriverVersion(v, sizeof(v)) == NVML_SUCCESS) self->driver_version = v;
    }
    args->instance = self.release();
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status Shutdown(rayaccel_plugin_instance* self, rayaccel_error* /*error*/) {
  if (self == nullptr) return RAYACCEL_STATUS_OK;
  if (self->events != nullptr && self->nvml.EventSetFree != nullptr) {
    self->nvml.EventSetFree(self->events);
  }
  if (self->ready) self->nvml.Shutdown();
  rayaccel::plugin::CloseLibrary(self->nvml.handle);
  delete self;
  return RAYACCEL_STATUS_OK;
}

rayaccel_status GetProperties(rayaccel_plugin_instance*, rayaccel_plugin_properties* props,
                              rayaccel_error*) {
  plugin::SetProperties(props, "nvidia", "GPU", "CUDA_VISIBLE_DEVICES", kVersion);
  return RAYACCEL_STATUS_OK;
}

// The MIG devices of GPU `parent`, when MIG mode is on: each is reported with its parent and
// profile ("3g.40gb", from the name NVML gives it: "NVIDIA A100-SXM4-80GB MIG 3g.40gb").
void ScanMig(rayaccel_plugin_instance* self, size_t parent) {
  Nvml& n = self->nvml;
  const Gpu& gpu = self->gpus[parent];
  unsigned current = 0, pending = 0, max = 0;
  if (n.MigMode == nullptr || n.MaxMig == nullptr || n.MigHandle == nullptr ||
      n.MigMode(gpu.handle, &current, &pending) != NVML_SUCCESS || current != 1 ||
      n.MaxMig(gpu.handle, &max) != NVML_SUCCESS) {
    return;
  }
  for (unsigned k = 0; k < max; ++k) {
    nvmlDevice_t handle = nullptr;
    if (n.MigHandle(gpu.handle, k, &handle) != NVML_SUCCESS) continue;
    MigDevice m;
    m.parent = parent;
    char text[128] = {};
    if (n.GetUuid(handle, text, sizeof(text)) != NVML_SUCCESS) continue;
    m.uuid = text;
    if (n.GetName(handle, text, sizeof(text)) == NVML_SUCCESS) m.name = text;
    size_t at = m.name.rfind(" MIG ");
    m.profile = at == std::string::npos ? "MIG" : m.name.substr(at + 5);
    nvmlMemory_t mem{};
    if (n.GetMemory != nullptr && n.GetMemory(handle, &mem) == NVML_SUCCESS) m.memory = mem.total;
    self->migs.push_back(m);
  }
}

// Reads every GPU; a GPU that answers NVML_ERROR_GPU_IS_LOST stays listed, unhealthy.
void Scan(rayaccel_plugin_instance* self) {
  Nvml& n = self->nvml;
  self->gpus.clear();
  self->migs.clear();
  unsigned count = 0;
  if (n.GetCount(&count) != NVML_SUCCESS) return;
  for (unsigned i = 0; i < count; ++i) {
    Gpu g;
    g.index = i;
    // Any call answering GPU_IS_LOST marks the GPU lost; it stays listed at its NVML index.
    auto ok = [&g](nvmlReturn_t rc) {
      if (rc == NVML_ERROR_GPU_IS_LOST && g.lost.empty()) {
        g.lost = "NVML_ERROR_GPU_IS_LOST: the GPU fell off the bus";
      }
      return rc == NVML_SUCCESS;
    };
    char text[128] = {};
    if (!ok(n.GetHandle(i, &g.handle)) || !ok(n.GetUuid(g.handle, text, sizeof(text)))) {
      // No identity to report under: a placeholder keeps the index taken and says why.
      g.uuid = "nvml-index-" + std::to_string(i);
      g.name = "NVIDIA GPU (unreadable)";
      if (g.lost.empty()) g.lost = "NVML cannot read this GPU";
      g.handle = nullptr;
      self->gpus.push_back(g);
      continue;
    }
    g.uuid = text;
    nvmlPciInfo_t pci{};
    if (ok(n.GetPci(g.handle, &pci))) {
      g.pci_bus_id = plugin::FormatPciBusId(pci.domain, pci.bus, pci.device, 0);
      g.vendor_id = pci.pciDeviceId & 0xFFFF;
      g.device_id = pci.pciDeviceId >> 16;
    }
    g.name_readable = ok(n.GetName(g.handle, text, sizeof(text)));
    g.name = g.name_readable ? text : "NVIDIA GPU";
    if (!g.lost.empty()) {
      g.name = "NVIDIA GPU (lost)";
      self->gpus.push_back(g);
      continue;
    }
    nvmlMemory_t mem{};
    if (n.GetMemory != nullptr && ok(n.GetMemory(g.handle, &mem))) g.memory = mem.total;
    int major = 0, minor = 0;
    if (n.GetCc != nullptr && n.GetCc(g.handle, &major, &minor) == NVML_SUCCESS) {
      g.compute_capability = std::to_string(major) + "." + std::to_string(minor);
    }
    nvmlDeviceArchitecture_t arch = 0;
    if (n.GetArch != nullptr && n.GetArch(g.handle, &arch) == NVML_SUCCESS) {
      g.architecture = ArchitectureName(arch);
    }
    g.numa = NearestNumaNode(n, g.handle);
    unsigned gpu_numa = 0;
    if (n.GetNuma != nullptr && n.GetNuma(g.handle, &gpu_numa) == NVML_SUCCESS) {
      g.gpu_numa = static_cast<int32_t>(gpu_numa);
    }
    unsigned dev_minor = 0;
    if (n.GetMinor != nullptr && n.GetMinor(g.handle, &dev_minor) == NVML_SUCCESS) {
      g.minor = dev_minor;
    }
    g.recovery_action = RecoveryAction(n, g.handle);
    if (n.Fabric != nullptr) {
      nvmlGpuFabricInfoV_t info{};
      info.version = nvmlGpuFabricInfo_v2;
      static const unsigned char kZero[NVML_GPU_FABRIC_UUID_LEN] = {};
      if (n.Fabric(g.handle, &info) == NVML_SUCCESS &&
          info.state == NVML_GPU_FABRIC_STATE_COMPLETED && info.status == NVML_SUCCESS &&
          std::memcmp(info.clusterUuid, kZero, sizeof(kZero)) != 0) {
        g.fabric_domain = Uuid(info.clusterUuid) + "." + std::to_string(info.cliqueId);
      }
    }
    self->gpus.push_back(g);
    ScanMig(self, self->gpus.size() - 1);
  }
  // A GPU seen before that NVML no longer lists has vanished (fell off the bus, was unbound):
  // it stays listed, with the reason, after the GPUs NVML still has; never silently dropped.
  std::set<std::string> present;
  for (const Gpu& g : self->gpus) present.insert(g.uuid);
  uint32_t vanished = 0;
  for (const auto& [uuid, seen] : self->seen) {
    if (present.count(uuid) > 0) continue;
    Gpu gone = seen;
    gone.index = kVanishedIndexBase + vanished++;
    gone.handle = nullptr;
    gone.vanished = true;
    gone.lost = "vanished: NVML no longer lists this GPU";
    self->gpus.push_back(gone);
  }
  for (const Gpu& g : self->gpus) {
    if (!g.vanished && g.handle != nullptr) self->seen[g.uuid] = g;
  }
  // Settle the faults events taught against what each GPU shows now.
  for (auto it = self->faults.begin(); it != self->faults.end();) {
    auto g = std::find_if(self->gpus.begin(), self->gpus.end(),
                          [&](const Gpu& x) { return x.uuid == it->first; });
    Fault& fault = it->second;
    bool recovering = g != self->gpus.end() && (!g->lost.empty() || g->recovery_action > 0);
    bool recovered = g != self->gpus.end() && !recovering && fault.reset_pending;
    fault.reset_pending = fault.reset_pending || recovering;  // the reset it needs is under way
    if (recovered) {
      plugin::Log(self->host, RAYACCEL_LOG_INFO,
                  "GPU " + g->uuid + " was reset after " + fault.reason + "; healthy again");
      it = self->faults.erase(it);
    } else {
      ++it;
    }
  }
}

// Why a GPU cannot be used, or "" when it can.
std::string Unhealthy(const rayaccel_plugin_instance* self, const Gpu& g) {
  if (!g.lost.empty()) return g.lost;
  std::string reason;
  if (auto f = self->faults.find(g.uuid); f != self->faults.end()) reason = f->second.reason;
  if (g.recovery_action > 0) {
    reason += (reason.empty() ? "" : "; ") + RecoveryActionText(g.recovery_action);
  }
  return reason;
}

// Each GPU of the last scan that NVML still reads (a lost one has no sample; MIG devices are
// their GPU's), and once per field what NVML could not say on every GPU.
rayaccel_status GetTelemetry(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                             rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    if (!self->ready) return RAYACCEL_STATUS_OK;
    uint32_t known = 0;
    std::map<uint32_t, std::string> why;
    for (const Gpu& g : self->gpus) {
      if (g.handle == nullptr || g.vanished || !g.lost.empty()) continue;
      rayaccel_device_sample s{};
      s.struct_size = sizeof(s);
      s.device_index = g.index;
      std::map<uint32_t, std::string> unknown;
      if (!SampleGpu(self->nvml, g.handle, &s, &unknown)) continue;
      known |= s.known;
      why.insert(unknown.begin(), unknown.end());
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
    std::lock_guard<std::mutex> lock(self->mu);
    if (!self->ready) {
      plugin::ExplainNoDevices(self->host, sink, self->why_not);
      return RAYACCEL_STATUS_OK;
    }
    Scan(self);
    self->memory->SetDevices(CopiedGpus(self));
    if (self->gpus.empty()) plugin::ExplainNoDevices(self->host, sink, "NVML sees no GPU");
    for (const Gpu& g : self->gpus) {
      const uint32_t i = g.index;
      rayaccel_device_info info{};
      info.struct_size = sizeof(info);
      info.index = i;
      info.id = Str(g.uuid);
      info.name = Str(g.name);
      info.architecture = Str(g.architecture);
      info.memory_bytes = g.memory;
      info.pci_bus_id = Str(g.pci_bus_id);
      info.pci_vendor_id = g.vendor_id;
      info.pci_device_id = g.device_id;
      info.numa_node = g.numa;
      info.driver_version = Str(self->driver_version);
      const std::string reason = Unhealthy(self, g);
      // A vanished GPU is reported unhealthy rather than unknown: the registry counts devices
      // of unknown health for Ray, and nothing can run on a GPU the driver lost.
      info.health = reason.empty() ? RAYACCEL_HEALTH_HEALTHY : RAYACCEL_HEALTH_UNHEALTHY;
      info.health_reason = Str(reason);
      rayaccel_status rc = sink->add_device(sink->host_context, &info);
      if (rc == RAYACCEL_STATUS_RESOURCE_EXHAUSTED || rc == RAYACCEL_STATUS_ABORTED) return rc;
      if (rc != RAYACCEL_STATUS_OK || !g.lost.empty()) continue;
      plugin::AddAttribute(sink, i, "compute_capability", g.compute_capability,
                           RAYACCEL_ATTRIBUTE_VERSION);
      plugin::AddAttribute(sink, i, "minor_number", static_cast<int64_t>(g.minor));
      if (g.gpu_numa >= 0) {
        plugin::AddAttribute(sink, i, "gpu_numa_node", static_cast<int64_t>(g.gpu_numa));
      }
    }
    for (uint32_t k = 0; k < self->migs.size(); ++k) {
      const MigDevice& m = self->migs[k];
      const Gpu& parent = self->gpus[m.parent];
      rayaccel_device_info info{};
      info.struct_size = sizeof(info);
      info.index = kMigIndexBase + k;
      info.id = Str(m.uuid);
      info.name = Str(m.name);
      info.accelerator_type = Str("");
      info.architecture = Str(parent.architecture);
      info.memory_bytes = m.memory;
      info.pci_bus_id = Str(parent.pci_bus_id);
      info.pci_vendor_id = parent.vendor_id;
      info.pci_device_id = parent.device_id;
      info.numa_node = parent.numa;
      info.driver_version = Str(self->driver_version);
      info.parent_id = Str(parent.uuid);
      info.partition_profile = Str(m.profile);
      bool bad = !Unhealthy(self, parent).empty();
      info.health = bad ? RAYACCEL_HEALTH_UNHEALTHY : RAYACCEL_HEALTH_HEALTHY;
      std::string reason = bad ? "the parent GPU is unhealthy" : "";
      info.health_reason = Str(reason);
      rayaccel_status rc = sink->add_device(sink->host_context, &info);
      if (rc == RAYACCEL_STATUS_RESOURCE_EXHAUSTED || rc == RAYACCEL_STATUS_ABORTED) return rc;
      // CUDA enumerates one MIG device per process: the allocator offers it only alone.
      if (rc == RAYACCEL_STATUS_OK) {
        plugin::AddAttribute(sink, kMigIndexBase + k, "lease_alone", int64_t{1},
                             RAYACCEL_ATTRIBUTE_BOOL);
      }
    }
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status GetTopology(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                            rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    Nvml& n = self->nvml;
    const size_t count = self->gpus.size();
    std::map<std::string, size_t> by_bus;
    for (size_t i = 0; i < count; ++i) by_bus[self->gpus[i].pci_bus_id] = i;
    // NVLinks per GPU: to which peer, or to a switch.
    std::vector<std::vector<uint32_t>> direct(count, std::vector<uint32_t>(count, 0));
    std::vector<uint32_t> to_switch(count, 0);
    for (size_t i = 0; i < count && n.LinkState != nullptr && n.RemotePci != nullptr; ++i) {
      if (!self->gpus[i].lost.empty()) continue;
      for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; ++link) {
        nvmlEnableState_t active = 0;
        if (n.LinkState(self->gpus[i].handle, link, &active) != NVML_SUCCESS || active != 1) {
          continue;
        }
        nvmlIntNvLinkDeviceType_t type = NVML_NVLINK_DEVICE_TYPE_GPU;
        if (n.RemoteType != nullptr) n.RemoteType(self->gpus[i].handle, link, &type);
        if (type == NVML_NVLINK_DEVICE_TYPE_SWITCH) {
          ++to_switch[i];
          continue;
        }
        nvmlPciInfo_t remote{};
        if (n.RemotePci(self->gpus[i].handle, link, &remote) != NVML_SUCCESS) continue;
        auto peer =
            by_bus.find(plugin::FormatPciBusId(remote.domain, remote.bus, remote.device, 0));
        if (peer != by_bus.end() && peer->second != i) ++direct[i][peer->second];
      }
    }
    for (size_t a = 0; a < count; ++a) {
      for (size_t b = a + 1; b < count; ++b) {
        const Gpu& ga = self->gpus[a];
        const Gpu& gb = self->gpus[b];
        if (!ga.lost.empty() || !gb.lost.empty()) continue;
        rayaccel_link link{};
        link.struct_size = sizeof(link);
        link.device_a = ga.index;
        link.device_b = gb.index;
        nvmlGpuTopologyLevel_t level = 0;
        if (n.Ancestor != nullptr && n.Ancestor(ga.handle, gb.handle, &level) == NVML_SUCCESS) {
          link.type = RAYACCEL_LINK_PCIE;
          link.pcie_path = PathOf(level);
          link.count = 1;
          sink->add_link(sink->host_context, &link);
        }
        uint32_t nv = std::max(direct[a][b], direct[b][a]);
        nvmlGpuP2PStatus_t p2p = 1;
        if (nv == 0 && to_switch[a] > 0 && to_switch[b] > 0 && n.P2p != nullptr &&
            n.P2p(ga.handle, gb.handle, NVML_P2P_CAPS_INDEX_NVLINK, &p2p) == NVML_SUCCESS &&
            p2p == NVML_P2P_STATUS_OK) {
          nv = std::min(to_switch[a], to_switch[b]);  // through NVSwitch: all links usable
        }
        if (nv > 0) {
          link.type = RAYACCEL_LINK_NVLINK;
          link.pcie_path = RAYACCEL_PCIE_PATH_UNKNOWN;
          link.count = nv;
          sink->add_link(sink->host_context, &link);
        }
      }
    }
    // Multi-node NVLink fabric domains (NVL72-class): one per "<cluster UUID>.<clique>".
    std::map<std::string, std::vector<uint32_t>> domains;
    for (uint32_t i = 0; i < count; ++i) {
      const Gpu& g = self->gpus[i];
      if (!g.fabric_domain.empty() && g.lost.empty()) domains[g.fabric_domain].push_back(g.index);
    }
    for (const auto& [id, members] : domains) plugin::AddDomain(sink, "nvlink", id, members);
    return RAYACCEL_STATUS_OK;
  });
}

// Whether a GPU that is lost, faulty or waiting for a recovery action looks different now than
// at the last scan: a reset shows no event of its own, so it is looked for at most twice a second
// while a GPU needs one. Called with events_mu held.
bool ProbeRecovery(rayaccel_plugin_instance* self) {
  auto now = std::chrono::steady_clock::now();
  if (now < self->next_probe) return false;
  self->next_probe = now + std::chrono::milliseconds(500);
  std::lock_guard<std::mutex> lock(self->mu);
  const Nvml& n = self->nvml;
  size_t listed = 0;
  bool vanished = false;
  for (const Gpu& g : self->gpus) {
    if (g.vanished) {
      vanished = true;
      continue;
    }
    ++listed;
    if (g.handle == nullptr || Unhealthy(self, g).empty()) continue;
    // The same questions the scan asked, so that an answer that stays put never reads as news.
    char name[96] = {};
    bool readable = n.GetName(g.handle, name, sizeof(name)) == NVML_SUCCESS;
    if (readable != g.name_readable) return true;
    if (readable && g.lost.empty() && RecoveryAction(n, g.handle) != g.recovery_action) {
      return true;
    }
  }
  unsigned count = 0;
  return vanished && n.GetCount(&count) == NVML_SUCCESS && count > listed;
}

// Blocks for NVML events: critical XIDs (except the ignored ones) and double-bit ECC errors
// make a GPU unhealthy, with the XID as the reason; single-bit ECC errors are corrected and
// change nothing.
rayaccel_status WaitHealthEvents(rayaccel_plugin_instance* self, rayaccel_health_wait_args* args,
                                 rayaccel_error* error) {
  return plugin::Guard(error, [&]() -> rayaccel_status {
    Nvml& n = self->nvml;
    std::lock_guard<std::mutex> events_lock(self->events_mu);
    if (!self->ready || n.EventSetCreate == nullptr || n.RegisterEvents == nullptr ||
        n.EventWait == nullptr) {
      return rayaccel_error_set(error, RAYACCEL_STATUS_UNSUPPORTED, "no NVML events here");
    }
    if (self->events == nullptr && n.EventSetCreate(&self->events) != NVML_SUCCESS) {
      self->events = nullptr;
      return rayaccel_error_set(error, RAYACCEL_STATUS_UNAVAILABLE, "nvmlEventSetCreate failed");
    }
    // Register every GPU the latest scan found and that is not registered yet, for the event
    // types it supports (a GPU without ECC refuses the whole mask otherwise).
    std::vector<nvmlDevice_t> handles;
    {
      std::lock_guard<std::mutex> lock(self->mu);
      for (const Gpu& g : self->gpus) {
        if (g.handle != nullptr && self->registered.count(g.handle) == 0)
          handles.push_back(g.handle);
      }
    }
    for (nvmlDevice_t h : handles) {
      unsigned long long types = nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError;
      unsigned long long supported = types;
      if (n.SupportedEvents != nullptr && n.SupportedEvents(h, &supported) == NVML_SUCCESS) {
        types &= supported;
      }
      if (types != 0 && n.RegisterEvents(h, types, self->events) == NVML_SUCCESS) {
        self->registered.insert(h);
      } else {
        plugin::Log(self->host, RAYACCEL_LOG_WARN, "a GPU cannot report XID or ECC events");
        self->registered.insert(h);  // do not retry it on every wait
      }
    }
    nvmlEventData_t event{};
    nvmlReturn_t rc = n.EventWait(self->events, &event, args->timeout_ms);
    if (rc == NVML_ERROR_TIMEOUT) {
      return ProbeRecovery(self) ? RAYACCEL_STATUS_OK : RAYACCEL_STATUS_TIMEOUT;
    }
    // A GPU lost while waiting is a change: the rescan that follows reports it.
    if (rc == NVML_ERROR_GPU_IS_LOST) return RAYACCEL_STATUS_OK;
    if (rc != NVML_SUCCESS) {
      return rayaccel_error_set(error, RAYACCEL_STATUS_UNAVAILABLE, "nvmlEventSetWait_v2 failed");
    }
    std::string reason;
    if (event.eventType == nvmlEventTypeXidCriticalError) {
      // Not a fault: the rescan this asks for reads the new recovery action.
      if (event.eventData == RAYACCEL_NVML_XID_RECOVERY_ACTION_CHANGED) return RAYACCEL_STATUS_OK;
      if (self->ignored_xids.count(event.eventData) > 0) return RAYACCEL_STATUS_TIMEOUT;
      reason = "XID " + std::to_string(event.eventData);
    } else if (event.eventType == nvmlEventTypeDoubleBitEccError) {
      reason = "double-bit ECC error";
    } else {
      return RAYACCEL_STATUS_TIMEOUT;
    }
    if (event.device == nullptr) return RAYACCEL_STATUS_TIMEOUT;
    std::lock_guard<std::mutex> lock(self->mu);
    for (const Gpu& g : self->gpus) {
      if (g.handle != event.device) continue;
      auto [it, inserted] = self->faults.emplace(g.uuid, Fault{reason});
      bool news = inserted || it->second.reason != reason || it->second.reset_pending;
      it->second = Fault{reason};  // a new fault: a reset seen before it does not clear it
      if (!news) return RAYACCEL_STATUS_TIMEOUT;  // the same fault again
      args->sink->set_health(args->sink->host_context, g.index, RAYACCEL_HEALTH_UNHEALTHY,
                             Str(reason));
      return RAYACCEL_STATUS_OK;
    }
    return RAYACCEL_STATUS_TIMEOUT;
  });
}

rayaccel_status PrepareAllocation(rayaccel_plugin_instance* self, rayaccel_allocation_args* args,
                                  rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    std::string list;
    for (size_t i = 0; i < args->device_count; ++i) {
      uint32_t index = args->device_indices[i];
      std::string name;
      // CUDA enumerates one MIG device per process, and never a GPU in MIG mode as a whole:
      // a set CUDA cannot use is refused, not handed to a worker that would see part of it.
      const bool mig = index >= kMigIndexBase && index - kMigIndexBase < self->migs.size();
      if (mig && args->device_count > 1) {
        return plugin::Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                            "MIG device " + self->migs[index - kMigIndexBase].uuid +
                                " is leased alone: CUDA enumerates one MIG device per process");
      }
      if (!mig && index < self->gpus.size()) {
        for (const MigDevice& m : self->migs) {
          if (m.parent == index) {
            return plugin::Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                                "GPU " + std::to_string(index) +
                                    " is in MIG mode: lease its MIG devices, not the GPU");
          }
        }
      }
      if (mig) {
        name = self->migs[index - kMigIndexBase].uuid;  // CUDA takes MIG devices by UUID only
      } else if (index < self->gpus.size() && self->gpus[index].index == index &&
                 self->gpus[index].handle != nullptr) {
        name = self->by_uuid ? self->gpus[index].uuid : std::to_string(index);
      } else {
        return plugin::Fail(error, RAYACCEL_STATUS_NOT_FOUND, "no GPU " + std::to_string(index));
      }
      list += (i == 0 ? "" : ",") + name;
    }
    // NVML numbers GPUs in PCI bus order; CUDA must too, or the indices name other GPUs.
    rayaccel_status rc = plugin::SetEnv(args->sink, "CUDA_DEVICE_ORDER", "PCI_BUS_ID");
    if (rc != RAYACCEL_STATUS_OK) return rc;
    return plugin::SetEnv(args->sink, "CUDA_VISIBLE_DEVICES", list);
  });
}

// Transfers go through the shared UCX helper; GPU memory registers where UCX was built with
// CUDA support (UNSUPPORTED otherwise), host memory always.
const rayaccel_transport_api kTransport =
    plugin::ucx::Table(&plugin::ucx::OpenEndpointFor<plugin::ucx::DeviceMemory::kCuda>);

constexpr rayaccel_plugin_api kApi = {
    sizeof(rayaccel_plugin_api),
    RAYACCEL_ABI_VERSION_MAJOR,
    RAYACCEL_ABI_VERSION_MINOR,
    {"cuda", 4},
    RAYACCEL_CAP_TOPOLOGY | RAYACCEL_CAP_ALLOCATION | RAYACCEL_CAP_HEALTH_EVENTS |
        RAYACCEL_CAP_TRANSPORT | RAYACCEL_CAP_TELEMETRY,
    &Initialize,
    &Shutdown,
    &GetProperties,
    &Discover,
    /*get_labels=*/nullptr,  // the registry turns the fabric domain into ray.io/gpu-domain
    &GetTopology,
    /*get_health=*/nullptr,  // with each device, including what events taught
    &WaitHealthEvents,
    /*validate_quantity=*/nullptr,
    &PrepareAllocation,
    &kTransport,
    &GetTelemetry,
};

}  // namespace
}  // namespace rayaccel::cuda

extern "C" RAYACCEL_PLUGIN_EXPORT rayaccel_status
rayaccel_plugin_entry(rayaccel_negotiation* negotiation, rayaccel_error* error) {
  return rayaccel::plugin::Negotiate(negotiation, &rayaccel::cuda::kApi, error);
}
