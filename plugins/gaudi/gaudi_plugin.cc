// The Gaudi plugin: Intel Gaudi accelerators from the habanalabs driver's sysfs, addressed by
// module id as Ray's HPU manager and HABANA_VISIBLE_MODULES do (docs/gaudi.md). Needs no
// Habana software. Config keys:
//   sysfs_root  where sysfs starts (default /sys)
#include <algorithm>
#include <memory>
#include <mutex>
#include <string>

#include "common/plugin_util.h"
#include "gaudi/gaudi_host.h"

struct rayaccel_plugin_instance {
  const rayaccel_host_api* host = nullptr;
  std::string sysfs_root;
  std::mutex mu;  // guards `scan`
  rayaccel::gaudi::Scan scan;
};

namespace rayaccel::gaudi {
namespace {

using plugin::Str;

constexpr char kVersion[] = "1.0.0";
constexpr uint64_t kGiB = uint64_t{1} << 30;

struct GenerationFacts {
  const char* name;          // "Intel Gaudi 2"
  const char* architecture;  // "gaudi2"
  uint64_t hbm_bytes;
  // Inside an HLS box every pair of accelerators is linked directly over RoCE ports on the
  // accelerators: Gaudi 1 has one 100 GbE port per peer, Gaudi 2 three 100 GbE ports (21
  // scale-up ports for 7 peers), Gaudi 3 three 200 GbE ports.
  uint32_t ports_per_peer;
  uint64_t port_mbps;  // MB/s per port and direction
};

const GenerationFacts* Facts(int generation) {
  static const GenerationFacts kFacts[] = {
      {"Intel Gaudi", "gaudi", 32 * kGiB, 1, 12500},
      {"Intel Gaudi 2", "gaudi2", 96 * kGiB, 3, 12500},
      {"Intel Gaudi 3", "gaudi3", 128 * kGiB, 3, 25000},
  };
  return generation >= 1 && generation <= 3 ? &kFacts[generation - 1] : nullptr;
}

rayaccel_status Initialize(rayaccel_initialize_args* args, rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    auto self = std::make_unique<rayaccel_plugin_instance>();
    self->host = args->host;
    self->sysfs_root = plugin::ConfigValue(args, "sysfs_root", "/sys");
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
  plugin::SetProperties(props, "intel", "HPU", "HABANA_VISIBLE_MODULES", kVersion);
  return RAYACCEL_STATUS_OK;
}

rayaccel_status Discover(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                         rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    Scan scan = ScanHost(self->sysfs_root);
    for (const std::string& p : scan.problems) plugin::Log(self->host, RAYACCEL_LOG_WARN, p);
    if (scan.accelerators.empty()) {
      plugin::Log(self->host, RAYACCEL_LOG_INFO, "0 devices: " + scan.why_none);
    }
    for (const Accelerator& a : scan.accelerators) {
      const GenerationFacts* facts = Facts(GenerationOf(a.pci.device, a.device_type));
      std::string id = "gaudi-" + a.pci.bus_id;
      std::string reason;
      rayaccel_device_info info{};
      info.struct_size = sizeof(info);
      info.index = a.module_id;  // what HABANA_VISIBLE_MODULES names
      info.id = Str(id);
      info.name = Str(facts != nullptr ? facts->name : "Intel Gaudi");
      if (facts != nullptr) info.architecture = Str(facts->architecture);
      info.memory_bytes = facts != nullptr ? facts->hbm_bytes : 0;
      info.pci_bus_id = Str(a.pci.bus_id);
      info.pci_vendor_id = a.pci.vendor;
      info.pci_device_id = a.pci.device;
      info.numa_node = a.pci.numa_node;
      info.driver_version = Str(scan.driver_version);
      info.firmware_version = Str(a.fw_os_version);
      if (a.status.empty()) {
        info.health = RAYACCEL_HEALTH_UNKNOWN;
        reason = "the driver reports no status";
      } else if (IsOperational(a.status)) {
        info.health = RAYACCEL_HEALTH_HEALTHY;
      } else {
        info.health = RAYACCEL_HEALTH_UNHEALTHY;
        reason = "status: " + a.status;
      }
      info.health_reason = Str(reason);
      rayaccel_status rc = sink->add_device(sink->host_context, &info);
      if (rc == RAYACCEL_STATUS_RESOURCE_EXHAUSTED || rc == RAYACCEL_STATUS_ABORTED) return rc;
      if (rc != RAYACCEL_STATUS_OK) continue;
      using plugin::AddAttribute;
      AddAttribute(sink, a.module_id, "module_id", static_cast<int64_t>(a.module_id));
      AddAttribute(sink, a.module_id, "device_node", "/dev/accel/" + a.name);
      AddAttribute(sink, a.module_id, "device_type", a.device_type);
      AddAttribute(sink, a.module_id, "scale_out_nic", a.scale_out_nic);
      AddAttribute(sink, a.module_id, "cpucp_version", a.cpucp_version);
      if (a.max_power_mw != 0) {
        AddAttribute(sink, a.module_id, "max_power_mw", static_cast<int64_t>(a.max_power_mw));
      }
    }
    std::lock_guard<std::mutex> lock(self->mu);
    self->scan = std::move(scan);
    return RAYACCEL_STATUS_OK;
  });
}

// The box's all-to-all scale-up links between accelerators of one generation, and the box as
// a domain.
rayaccel_status GetTopology(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                            rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    const std::vector<Accelerator>& all = self->scan.accelerators;
    std::vector<uint32_t> members;
    for (size_t i = 0; i < all.size(); ++i) {
      members.push_back(all[i].module_id);
      int gi = GenerationOf(all[i].pci.device, all[i].device_type);
      const GenerationFacts* facts = Facts(gi);
      for (size_t j = i + 1; facts != nullptr && j < all.size(); ++j) {
        if (GenerationOf(all[j].pci.device, all[j].device_type) != gi) continue;
        rayaccel_link link{};
        link.struct_size = sizeof(link);
        link.device_a = all[i].module_id;
        link.device_b = all[j].module_id;
        link.type = RAYACCEL_LINK_SCALE_OUT;
        link.count = facts->ports_per_peer;
        link.bandwidth_mbps = facts->ports_per_peer * facts->port_mbps;
        link.hops = 1;
        sink->add_link(sink->host_context, &link);
      }
    }
    if (members.size() > 1) plugin::AddDomain(sink, "gaudi-box", "local", members);
    return RAYACCEL_STATUS_OK;
  });
}

// Ray's HPU manager sets HABANA_VISIBLE_MODULES to the module ids.
rayaccel_status PrepareAllocation(rayaccel_plugin_instance* self, rayaccel_allocation_args* args,
                                  rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    std::lock_guard<std::mutex> lock(self->mu);
    std::string list;
    for (size_t i = 0; i < args->device_count; ++i) {
      uint32_t module = args->device_indices[i];
      bool known = std::any_of(self->scan.accelerators.begin(), self->scan.accelerators.end(),
                               [&](const Accelerator& a) { return a.module_id == module; });
      if (!known) {
        return plugin::Fail(error, RAYACCEL_STATUS_NOT_FOUND,
                            "no Gaudi with module id " + std::to_string(module));
      }
      list += (i == 0 ? "" : ",") + std::to_string(module);
    }
    return plugin::SetEnv(args->sink, "HABANA_VISIBLE_MODULES", list);
  });
}

constexpr rayaccel_plugin_api kApi = {
    sizeof(rayaccel_plugin_api),
    RAYACCEL_ABI_VERSION_MAJOR,
    RAYACCEL_ABI_VERSION_MINOR,
    {"gaudi", 5},
    RAYACCEL_CAP_TOPOLOGY | RAYACCEL_CAP_ALLOCATION,
    &Initialize,
    &Shutdown,
    &GetProperties,
    &Discover,
    /*get_labels=*/nullptr,
    &GetTopology,
    /*get_health=*/nullptr,  // health comes with each device, from its status file
    /*wait_health_events=*/nullptr,
    /*validate_quantity=*/nullptr,  // Ray's HPU takes any whole number
    &PrepareAllocation,
    /*transport=*/nullptr,
};

}  // namespace
}  // namespace rayaccel::gaudi

extern "C" RAYACCEL_PLUGIN_EXPORT rayaccel_status
rayaccel_plugin_entry(rayaccel_negotiation* negotiation, rayaccel_error* error) {
  return rayaccel::plugin::Negotiate(negotiation, &rayaccel::gaudi::kApi, error);
}
